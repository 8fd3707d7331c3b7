"""Registry tables: one immutable row per model version, and version labels."""

from __future__ import annotations

import enum
from datetime import UTC, datetime
from typing import Any

from pydantic import BaseModel, ConfigDict
from sqlalchemy import DateTime, Enum, ForeignKey, Integer, String, Text, UniqueConstraint
from sqlalchemy.orm import Mapped, mapped_column

from core.database import Base


def utcnow() -> datetime:
    """Timezone-aware now, UTC."""
    return datetime.now(UTC)


class VersionState(enum.StrEnum):
    """Lifecycle of a model version."""

    STAGED = "staged"  # registered, not yet serving (waits for the gate / promotion)
    SERVING = "serving"  # the version production traffic goes to
    ARCHIVED = "archived"  # served before, replaced
    REJECTED = "rejected"  # failed its tests; ``state_reason`` says why


class ModelVersion(Base):
    """A registered version; its files under ``<registry>/<model>/<version>/`` never change."""

    __tablename__ = "model_versions"
    __table_args__ = (UniqueConstraint("model_name", "version", name="uq_model_versions_name_version"),)

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
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)
    updated_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow, onupdate=utcnow)


class VersionLabel(Base):
    """A named pointer (TF Serving's ``/labels/{label}``) to one version of a model."""

    __tablename__ = "model_version_labels"

    model_name: Mapped[str] = mapped_column(String(128), primary_key=True)
    label: Mapped[str] = mapped_column(String(64), primary_key=True)
    version_id: Mapped[int] = mapped_column(ForeignKey("model_versions.id", ondelete="CASCADE"))
    updated_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow, onupdate=utcnow)


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
