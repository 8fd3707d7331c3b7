"""A training workspace whose commands run against a given database with job settings, and the reads of the
job queue and the registry that the job tests make."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from core.config import Settings
from core.database import Database
from registry.service import serving_version
from tests.training.helpers import Workspace
from training.retraining import service
from training.retraining.models import TrainingJob

if TYPE_CHECKING:
    from training.cluster.flows import TrainResult
    from training.cluster.run_spec import TrainingRunSpec


@dataclass
class JobWorkspace(Workspace):
    """A workspace whose commands use the given database and job settings."""

    extra: dict[str, str] = field(default_factory=dict)

    @property
    def env(self) -> dict[str, str]:
        return {**super().env, **self.extra}


def read_job(db: Database, job_id: int) -> TrainingJob:
    """The job as the queue holds it now."""
    with db.session() as s:
        return service.get_job(session=s, job_id=job_id)


def serving_number(db: Database, model: str = "credit") -> int | None:
    """The number of ``model``'s serving version (None: none serves)."""
    with db.session() as s:
        row = serving_version(session=s, model_name=model)
        return row.version if row else None


def train_locally(db: Database, settings: Settings, spec: TrainingRunSpec) -> TrainResult:
    """Train ``spec`` locally into ``settings``' registry and checkpoints (TensorFlow loads here)."""
    from training.cluster.flows import run_training
    from training.cluster.progress import Progress

    return run_training(
        job=spec,
        db=db,
        registry=settings.registry_path,
        checkpoint_root=settings.checkpoint_path,
        progress=Progress("t", show_bar=False),
    )
