"""Prediction log tables.

``prediction_log`` holds one row per served prediction. The monitors read "the last N rows" or "the last
T minutes" of one model, so the table carries two composite indexes led by ``model_name``:
``(model_name, logged_at)`` for time windows and ``(model_name, id)`` for last-N reads (``id`` grows with
insertion order, so ``ORDER BY id DESC LIMIT N`` is an index scan); the chunked retention DELETE finds rows
per model through the first one, so no further index slows the inserts. The output probability and the
latency are real columns (aggregations never parse JSON); the raw inputs are one JSON document per row
(JSONB on PostgreSQL), because the feature set differs per model and version. ``prediction_id`` is a
time-ordered UUID (v7 layout), so its unique index is appended to at the right edge like ``id``.

``prediction_feedback`` holds the ground-truth label of a prediction (one per prediction; a resent label
replaces the previous one), with a copy of what a window reads of its prediction, filled by
``record_feedback`` from the log row (migration 0015 backfilled older labels): ``logged_at`` (the partition
key, beside ``prediction_id`` the key), the log's ``id`` as ``log_id``, ``probability``, ``model_version``
and ``status``. A log row never changes once written, so the copies stay true; with them the labelled rows
of a window are read from the feedback alone (``predictions.aggregates.labelled_arrays``: an index-only scan
of ``(model_name, log_id)``, which includes the rest), never joined with the wide log rows. The copies are
nullable (a label of a prediction the log no longer had when 0015 ran keeps NULL there, which no window
reads, as no join found it).

On PostgreSQL both tables are range-partitioned by ``logged_at`` with the same ranges (migration 0009,
:mod:`predictions.partitions`): retention drops the partitions of a span of time that has wholly expired,
log and feedback in one transaction, instead of deleting rows. A partitioned table's primary and unique
keys must contain the partition key, so there the log's primary key is ``(id, logged_at)`` (``id`` still
comes from one sequence and stays unique), its unique key ``(prediction_id, logged_at)`` (the conflict
target of the writer's idempotent replay: a replayed row carries its original ``logged_at``) and the
feedback's key ``(prediction_id, logged_at)``; the feedback has no foreign key to the log there (why: see
:mod:`predictions.partitions`). SQLite keeps single tables, the log's keys of migration 0002 (primary key
``id``, SQLite's autoincrementing rowid; unique ``prediction_id``) and the feedback's foreign key with
``ON DELETE CASCADE``; its feedback has the ``logged_at`` column and key too, so one model and one upsert
serve both backends. These models describe the PostgreSQL layout (the ORM's primary key of the log is
``id``, which is unique on both); on SQLite the log's unique key and the feedback's foreign key differ from
them, as ``tests/predictions/test_partitions.py`` pins.

``status`` is ``ok`` for an answered prediction and ``output_violation`` when the model's output broke its
contract (the caller got an error, the event is kept for the on-call engineer); monitors read ``ok`` rows.
"""

from __future__ import annotations

import enum
from datetime import datetime
from typing import Any

from sqlalchemy import (
    BigInteger,
    DateTime,
    Float,
    Index,
    Integer,
    LargeBinary,
    String,
    Text,
    UniqueConstraint,
)
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
        UniqueConstraint("prediction_id", "logged_at", name="uq_prediction_log_prediction_id"),
        Index("ix_prediction_log_model_name_logged_at", "model_name", "logged_at"),
        # covering: the window summary is an index-only scan (migration 0011)
        Index(
            "ix_prediction_log_model_name_id",
            "model_name",
            "id",
            postgresql_include=["status", "logged_at", "model_version"],
        ),
        {"postgresql_partition_by": "RANGE (logged_at)"},
    )

    id: Mapped[int] = mapped_column(BigId, primary_key=True, autoincrement=True)
    prediction_id: Mapped[str] = mapped_column(String(36))
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
    # the typed copy of the inputs (predictions/typed.py); NULL for older rows and rows that cannot be typed
    layout: Mapped[int | None] = mapped_column(BigInteger, default=None)
    numbers: Mapped[bytes | None] = mapped_column(LargeBinary, default=None)
    categories: Mapped[str | None] = mapped_column(Text, default=None)
    # the whole answer when it is more than one number (a multi-class model's probabilities; migration 0017);
    # ``probability`` then holds the predicted class's probability
    outputs: Mapped[list[Any] | None] = mapped_column(default=None)


class PredictionLogLayout(Base):
    """The feature names of typed log rows, in storage order (predictions/typed.py), one row per layout."""

    __tablename__ = "prediction_log_layouts"

    id: Mapped[int] = mapped_column(BigInteger, primary_key=True, autoincrement=False)
    numeric: Mapped[str] = mapped_column(Text)  # JSON array of names
    categorical: Mapped[str] = mapped_column(Text)  # JSON array of names
    categories: Mapped[str] = mapped_column(Text)  # JSON array: each categorical's known categories


FEEDBACK_WINDOW_INCLUDE: tuple[str, ...] = ("logged_at", "status", "model_version", "probability", "label")
"""What the feedback's ``(model_name, log_id)`` index carries beside its keys on PostgreSQL: every column a
window's label read filters on or returns, so the read never visits the table."""


class PredictionFeedback(Base):
    """The ground-truth label of one logged prediction."""

    __tablename__ = "prediction_feedback"
    __table_args__ = (
        Index("ix_prediction_feedback_model_name_received_at", "model_name", "received_at"),
        # covering: a window's labels are an index-only scan in log-id order (migration 0015)
        Index(
            "ix_prediction_feedback_model_name_log_id",
            "model_name",
            "log_id",
            postgresql_include=list(FEEDBACK_WINDOW_INCLUDE),
        ),
        {"postgresql_partition_by": "RANGE (logged_at)"},
    )

    prediction_id: Mapped[str] = mapped_column(String(36), primary_key=True)
    logged_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), primary_key=True)  # the prediction's
    model_name: Mapped[str] = mapped_column(String(128))
    label: Mapped[float] = mapped_column(Float)
    received_at: Mapped[datetime] = mapped_column(DateTime(timezone=True))
    # copies of the prediction's log row (what a window filters on and reads; migration 0015)
    log_id: Mapped[int | None] = mapped_column(BigInteger, default=None)
    probability: Mapped[float | None] = mapped_column(Float, default=None)
    model_version: Mapped[int | None] = mapped_column(Integer, default=None)
    status: Mapped[str | None] = mapped_column(String(24), default=None)


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
    "layout",
    "numbers",
    "categories",
    "outputs",
)

# Column order of a feedback row where rows are copied between tables (partition maintenance).
FEEDBACK_COLUMNS: tuple[str, ...] = (
    "prediction_id",
    "logged_at",
    "model_name",
    "label",
    "received_at",
    "log_id",
    "probability",
    "model_version",
    "status",
)
