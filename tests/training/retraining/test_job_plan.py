"""A retraining job trains on the serving version's feature list and keeps its class order (issue 40).

The serving version was trained with ``--features`` (a subset, in its own order) and classes in an order of
its own (not sorted), from a table that also holds a second label and an id; the logged requests carry
those extra fields too, and the serving version's training data is mixed in. The candidate's contract has
the same features in the same order and the same classes, and its lineage lists the features.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
from pydantic import SecretStr

from core.config import Settings
from core.database import open_database
from core.tabular import write_table
from predictions.service import record_feedback
from registry.service import get_version, promote, read_schema
from tests.predictions.logdata import log_columns
from tests.training.jobworkspace import train_locally
from training.cluster.datagen import TARGETS, generate
from training.cluster.run_spec import Mode, TrainingRunSpec
from training.retraining import service
from training.retraining.models import JobState
from training.retraining.worker import Worker

TARGET = TARGETS[next(t for t in TARGETS if t.short == "multiclass")]
FEATURES = ("region", "income", "credit_score", "debt_to_income", "home_ownership")
CLASSES = ("low", "medium", "high")  # the serving version's output order (sorted: high, low, medium)


def _table(n: int, seed: int, **kw: str) -> dict[str, np.ndarray]:
    data = generate(n, seed=seed, task="multiclass", **kw)  # type: ignore[arg-type]
    loss = generate(n, seed=seed, task="regression", **kw)["loss_amount"]  # type: ignore[arg-type]
    return {"customer_id": np.arange(n, dtype=np.int64), **data, "loss_amount": loss}


def test_the_candidate_keeps_the_serving_features_and_class_order(tmp_path: Path) -> None:
    data = tmp_path / "segments.csv"
    write_table(_table(1_500, seed=2), data)
    url = f"sqlite:///{tmp_path / 'jobs.db'}"
    settings = Settings(
        database_url=SecretStr(url),
        registry_path=tmp_path / "models",
        checkpoint_path=tmp_path / "ckpt",
        spool_path=tmp_path / "spool",
        retrain_min_rows=500,
        retrain_epochs=0.5,
        retrain_include_previous_data=True,
        job_poll_interval_s=0.1,
    )
    db = open_database(url, settings=settings, upgrade=True)
    try:
        first = train_locally(
            db,
            settings,
            TrainingRunSpec(
                model_name="seg",
                data=data,
                mode=Mode.LOCAL,
                epochs=0.5,
                task="multiclass",
                target=TARGET,
                classes=CLASSES,
                features=FEATURES,
            ),
        )
        with db.session() as s:
            promote(session=s, model_name="seg", version=first.version.version)
        serving = read_schema(path=Path(first.version.path))
        assert tuple(serving.feature_names) == FEATURES and serving.classes == CLASSES

        traffic = _table(900, seed=5, scenario="concept_drift")
        sent = [k for k in traffic if k != TARGET]  # the requests carry the extra fields too
        ids = log_columns(db.engine, traffic, features=sent, model="seg", version=first.version.version)
        with db.session() as s:
            labels = [(pid, float(CLASSES.index(y))) for pid, y in zip(ids, traffic[TARGET], strict=True)]
            record_feedback(session=s, model_name="seg", labels=labels)
            out = service.enqueue(
                session=s, model_name="seg", trigger="cli", requested_by="test", params={"mode": "local"}
            )
        assert out.job_id is not None
        Worker(db=db, settings=settings, worker_id="test:1:1").run_once()
        with db.session() as s:
            job = service.get_job(session=s, job_id=out.job_id)
            assert job.result_version is not None, job.error or job.log_tail
            assert job.state is not JobState.FAILED, job.error or job.log_tail
            candidate = get_version(session=s, model_name="seg", version=job.result_version)
            assert candidate is not None
        assert "mixed in 1500 rows of the serving version's training data" in job.log_tail
        schema = read_schema(path=Path(candidate.path))
        assert tuple(schema.feature_names) == FEATURES
        assert schema.classes == CLASSES
        lineage = dict(candidate.lineage or {})
        assert lineage["features"] == list(FEATURES)
        written = json.loads((Path(candidate.path) / "driftwarden" / "schema.json").read_text())
        assert [f["name"] for f in written["features"]] == list(FEATURES)
    finally:
        db.dispose()
