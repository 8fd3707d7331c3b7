"""The serving call of a SavedModel answers exactly as TensorFlow's public signature call does."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from registry.contracts import check_inputs, rows_to_columns
from registry.saved_model import SignatureRunner
from registry.schema import ModelSchema
from tests.support import TrainedModels

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def runner(trained: TrainedModels) -> SignatureRunner:
    return SignatureRunner(trained.paths[1])


def _columns(trained: TrainedModels, rows: list[dict[str, object]]) -> dict[str, np.ndarray]:
    schema = ModelSchema.from_dict(json.loads((trained.paths[1] / "driftwarden" / "schema.json").read_text()))
    values, n = rows_to_columns(schema, rows)
    return check_inputs(schema, values, n, max_rows=n).arrays


def test_the_flat_call_is_used_on_the_pinned_tensorflow(runner: SignatureRunner) -> None:
    assert runner.flat_call  # the probe at load found it and it answered as the public call


@pytest.mark.parametrize("n", [1, 7, 32, 300])
def test_outputs_equal_the_public_signature_call(
    trained: TrainedModels, runner: SignatureRunner, n: int
) -> None:
    import tensorflow as tf

    columns = _columns(trained, trained.rows[:n])
    served = runner(columns)
    fn = tf.saved_model.load(str(trained.paths[1])).signatures["serving_default"]
    feeds = {name: tf.constant(columns[name], dtype=dtype) for name, dtype in runner.inputs.items()}
    direct = {name: value.numpy() for name, value in fn(**feeds).items()}
    assert set(served) == set(direct)
    for name in direct:
        assert served[name].dtype == direct[name].dtype
        assert served[name].tobytes() == direct[name].tobytes()  # bit for bit


def test_without_the_flat_call_the_public_call_answers_the_same(
    trained: TrainedModels, runner: SignatureRunner, monkeypatch: pytest.MonkeyPatch
) -> None:
    columns = _columns(trained, trained.rows[:50])
    flat = runner(columns)
    monkeypatch.setattr(runner, "flat_call", False)
    public = runner(columns)
    assert {k: v.tobytes() for k, v in flat.items()} == {k: v.tobytes() for k, v in public.items()}


SERVE_THREADS = """
import tensorflow as tf
from fastapi.testclient import TestClient
from core.config import get_settings
from service.serving.app import create_app

with TestClient(create_app(get_settings())) as client:
    assert client.get("/status").status_code == 200
print(tf.config.threading.get_intra_op_parallelism_threads())
"""


def fresh_python(code: str, env: dict[str, str | None] | None = None) -> subprocess.CompletedProcess[str]:
    """Run ``code`` in a new interpreter (TensorFlow not yet started) from the project root, with ``env``
    over this one's (None: unset); it must exit 0."""
    merged = {**os.environ, "PYTHONPATH": str(ROOT), **(env or {})}
    proc = subprocess.run(
        [sys.executable, "-c", code],
        cwd=ROOT,
        env={k: v for k, v in merged.items() if v is not None},
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc


@pytest.mark.parametrize(("setting", "want"), [(None, 1), ("3", 3), ("0", 0)])
def test_the_server_sets_the_model_threads_before_loading(
    tmp_path: Path, setting: str | None, want: int
) -> None:
    """A fresh serving process: DRIFTWARDEN_MODEL_THREADS (default 1, 0: TensorFlow's own) is in force."""
    env: dict[str, str | None] = {
        "DRIFTWARDEN_DATABASE_URL": f"sqlite:///{tmp_path / 'x.db'}",
        "DRIFTWARDEN_REGISTRY_PATH": str(tmp_path / "registry"),
        "DRIFTWARDEN_SPOOL_PATH": str(tmp_path / "spool"),
        "DRIFTWARDEN_MONITOR_ENABLED": "false",
        "DRIFTWARDEN_MODEL_THREADS": setting,
    }
    proc = fresh_python(SERVE_THREADS, env)
    assert int(proc.stdout.strip().splitlines()[-1]) == want


def test_a_late_thread_setting_keeps_the_earlier_one() -> None:
    """TensorFlow takes the setting only before it runs anything: later calls report what stays in force."""
    code = (
        "import tensorflow as tf\n"
        "from registry.saved_model import limit_threads\n"
        "assert limit_threads(intra_op=1) == 1\n"
        "tf.constant(1.0) + 1.0\n"
        "print(limit_threads(intra_op=2))\n"
    )
    proc = fresh_python(code)
    assert proc.stdout.strip().splitlines()[-1] == "1"
    assert "keep TensorFlow's earlier thread setting, not 2" in proc.stderr


def test_a_late_call_asking_for_the_setting_in_force_says_nothing() -> None:
    """Set before TensorFlow runs, the same setting asked again later (a server started in a process that
    already trained, as the demo's) is in force: nothing to warn about."""
    code = (
        "import tensorflow as tf\n"
        "from registry.saved_model import limit_threads\n"
        "assert limit_threads(intra_op=1) == 1\n"
        "tf.constant(1.0) + 1.0\n"
        "print(limit_threads(intra_op=1))\n"
    )
    proc = fresh_python(code)
    assert proc.stdout.strip().splitlines()[-1] == "1"
    assert "thread setting" not in proc.stderr
