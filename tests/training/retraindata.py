"""The retraining flow's test world (a database, settings, the finished jobs) and drifted-concept traffic."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from core.config import Settings
from core.database import Database
from predictions.service import record_feedback
from registry.service import get_version, serving_version
from tests.predictions.logdata import log_columns
from tests.support import CREDIT_FEATURES
from training.cluster.datagen import TARGET, generate
from training.retraining import service
from training.retraining.models import TrainingJob

ROWS = 3000


@dataclass
class World:
    db: Database
    settings: Settings
    url: str
    finished: list[int]

    def settings_with(self, **overrides: Any) -> Settings:
        return self.settings.model_copy(update=overrides)

    def submit(self, **params: Any) -> int:
        with self.db.session() as s:
            out = service.enqueue(
                session=s,
                model_name="credit",
                trigger="cli",
                requested_by="test",
                params={"mode": "local", **params},
            )
        assert out.created and out.job_id is not None
        return out.job_id

    def job(self, job_id: int) -> TrainingJob:
        with self.db.session() as s:
            return service.get_job(session=s, job_id=job_id)

    def serving(self) -> int | None:
        with self.db.session() as s:
            row = serving_version(session=s, model_name="credit")
            return row.version if row else None

    def version(self, number: int) -> Any:
        with self.db.session() as s:
            return get_version(session=s, model_name="credit", version=number)


def log_traffic(db: Database, *, rows: int = ROWS, seed: int = 11, labelled: int | None = None) -> np.ndarray:
    """Predictions of drifted-concept traffic served by version 1, with feedback on the first ``labelled``."""
    cols = generate(rows, scenario="concept_drift", seed=seed)
    ids = log_columns(db.engine, cols, features=CREDIT_FEATURES, model="credit", version=1)
    n = rows if labelled is None else labelled
    with db.session() as s:
        record_feedback(
            session=s,
            model_name="credit",
            labels=[(pid, float(y)) for pid, y in zip(ids[:n], cols[TARGET][:n], strict=True)],
        )
    return np.asarray(cols[TARGET])
