"""Prediction log tables.

``prediction_log`` holds one row per served prediction. The monitors read "the last N rows" or "the last
T minutes" of one model, so the table carries two composite indexes led by ``model_name``:
``(model_name, logged_at)`` for time windows and ``(model_name, id)`` for last-N reads (``id`` grows with
insertion order, so ``ORDER BY id DESC LIMIT N`` is an index scan); retention deletes per model through the
first one, so no further index slows the inserts. The output probability and the
latency are real columns (aggregations never parse JSON); the raw inputs are one JSON document per row
(JSONB on PostgreSQL), because the feature set differs per model and version. ``prediction_id`` is a
time-ordered UUID (v7 layout), so its unique index is appended to at the right edge like ``id``.

``prediction_feedback`` holds the ground-truth label of a prediction (one per prediction; a resent label
replaces the previous one) and joins on ``prediction_id``. Rows go with their prediction at retention
cleanup (ON DELETE CASCADE).

``status`` is ``ok`` for an answered prediction and ``output_violation`` when the model's output broke its
contract (the caller got an error, the event is kept for the on-call engineer); monitors read ``ok`` rows.
"""

from __future__ import annotations

import enum
from datetime import datetime
from typing import Any

from sqlalchemy import BigInteger, DateTime, Float, ForeignKey, Index, Integer, String
from sqlalchemy.orm import Mapped, mapped_column

from core.database import Base

BigId = BigInteger().with_variant(Integer(), "sqlite")  # SQLite autoincrements INTEGER PRIMARY KEY only


class PredictionStatus(enum.StrEnum):
    OK = "ok"
    OUTPUT_VIOLATION = "output_violation"


class PredictionLog(Base):
    """One served prediction."""

    __tablename__ = "prediction_log"
    __table_args__ = (
        Index("ix_prediction_log_model_name_logged_at", "model_name", "logged_at"),
        Index("ix_prediction_log_model_name_id", "model_name", "id"),
    )

    id: Mapped[int] = mapped_column(BigId, primary_key=True, autoincrement=True)
    prediction_id: Mapped[str] = mapped_column(String(36), unique=True)
    request_id: Mapped[str] = mapped_column(String(128))
    model_name: Mapped[str] = mapped_column(String(128))
    model_version: Mapped[int] = mapped_column(Integer)
    logged_at: Mapped[datetime] = mapped_column(DateTime(timezone=True))
    inputs: Mapped[dict[str, Any]] = mapped_column()
    probability: Mapped[float | None] = mapped_column(Float, default=None)
    flags: Mapped[list[Any] | None] = mapped_column(default=None)
    latency_ms: Mapped[float] = mapped_column(Float)
    status: Mapped[str] = mapped_column(String(24), default=PredictionStatus.OK.value)
    protocol: Mapped[str] = mapped_column(String(8))


class PredictionFeedback(Base):
    """The ground-truth label of one logged prediction."""

    __tablename__ = "prediction_feedback"
    __table_args__ = (Index("ix_prediction_feedback_model_name_received_at", "model_name", "received_at"),)

    prediction_id: Mapped[str] = mapped_column(
        String(36), ForeignKey("prediction_log.prediction_id", ondelete="CASCADE"), primary_key=True
    )
    model_name: Mapped[str] = mapped_column(String(128))
    label: Mapped[float] = mapped_column(Float)
    received_at: Mapped[datetime] = mapped_column(DateTime(timezone=True))


# Column order of a log row as the writer and the spool carry it (tuples, not ORM objects: the write path
# is hot). ``id`` is assigned by the database.
LOG_COLUMNS: tuple[str, ...] = (
    "prediction_id",
    "request_id",
    "model_name",
    "model_version",
    "logged_at",
    "inputs",
    "probability",
    "flags",
    "latency_ms",
    "status",
    "protocol",
)
