"""`driftwarden train --task T --model-fn FILE.py:FUNC`: the team's own Keras network, in every mode.

A plain Keras file written by the test builds the network; the exported SavedModel answers with the task's
one output and loads without that file; the lineage records the builder's reference and file hash. A
broken builder ends `train` in one line (exit 2) before any cluster process starts, and a version imported
without a builder cannot be retrained (409 / exit 2, naming the fix).
"""

from __future__ import annotations

import hashlib
import json
import re
import shutil
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
from pydantic import SecretStr
from typer.testing import CliRunner

from core.config import Settings
from core.database import Database, open_database
from core.errors import Conflict
from core.tabular import write_table
from registry.schema import OUTPUT_NAMES, Task
from registry.service import register_version
from service.cli import app
from tests.training.helpers import Workspace, kill, pid_alive, wait_for
from training.cluster.builders import BUILTIN_REF, ModelFnError, describe, normalize, require_retrainable
from training.cluster.datagen import TARGETS, generate

runner = CliRunner()

BUILDER = '''
import keras


def build(input_dim, outputs, task):
    """A small plain-Keras network (no driftwarden import)."""
    return keras.Sequential(
        [
            keras.Input(shape=(input_dim,)),
            keras.layers.Dense(24, activation="tanh"),
            keras.layers.Dense(outputs),
        ],
        name=f"team_net_{task}",
    )


def build_lazy(input_dim, outputs, task):
    """No Input layer: built on first use."""
    return keras.Sequential([keras.layers.Dense(8, activation="relu"), keras.layers.Dense(outputs)])


def wrong_width(input_dim, outputs, task):
    return keras.Sequential([keras.Input(shape=(input_dim,)), keras.layers.Dense(outputs + 1)])


def not_a_model(input_dim, outputs, task):
    return "a string"


def positional_only(width, k):
    return None


def raises(input_dim, outputs, task):
    raise RuntimeError("the team's bug")
'''

REGISTERED = re.compile(r"registered ([\w-]+):(\d+) \(staged\)")


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """The builder file and a small table per task (2,000 rows)."""
    root = tmp_path_factory.mktemp("model_fn")
    out = {"builder": root / "team_model.py"}
    out["builder"].write_text(BUILDER)
    (root / "broken_import.py").write_text("import not_a_module_anywhere\n")
    out["broken_import"] = root / "broken_import.py"
    for task in Task:
        out[task.short] = root / f"{task.short}.csv"
        write_table(generate(2000, seed=3, task=task), out[task.short])
    return out


def _lineage(ws: Workspace, model: str, version: str) -> dict:
    path = ws.root / "var" / "models" / model / version / "driftwarden" / "lineage.json"
    return json.loads(path.read_text())


def _check_export(ws: Workspace, model: str, version: str, task: Task, builder: Path) -> None:
    """The SavedModel answers with the task's one output, loaded here (never having imported the builder)
    while the builder's file is away."""
    import tensorflow as tf

    from registry.service import read_schema

    path = ws.root / "var" / "models" / model / version
    schema = read_schema(path=path)
    assert schema.kind is task and schema.output.name == OUTPUT_NAMES[task]
    moved = builder.with_suffix(".away")
    shutil.move(builder, moved)
    try:
        loaded = tf.saved_model.load(str(path))
    finally:
        shutil.move(moved, builder)
    fn = loaded.signatures["serving_default"]
    assert set(fn.structured_outputs) == {OUTPUT_NAMES[task]}
    rows = generate(5, seed=11)
    inputs = {}
    for f in schema.features:
        col = rows[f.name]
        inputs[f.name] = tf.constant(
            col.astype(np.float32) if f.kind.value == "numeric" else col.astype(str).astype(object)
        )
    out = fn(**inputs)[OUTPUT_NAMES[task]].numpy()
    if task is Task.MULTICLASS:
        assert out.shape == (5, 3) and schema.classes == ("high", "low", "medium")
        np.testing.assert_allclose(out.sum(axis=1), 1.0, atol=1e-5)
    else:
        assert out.shape == (5,)
        if task is Task.BINARY:
            assert ((out >= 0) & (out <= 1)).all()
    lineage = _lineage(ws, model, version)
    assert lineage["task"] == task.short
    assert lineage["model_fn"] == {
        "ref": f"{builder.resolve()}:build",
        "sha256": hashlib.sha256(builder.read_bytes()).hexdigest(),
    }


def _train(ws: Workspace, files: dict[str, Path], task: Task, *extra: str, fn: str = "build") -> tuple:
    args = (
        "train",
        "--model",
        f"team-{task.short}",
        "--data",
        str(files[task.short]),
        "--task",
        task.short,
        "--model-fn",
        f"{files['builder']}:{fn}",
        "--epochs",
        "1",
        *extra,
    )
    return args


@pytest.mark.parametrize("task", list(Task), ids=[t.short for t in Task])
def test_local_mode_trains_the_team_network_for_each_task(
    workspace: Workspace, files: dict[str, Path], task: Task
) -> None:
    rc, out = workspace.run(*_train(workspace, files, task, "--mode", "local"), log_name="train.log")
    assert rc == 0, out[-4000:]
    m = REGISTERED.search(out)
    assert m, out[-2000:]
    headline = {Task.BINARY: "ROC AUC", Task.MULTICLASS: "macro F1", Task.REGRESSION: "RMSE"}[task]
    assert headline in out
    _check_export(workspace, m.group(1), m.group(2), task, files["builder"])


@pytest.mark.cluster
@pytest.mark.parametrize("task", [Task.MULTICLASS, Task.REGRESSION], ids=["multiclass", "regression"])
def test_async_cluster_trains_the_team_network(
    workspace: Workspace, files: dict[str, Path], task: Task
) -> None:
    """Parameter servers (1 ps, 2 workers); binary: the killed-worker test below."""
    extra = ("--mode", "async", "--ps", "1", "--workers", "2")
    rc, out = workspace.run(*_train(workspace, files, task, *extra), log_name="train.log")
    assert rc == 0, out[-4000:]
    m = REGISTERED.search(out)
    assert m, out[-2000:]
    _check_export(workspace, m.group(1), m.group(2), task, files["builder"])
    assert _lineage(workspace, m.group(1), m.group(2))["cluster"] == {"chief": 1, "ps": 1, "worker": 2}
    workspace.assert_no_cluster_process()


@pytest.mark.cluster
@pytest.mark.parametrize("task", list(Task), ids=[t.short for t in Task])
def test_sync_cluster_trains_the_team_network(
    workspace: Workspace, files: dict[str, Path], task: Task
) -> None:
    """All-reduce over 2 workers, each task."""
    rc, out = workspace.run(
        *_train(workspace, files, task, "--mode", "sync", "--workers", "2"), log_name="t.log"
    )
    assert rc == 0, out[-4000:]
    m = REGISTERED.search(out)
    assert m, out[-2000:]
    _check_export(workspace, m.group(1), m.group(2), task, files["builder"])
    workspace.assert_no_cluster_process()


@pytest.mark.cluster
def test_async_team_network_survives_a_killed_worker(workspace: Workspace, files: dict[str, Path]) -> None:
    task = Task.BINARY
    args = _train(workspace, files, task, "--mode", "async", "--checkpoint-every", "10")
    args = (*args[:-6], "--epochs", "4", *args[-4:])  # longer: the kill lands mid-run
    proc, log = workspace.start(*args, log_name="train.log")
    wait_for(log, r"checkpoint step=\d+", proc=proc)
    victim = workspace.pids()["worker:0"][0]
    kill(victim)
    assert proc.wait(timeout=300) == 0, log.read_text()[-4000:]
    out = log.read_text()
    planned = re.search(r"planned_steps=(\d+)", out)
    assert planned
    assert f"training done: global_step={planned.group(1)} planned={planned.group(1)}" in out
    assert len(workspace.pids()["worker:0"]) == 2, "the lost worker was not relaunched"
    assert not pid_alive(victim)
    m = REGISTERED.search(out)
    assert m
    _check_export(workspace, m.group(1), m.group(2), task, files["builder"])
    workspace.assert_no_cluster_process()


def test_broken_builders_fail_in_one_line_before_any_process(tmp_path: Path, files: dict[str, Path]) -> None:
    builder = files["builder"]
    cases = {
        f"{tmp_path / 'missing.py'}:build": "does not exist",
        f"{files['broken_import']}:build": "ModuleNotFoundError",
        "no_such_package_xyz.models:build": "importing module no_such_package_xyz.models failed",
        f"{builder}:nope": "has no attribute 'nope'",
        f"{builder}:positional_only": "must accept FUNC(input_dim=, outputs=, task=)",
        f"{builder}:raises": "calling it failed: RuntimeError: the team's bug",
        f"{builder}:not_a_model": "returned str, not a keras.Model",
        f"{builder}:wrong_width": "expected [batch, 3] (one logit per class for task multiclass)",
        "no-colon-here": "give FILE.py:FUNC or package.module:FUNC",
    }
    for ref, expected in cases.items():
        r = runner.invoke(
            app,
            ["train", "--model", "team", "--data", str(files["multiclass"]), "--task", "multiclass"]
            + ["--mode", "async", "--model-fn", ref],
        )
        lines = r.stderr.strip().splitlines()
        assert r.exit_code == 2 and len(lines) == 1, (ref, r.stderr)
        assert lines[0].startswith("error: --model-fn ") and expected in lines[0], (ref, lines[0])
        assert "Traceback" not in r.stderr
    # nothing started: no run folder (job.json, node pids), no database
    assert not (tmp_path / "var").exists()


def test_lazily_built_builder_and_descriptions(files: dict[str, Path]) -> None:
    from training.cluster.builders import build_model, probe

    ref = normalize(f"{files['builder']}:build_lazy")
    assert ref is not None and Path(ref.rsplit(":", 1)[0]).is_absolute()
    net = build_model(ref, input_dim=5, outputs=3, task=Task.MULTICLASS)
    assert net.built and net(np.zeros((4, 5), np.float32)).shape == (4, 3)
    assert probe(None, input_dim=5, outputs=1, task=Task.BINARY) == {"ref": BUILTIN_REF, "sha256": None}
    assert describe(ref)["sha256"] == hashlib.sha256(files["builder"].read_bytes()).hexdigest()
    assert normalize(None) is None and normalize(BUILTIN_REF) is None
    with pytest.raises(ModelFnError):
        normalize("nothing")


def test_job_key_changes_with_task_and_builder(files: dict[str, Path]) -> None:
    from training.cluster.run_spec import TrainingRunSpec

    data = files["multiclass"]
    base = TrainingRunSpec(model_name="m", data=data)
    assert base.key == TrainingRunSpec(model_name="m", data=data, task="binary", model_fn=None).key
    keys = {
        base.key,
        TrainingRunSpec(model_name="m", data=data, task="multiclass").key,
        TrainingRunSpec(model_name="m", data=data, model_fn=normalize(f"{files['builder']}:build")).key,
        TrainingRunSpec(model_name="m", data=data, model_fn=normalize(f"{files['builder']}:build_lazy")).key,
    }
    assert len(keys) == 4


def test_data_generate_tasks_keep_the_binary_table(tmp_path: Path) -> None:
    for task, column in (("binary", "default"), ("multiclass", "risk_band"), ("regression", "loss_amount")):
        out = tmp_path / f"{task}.csv"
        r = runner.invoke(app, ["data", "generate", "--out", str(out), "--rows", "500", "--task", task])
        assert r.exit_code == 0, r.output
        header = out.read_text().splitlines()[0].replace('"', "").split(",")
        assert header[-1] == column and set(TARGETS.values()) & set(header) == {column}
    default = tmp_path / "default.csv"
    assert runner.invoke(app, ["data", "generate", "--out", str(default), "--rows", "500"]).exit_code == 0
    assert default.read_bytes() == (tmp_path / "binary.csv").read_bytes()
    bands = generate(3000, seed=0, task="multiclass")["risk_band"]
    assert set(bands) == {"low", "medium", "high"}
    shifted = generate(3000, seed=0, task="multiclass", scenario="prior_shift")["risk_band"]
    assert np.mean(shifted == "high") > np.mean(bands == "high") + 0.1
    loss = generate(3000, seed=0, task="regression")["loss_amount"]
    assert loss.dtype.kind == "f" and loss.min() >= 0 and 1 < loss.mean() < 10


# --- an imported version without a builder cannot be retrained ---


def test_require_retrainable_names_the_fix() -> None:
    require_retrainable({}, model_name="m", version=1)  # trained before builders: the built-in MLP
    require_retrainable({"source": "import", "model_fn": {"ref": "x.py:f"}}, model_name="m", version=1)
    with pytest.raises(Conflict, match=r"m:3 is served elsewhere .*retrain.requested"):
        require_retrainable({"source": "reference", "serving": "elsewhere"}, model_name="m", version=3)
    with pytest.raises(Exception) as info:
        require_retrainable({"source": "import", "model_fn": None}, model_name="m", version=2)
    assert isinstance(info.value, Conflict) and type(info.value).__name__ == "NotRetrainable"
    assert "m:2 was imported without --model-fn" in str(info.value) and "--model-fn FILE.py:FUNC" in str(
        info.value
    )


@pytest.fixture
def imported_db(tmp_path: Path) -> Iterator[tuple[Database, str]]:
    """The test's own SQLite (the one the CLI opens too) with model `imported` (lineage: an import, no
    builder) and model `trained` (the built-in MLP)."""
    url = f"sqlite:///{tmp_path / 'var' / 'driftwarden.db'}"
    (tmp_path / "var").mkdir(exist_ok=True)
    db = open_database(url, upgrade=True)
    with db.session() as s:
        lineage = {"source": "import", "model_fn": None}
        register_version(
            session=s, model_name="imported", version=1, path=tmp_path, metrics={}, lineage=lineage
        )
        builtin = {"model_fn": {"ref": BUILTIN_REF, "sha256": None}}
        register_version(
            session=s, model_name="trained", version=1, path=tmp_path, metrics={}, lineage=builtin
        )
    yield db, url
    db.dispose()


def test_retrain_of_an_imported_version_is_refused_by_route_cli_and_alert(
    imported_db: tuple[Database, str],
) -> None:
    from tests.training.retrainapi import AUTH, TOKEN, Api, build_app
    from training.retraining import service

    db, url = imported_db
    settings = Settings(database_url=SecretStr(url), admin_token=SecretStr(TOKEN))
    with Api(build_app(settings, db)) as client:
        r = client.post("/v1/models/imported/retrain", headers=AUTH)
        assert r.status_code == 409, r.text
        error = r.json()["error"]
        assert "imported:1 was imported without --model-fn" in error and "driftwarden train" in error
        assert client.post("/v1/models/trained/retrain", headers=AUTH).status_code == 202
    result = runner.invoke(app, ["jobs", "submit", "--model", "imported"])
    lines = result.stderr.strip().splitlines()
    assert result.exit_code == 2 and len(lines) == 1 and "re-import it with --model-fn" in lines[0], (
        result.stderr
    )
    with db.session() as s, pytest.raises(Exception, match="was imported without --model-fn"):
        service.enqueue(session=s, model_name="imported", trigger="alert", requested_by="alert:1")


def test_the_alert_retrain_action_records_why_it_did_nothing(imported_db: tuple[Database, str]) -> None:
    from alerts import lifecycle
    from alerts.models import Alert, AlertEvent
    from core.database import utcnow

    db, url = imported_db
    settings = Settings(database_url=SecretStr(url), retrain_cooldown_s=0)
    with db.session() as s:
        alert = Alert(
            fingerprint="f" * 64,
            model_name="imported",
            rule_name="dataset_drift",
            source="monitor",
            state="firing",
            severity="warning",
        )
        s.add(alert)
        s.flush()
        ctx = lifecycle.Pass(
            session=s,
            settings=settings,
            model_name="imported",
            now=utcnow(),
            silences=[],
            evaluation=lifecycle.Evaluation(model_name="imported"),
        )
        info = lifecycle.retrain(ctx, alert, trigger="alert", key="k1", requested_by=f"alert:{alert.id}")
        assert "was imported without --model-fn" in info["reason"] and info["job_id"] is None
        assert info["event"] == "retrain.requested" and info["webhooks"] == 0  # no subscription
        assert alert.evidence["retrain"] == info
        details = [e.detail for e in s.query(AlertEvent).filter(AlertEvent.alert_id == alert.id)]
        assert any(d.startswith("retrain: no job (model imported:1 was imported") for d in details)
