"""The retraining job queue: one row per job in ``training_jobs``, and the API's request body.

A job is created ``queued`` (by the API, the CLI or an alert), claimed by one worker (``running``: the
worker holds a lease it renews by heartbeats; an expired lease lets another worker take the job over),
checked by the validation gate (``validating``) and ends in one final state: ``promoted`` (the gate
passed and the candidate serves), ``passed`` (the gate passed, the candidate waits for a manual
``driftwarden models promote`` because ``retrain_auto_promote`` is off), ``rejected`` (the gate failed;
the candidate is rejected in the registry), ``failed`` (an error; ``error`` says which) or ``cancelled``.

Two indexes serve the worker's claim query (``state, created_at``) and the per-model lookups
(``model_name, state``). A partial unique index allows one *active* job (queued, running or validating)
per model, whatever runs at the same time; another makes an idempotency key unique per model.
"""

from __future__ import annotations

import enum
from datetime import datetime
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field
from sqlalchemy import Boolean, Index, Integer, String, Text, text
from sqlalchemy.orm import Mapped, mapped_column

from core.bounds import MAX_CLUSTER_WORKERS, MAX_EPOCHS, MAX_PARAMETER_SERVERS
from core.database import Base, UTCDateTime, str_enum, utcnow


class JobState(enum.StrEnum):
    """Lifecycle of a retraining job."""

    QUEUED = "queued"
    RUNNING = "running"
    VALIDATING = "validating"
    PROMOTED = "promoted"
    PASSED = "passed"  # the gate passed; held for `driftwarden models promote` (retrain_auto_promote off)
    UNDECIDED = "undecided"  # the holdout could not decide a check; held (staged) for a person to decide
    REJECTED = "rejected"
    FAILED = "failed"
    CANCELLED = "cancelled"

    @property
    def active(self) -> bool:
        return self in ACTIVE_STATES

    @property
    def final(self) -> bool:
        return self not in ACTIVE_STATES


ACTIVE_STATES = frozenset({JobState.QUEUED, JobState.RUNNING, JobState.VALIDATING})
FINAL_STATES = frozenset(set(JobState) - ACTIVE_STATES)
ONE_ACTIVE_WHERE = "state IN ('queued', 'running', 'validating')"  # the partial unique index's rows


class Trigger(enum.StrEnum):
    """Who asked for a job."""

    API = "api"
    ALERT = "alert"
    ALERTMANAGER = "alertmanager"
    CLI = "cli"


class TrainingJob(Base):
    """One retraining job of a model: its request, progress, data window, gate verdict and outcome."""

    __tablename__ = "training_jobs"
    __table_args__ = (
        Index("ix_training_jobs_state_created_at", "state", "created_at"),
        Index("ix_training_jobs_model_name_state", "model_name", "state"),
        Index("uq_training_jobs_model_name_idempotency_key", "model_name", "idempotency_key", unique=True),
        # at most one queued/running/validating job per model, whatever runs at the same time
        Index(
            "uq_training_jobs_one_active",
            "model_name",
            unique=True,
            sqlite_where=text(ONE_ACTIVE_WHERE),
            postgresql_where=text(ONE_ACTIVE_WHERE),
        ),
    )

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    model_name: Mapped[str] = mapped_column(String(128))
    state: Mapped[JobState] = mapped_column(str_enum(JobState, "job_state"), default=JobState.QUEUED)
    trigger: Mapped[Trigger] = mapped_column(str_enum(Trigger, "job_trigger"))
    requested_by: Mapped[str] = mapped_column(String(128))
    idempotency_key: Mapped[str | None] = mapped_column(String(255), default=None)
    alert_id: Mapped[int | None] = mapped_column(Integer, default=None)
    params: Mapped[dict[str, Any]] = mapped_column(default=dict)
    progress: Mapped[dict[str, Any]] = mapped_column(default=dict)
    log_tail: Mapped[str] = mapped_column(Text, default="")
    data_window: Mapped[dict[str, Any] | None] = mapped_column(default=None)
    parent_version: Mapped[int | None] = mapped_column(Integer, default=None)
    result_version: Mapped[int | None] = mapped_column(Integer, default=None)
    gate: Mapped[dict[str, Any] | None] = mapped_column(default=None)
    error: Mapped[str | None] = mapped_column(Text, default=None)
    attempts: Mapped[int] = mapped_column(Integer, default=0)
    lease_owner: Mapped[str | None] = mapped_column(String(255), default=None)
    lease_expires_at: Mapped[datetime | None] = mapped_column(UTCDateTime(), default=None)
    heartbeat_at: Mapped[datetime | None] = mapped_column(UTCDateTime(), default=None)
    cancel_requested: Mapped[bool] = mapped_column(Boolean, default=False)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime(), default=utcnow)
    started_at: Mapped[datetime | None] = mapped_column(UTCDateTime(), default=None)
    finished_at: Mapped[datetime | None] = mapped_column(UTCDateTime(), default=None)


Mode = Literal["async", "sync", "local"]


class RetrainRequest(BaseModel):
    """Body of ``POST /v1/models/{name}/retrain`` (every field optional; unknown fields are refused)."""

    model_config = ConfigDict(extra="forbid")

    reason: str | None = Field(default=None, max_length=1000, description="Why (kept in the job's params).")
    mode: Mode | None = Field(
        default=None, description="async | sync | local (default: the serving version's mode, else async)."
    )
    epochs: float | None = Field(default=None, gt=0, le=MAX_EPOCHS, description="Default: retrain_epochs.")
    workers: int | None = Field(
        default=None, ge=1, le=MAX_CLUSTER_WORKERS, description="Cluster workers (async, sync)."
    )
    ps: int | None = Field(
        default=None, ge=1, le=MAX_PARAMETER_SERVERS, description="Parameter servers (async only)."
    )
    drill: Literal["shuffled_labels"] | None = Field(
        default=None,
        description="A fire drill: shuffled_labels trains on shuffled labels; the gate must reject it.",
    )

    def params(self) -> dict[str, Any]:
        """The job's ``params``: the fields that were given."""
        return self.model_dump(exclude_none=True)
