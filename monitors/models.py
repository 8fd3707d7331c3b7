"""Monitor tables: one row per monitor run, one row per feature result of a run, and the window sketch cache
(the counts of sealed blocks of the log's ids, :mod:`monitors.log_window`)."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import (
    BigInteger,
    Boolean,
    Float,
    ForeignKey,
    Index,
    Integer,
    LargeBinary,
    String,
    UniqueConstraint,
)
from sqlalchemy.orm import Mapped, mapped_column, relationship

from core.database import Base, UTCDateTime, utcnow


class MonitorRun(Base):
    """One evaluation of a model's window against its version's reference profile."""

    __tablename__ = "monitor_runs"
    __table_args__ = (Index("ix_monitor_runs_model_name_created_at", "model_name", "created_at"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    model_name: Mapped[str] = mapped_column(String(128))
    model_version: Mapped[int] = mapped_column(Integer)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime(), default=utcnow)
    window_start: Mapped[datetime | None] = mapped_column(UTCDateTime(), nullable=True)
    window_end: Mapped[datetime | None] = mapped_column(UTCDateTime(), nullable=True)
    rows: Mapped[int] = mapped_column(Integer)
    duration_s: Mapped[float | None] = mapped_column(
        Float, nullable=True
    )  # read + evaluate (None: older runs)
    dataset_drifted: Mapped[bool] = mapped_column(Boolean)
    n_features: Mapped[int] = mapped_column(Integer)
    n_drifted: Mapped[int] = mapped_column(Integer)
    prediction_drifted: Mapped[bool | None] = mapped_column(Boolean, nullable=True)
    multivariate_drifted: Mapped[bool | None] = mapped_column(Boolean, nullable=True)
    concept_drifted: Mapped[bool | None] = mapped_column(Boolean, nullable=True)
    report: Mapped[dict[str, Any]] = mapped_column()
    features: Mapped[list[FeatureResult]] = relationship(
        back_populates="run", cascade="all, delete-orphan", passive_deletes=True
    )


class FeatureResult(Base):
    """The verdict of one feature (or ``prediction`` / ``pca_reconstruction_error``) in a run."""

    __tablename__ = "monitor_feature_results"
    __table_args__ = (UniqueConstraint("run_id", "feature", name="uq_monitor_feature_results_run_id"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    run_id: Mapped[int] = mapped_column(ForeignKey("monitor_runs.id", ondelete="CASCADE"))
    feature: Mapped[str] = mapped_column(String(128))
    kind: Mapped[str] = mapped_column(String(16))
    test: Mapped[str] = mapped_column(String(32))
    statistic: Mapped[float | None] = mapped_column(Float, nullable=True)
    p_value: Mapped[float | None] = mapped_column(Float, nullable=True)
    adjusted_p_value: Mapped[float | None] = mapped_column(Float, nullable=True)
    effect: Mapped[float | None] = mapped_column(Float, nullable=True)
    threshold: Mapped[float | None] = mapped_column(Float, nullable=True)
    drifted: Mapped[bool] = mapped_column(Boolean)
    run: Mapped[MonitorRun] = relationship(back_populates="features")


class WindowSketchBlock(Base):
    """The counts of one aligned block of log ids for one model, profile and threshold (PostgreSQL).

    ``rows`` and ``oldest`` are the block's row count and oldest ``logged_at`` when it was counted: a run
    uses the block only while the log still shows both (a late commit or a dropped partition changes them).
    ``sketch`` is :func:`monitors.sketch.encode_counts` (labels are never stored: feedback comes later).
    """

    __tablename__ = "monitor_window_sketches"

    model_name: Mapped[str] = mapped_column(String(128), primary_key=True)
    version_filter: Mapped[int] = mapped_column(Integer, primary_key=True)  # 0: every version
    fingerprint: Mapped[str] = mapped_column(String(32), primary_key=True)  # profile + threshold
    block_ids: Mapped[int] = mapped_column(Integer, primary_key=True)  # ids per block
    block: Mapped[int] = mapped_column(BigInteger, primary_key=True)  # id // block_ids
    rows: Mapped[int] = mapped_column(BigInteger)
    oldest: Mapped[datetime] = mapped_column(UTCDateTime())
    sketch: Mapped[bytes] = mapped_column(LargeBinary)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime(), default=utcnow)
