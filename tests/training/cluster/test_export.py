"""The exported version: TF Serving layout, metadata, immutability, and loading in a fresh process."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from core.database import open_database
from core.tabular import write_table
from registry.service import publish_files, read_meta, read_schema
from training.cluster.datagen import generate


@pytest.fixture(scope="module")
def trained(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    from training.cluster.flows import run_training
    from training.cluster.progress import Progress
    from training.cluster.run_spec import Mode, TrainingRunSpec

    root = tmp_path_factory.mktemp("export")
    data = root / "baseline.csv"
    write_table(generate(6000, seed=5), data)
    db = open_database(f"sqlite:///{root / 'db.sqlite'}")
    job = TrainingRunSpec(model_name="credit", data=data, mode=Mode.LOCAL, epochs=2)
    result = run_training(
        job=job, db=db, registry=root / "models", checkpoint_root=root / "ckpt", progress=Progress("t")
    )
    db.dispose()
    assert result.metrics["accuracy"] >= 0.85
    return Path(result.version.path), root


LOADER = """
import json, sys
import numpy as np, tensorflow as tf
fn = tf.saved_model.load(sys.argv[1]).signatures["serving_default"]
rows = json.loads(sys.argv[2])
def tensor(values):
    if any(isinstance(x, str) for x in values):
        return tf.constant(values, tf.string)
    return tf.constant([float("nan") if x is None else x for x in values], tf.float32)
inputs = {k: tensor(v) for k, v in rows.items()}
sig = {k: v.dtype.name for k, v in fn.structured_input_signature[1].items()}
print(json.dumps({"p": fn(**inputs)["probability"].numpy().tolist(), "sig": sig}))
"""


def test_layout_metadata_and_immutability(trained: tuple[Path, Path]) -> None:
    path, root = trained
    assert path == root / "models" / "credit" / "1"
    assert (path / "saved_model.pb").is_file() and (path / "variables").is_dir()
    for name in ("schema", "profile", "metrics", "lineage", "preprocessing"):
        assert read_meta(path=path, name=name)
    lineage = read_meta(path=path, name="lineage")
    assert lineage["mode"] == "local" and lineage["train_rows"] == 4800 and lineage["version"] == 1
    assert all(not os.access(p, os.W_OK) or os.geteuid() == 0 for p in path.rglob("*") if p.is_file())
    assert all((p.stat().st_mode & 0o222) == 0 for p in path.rglob("*") if p.is_file())
    staging = root / "staging"
    staging.mkdir()
    with pytest.raises(FileExistsError, match="immutable"):
        publish_files(staging=staging, registry=root / "models", model_name="credit", version=1)


def test_fresh_process_loads_and_answers_like_the_exporter(trained: tuple[Path, Path]) -> None:
    import tensorflow as tf

    from training.cluster.export import ServingModule  # noqa: F401  (the in-process reference below)

    path, _ = trained
    schema = read_schema(path=path)
    cols = generate(20, seed=11)
    rows = {
        f.name: [
            None if isinstance(v, float) and np.isnan(v) else (v.item() if hasattr(v, "item") else v)
            for v in cols[f.name]
        ]
        for f in schema.features
    }
    out = subprocess.run(
        [sys.executable, "-c", LOADER, str(path), json.dumps(rows)], capture_output=True, text=True
    )
    assert out.returncode == 0, out.stderr[-3000:]
    fresh = json.loads(out.stdout.strip().splitlines()[-1])
    assert fresh["sig"] == {
        f.name: ("float32" if f.kind.value == "numeric" else "string") for f in schema.features
    }
    local = tf.saved_model.load(str(path)).signatures["serving_default"]
    from registry.inputs import raw_inputs

    raw = raw_inputs(cols, schema)
    expected = local(**{k: tf.constant(v) for k, v in raw.items()})["probability"].numpy()
    np.testing.assert_allclose(fresh["p"], expected, rtol=1e-6)
    assert np.all((np.array(fresh["p"]) >= 0) & (np.array(fresh["p"]) <= 1))
