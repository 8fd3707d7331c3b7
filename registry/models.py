"""Registry tables: one immutable row per model version, version labels, and the history of state changes."""

from __future__ import annotations

import enum
from datetime import datetime
from typing import Any

from pydantic import BaseModel, ConfigDict
from sqlalchemy import Enum, ForeignKey, Index, Integer, String, Text, UniqueConstraint, text
from sqlalchemy.orm import Mapped, mapped_column

from core.database import Base, UTCDateTime, str_enum, utcnow


class VersionState(enum.StrEnum):
    """Lifecycle of a model version."""

    STAGED = "staged"  # registered, not yet serving (waits for the gate / promotion)
    SERVING = "serving"  # the version production traffic goes to
    ARCHIVED = "archived"  # served before, replaced
    REJECTED = "rejected"  # failed its tests; ``state_reason`` says why


ONE_SERVING_WHERE = "state = 'serving'"  # the rows of the partial unique index: one per model at most


class ModelVersion(Base):
    """A registered version; its files under ``<registry>/<model>/<version>/`` never change."""

    __tablename__ = "model_versions"
    __table_args__ = (
        UniqueConstraint("model_name", "version", name="uq_model_versions_name_version"),
        # at most one serving version per model, whatever runs at the same time (migration 0006)
        Index(
            "uq_model_versions_one_serving",
            "model_name",
            unique=True,
            sqlite_where=text(ONE_SERVING_WHERE),
            postgresql_where=text(ONE_SERVING_WHERE),
        ),
    )

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    model_name: Mapped[str] = mapped_column(String(128), index=True)
    version: Mapped[int] = mapped_column(Integer)
    state: Mapped[VersionState] = mapped_column(
        Enum(VersionState, name="version_state", values_callable=lambda e: [m.value for m in e]),
        default=VersionState.STAGED,
    )
    state_reason: Mapped[str | None] = mapped_column(Text, default=None)
    path: Mapped[str] = mapped_column(Text)
    parent_version: Mapped[int | None] = mapped_column(Integer, default=None)
    metrics: Mapped[dict[str, Any]] = mapped_column(default=dict)
    lineage: Mapped[dict[str, Any]] = mapped_column(default=dict)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime(), default=utcnow)
    updated_at: Mapped[datetime] = mapped_column(UTCDateTime(), default=utcnow, onupdate=utcnow)


class EventAction(enum.StrEnum):
    """What changed a version: one entry of its history."""

    REGISTER = "register"  # -> staged (or the state it was registered in)
    PROMOTE = "promote"  # -> serving
    ARCHIVE = "archive"  # serving -> archived: another version was promoted or rolled back to
    ROLLBACK = "rollback"  # -> serving again, back from the version that served after it
    REJECT = "reject"  # -> rejected, with a reason
    LABEL = "label"  # a label set on (or moved to) this version; the state does not change


class VersionEvent(Base):
    """One state change of a version (or a label moved to it): who/what, when, from, to and why."""

    __tablename__ = "model_version_events"
    __table_args__ = (Index("ix_model_version_events_model_name_version", "model_name", "version"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    model_name: Mapped[str] = mapped_column(String(128))
    version: Mapped[int] = mapped_column(Integer)
    action: Mapped[EventAction] = mapped_column(str_enum(EventAction, "event_action"))
    from_state: Mapped[VersionState | None] = mapped_column(str_enum(VersionState, "from_state"))
    to_state: Mapped[VersionState | None] = mapped_column(str_enum(VersionState, "to_state"))
    label: Mapped[str | None] = mapped_column(String(64), default=None)
    previous_version: Mapped[int | None] = mapped_column(Integer, default=None)
    reason: Mapped[str | None] = mapped_column(Text, default=None)
    actor: Mapped[str] = mapped_column(String(128))
    at: Mapped[datetime] = mapped_column(UTCDateTime(), default=utcnow)


class VersionLabel(Base):
    """A named pointer (TF Serving's ``/labels/{label}``) to one version of a model."""

    __tablename__ = "model_version_labels"

    model_name: Mapped[str] = mapped_column(String(128), primary_key=True)
    label: Mapped[str] = mapped_column(String(64), primary_key=True)
    version_id: Mapped[int] = mapped_column(ForeignKey("model_versions.id", ondelete="CASCADE"))
    updated_at: Mapped[datetime] = mapped_column(UTCDateTime(), default=utcnow, onupdate=utcnow)


class ModelVersionRead(BaseModel):
    """A version as the API and CLI show it."""

    model_config = ConfigDict(from_attributes=True)

    model_name: str
    version: int
    state: VersionState
    state_reason: str | None
    path: str
    parent_version: int | None
    metrics: dict[str, Any]
    lineage: dict[str, Any]
    created_at: datetime


class VersionEventRead(BaseModel):
    """One entry of a version's history as the API and CLI show it."""

    model_config = ConfigDict(from_attributes=True)

    model_name: str
    version: int
    action: EventAction
    from_state: VersionState | None
    to_state: VersionState | None
    label: str | None
    previous_version: int | None
    reason: str | None
    actor: str
    at: datetime


class FeatureSummary(BaseModel):
    """One input feature of a version's contract, in short."""

    name: str
    kind: str
    dtype: str
    nullable: bool
    missing_rate: float
    observed_min: float | None
    observed_max: float | None
    categories: list[str]


class SchemaSummary(BaseModel):
    """A version's input/output contract, in short."""

    target: str
    task: str
    features: list[FeatureSummary]
    outputs: list[str]


class VersionDetail(ModelVersionRead):
    """A version with its labels, its contract (when asked for and readable) and its history."""

    labels: list[str]
    schema_summary: SchemaSummary | None = None
    schema_error: str | None = None
    history: list[VersionEventRead]


class ModelDetail(BaseModel):
    """A model: its serving version, labels, versions (newest first) and its whole history (oldest first)."""

    model_name: str
    serving: int | None
    labels: dict[str, int]
    versions: list[VersionDetail]
    history: list[VersionEventRead]
