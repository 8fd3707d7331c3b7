"""A retraining job of a multi-class version trained with the team's own builder (local mode, SQLite): the
job rebuilds the same network from the parent's lineage (``model_fn``, task, classes), trains on the labelled
traffic (feedback labels are class indexes) and scores both versions' ``probabilities`` for the gate."""

from __future__ import annotations

from pathlib import Path

import numpy as np
from pydantic import SecretStr

from core.config import Settings
from core.database import open_database
from core.tabular import write_table
from predictions.service import record_feedback
from registry.service import get_version, promote
from tests.predictions.logdata import log_columns
from tests.training.jobworkspace import train_locally
from training.cluster.builders import normalize
from training.cluster.datagen import TARGETS, generate
from training.cluster.run_spec import Mode, TrainingRunSpec
from training.retraining import service
from training.retraining.models import JobState
from training.retraining.worker import Worker

BUILDER = """
import keras


def build(input_dim, outputs, task):
    hidden = keras.layers.Dense(16, activation="relu")
    return keras.Sequential([keras.Input(shape=(input_dim,)), hidden, keras.layers.Dense(outputs)])
"""
TARGET = TARGETS[next(t for t in TARGETS if t.short == "multiclass")]


def test_a_multiclass_team_version_is_retrained_with_its_own_builder(tmp_path: Path) -> None:
    builder = tmp_path / "team.py"
    builder.write_text(BUILDER)
    ref = normalize(f"{builder}:build")
    data = tmp_path / "bands.csv"
    write_table(generate(2000, seed=2, task="multiclass"), data)
    url = f"sqlite:///{tmp_path / 'jobs.db'}"
    settings = Settings(
        database_url=SecretStr(url),
        registry_path=tmp_path / "models",
        checkpoint_path=tmp_path / "ckpt",
        spool_path=tmp_path / "spool",
        retrain_min_rows=500,
        retrain_epochs=1.0,
        job_poll_interval_s=0.1,
    )
    db = open_database(url, settings=settings, upgrade=True)
    try:
        first = train_locally(
            db,
            settings,
            TrainingRunSpec(
                model_name="bands", data=data, mode=Mode.LOCAL, epochs=1.0, task="multiclass", target=TARGET
            ),
        )
        assert first.version.lineage["model_fn"]["ref"] == "builtin:mlp"
        team = train_locally(
            db,
            settings,
            TrainingRunSpec(
                model_name="bands",
                data=data,
                mode=Mode.LOCAL,
                epochs=1.0,
                task="multiclass",
                target=TARGET,
                model_fn=ref,
            ),
        )
        with db.session() as s:
            promote(session=s, model_name="bands", version=team.version.version)
        traffic = generate(1200, seed=5, task="multiclass", scenario="concept_drift")
        features = [k for k in traffic if k != TARGET]
        ids = log_columns(db.engine, traffic, features=features, model="bands", version=team.version.version)
        classes = ("high", "low", "medium")
        with db.session() as s:
            labels = [(pid, float(classes.index(y))) for pid, y in zip(ids, traffic[TARGET], strict=True)]
            record_feedback(session=s, model_name="bands", labels=labels)
            out = service.enqueue(
                session=s, model_name="bands", trigger="cli", requested_by="test", params={"mode": "local"}
            )
        assert out.job_id is not None
        Worker(db=db, settings=settings, worker_id="test:1:1").run_once()
        with db.session() as s:
            job = service.get_job(session=s, job_id=out.job_id)
            assert job.result_version is not None, job.error or job.log_tail
            candidate = get_version(session=s, model_name="bands", version=job.result_version)
            assert candidate is not None
            lineage = dict(candidate.lineage or {})
        assert f"model function {ref}" in job.log_tail
        assert lineage["task"] == "multiclass" and lineage["model_fn"]["ref"] == ref
        assert lineage["model_fn"]["sha256"] == team.version.lineage["model_fn"]["sha256"]
        assert job.state is not JobState.FAILED, job.error or job.log_tail
        gate = job.gate or {}
        checks = {c["name"]: c for c in gate.get("checks", [])}
        assert "metric" in checks, gate
        assert np.isfinite(checks["metric"]["figures"]["candidate"])
        assert checks["metric"]["message"].startswith("macro_f1 "), checks["metric"]["message"]
        assert checks["metric"]["verdict"] in {"passed", "failed", "undecided"}
    finally:
        db.dispose()
