"""Prediction log tables.

``prediction_batches`` holds one row per request (or ingested batch) of one model version: the model, the
version, the time, the source, the request id (the caller's ``X-Request-Id``, an import's or a CloudEvent's
id; NULL when the caller sent none: the answer's prediction ids link it to its rows), protocol, status and
latency, its predictions' ids as the first one (``first_id``, a UUID) and their number (``size``: the ids
count up in their last three hex digits, :mod:`predictions.batch`), and the predictions column by column:
the inputs' typed copy (``numbers``: one little-endian float64 per feature and prediction in a recorded
layout, :mod:`predictions.typed`; ``categories``: the texts of the rows holding a category outside the
layout), the outputs (``outputs``: one float64 per prediction; ``vectors``: a multi-class model's
probabilities), the flags, and the row documents only where the typed copy cannot hold them exactly
(``inputs``). A prediction is a position in its batch; its time is the batch's ``logged_at``.

The monitors read "the last N predictions" or "the last T minutes" of one model, so the table carries two
composite indexes led by ``model_name``: ``(model_name, logged_at)`` for time windows and ``(model_name,
id)``, which carries ``size`` and the filters, for last-N reads (``id`` grows with insertion order; a read by
``id`` names the model too, so one of them serves it). A prediction id is found through the primary key
``(first_id, logged_at)``: its batch is one whose ``first_id`` lies between the id's prefix followed by
``000`` and the id itself, and whose ``size`` reaches it (the key is the conflict target of the writer's
idempotent replay: a replayed batch carries its original time).

``prediction_feedback`` holds the ground-truth label of a prediction (one per prediction; a resent label
replaces the previous one), with a copy of what a window reads of its prediction, filled by
``record_feedback``: ``logged_at`` (the partition key, beside ``prediction_id`` the key), the batch's ``id``
as ``log_id`` and the prediction's ``position`` in it, its output as ``probability``, ``model_version`` and
``status``. A batch never changes once written, so the copies stay true; with them the labelled predictions
of a window are read from the feedback alone (an index-only scan of ``(model_name, log_id)``, which includes
the rest), never joined with the batches.

On PostgreSQL both tables are range-partitioned by ``logged_at`` with the same ranges
(:mod:`predictions.partitions`): retention drops the partitions of a span of time that has wholly expired,
batches and feedback in one transaction, instead of deleting rows. A partitioned table's primary and unique
keys must contain the partition key, so there the batches' primary key is ``(first_id, logged_at)`` (``id``
comes from one sequence, unique without an index of its own) and the feedback's key ``(prediction_id,
logged_at)``; the feedback has no foreign key to the batches. SQLite keeps single tables: the batches'
primary key is ``id`` (SQLite's autoincrementing rowid) and ``(first_id, logged_at)`` a unique key
(``SQLITE_FIRST_ID_KEY``, left out of these models: :func:`predictions.partitions.include_object`). These
models describe the PostgreSQL layout.

``status`` is ``ok`` for answered predictions and ``output_violation`` when the model's output broke its
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
    PrimaryKeyConstraint,
    String,
    Text,
    Uuid,
    text,
)
from sqlalchemy.orm import Mapped, mapped_column

from core.database import Base, UTCDateTime

BigId = BigInteger().with_variant(Integer(), "sqlite")  # SQLite autoincrements INTEGER PRIMARY KEY only
# a prediction id: PostgreSQL's 16-byte uuid; on SQLite its 36-character text (lowercase, compared as text)
PredictionId = Uuid(as_uuid=False).with_variant(String(36), "sqlite")
SQLITE_FIRST_ID_KEY = "uq_prediction_batches_first_id"
"""The SQLite log's unique key ``(first_id, logged_at)`` (there the primary key is the rowid ``id``)."""


class PredictionStatus(enum.StrEnum):
    OK = "ok"
    OUTPUT_VIOLATION = "output_violation"


class PredictionBatch(Base):
    """The predictions of one request (or one ingested batch), column by column."""

    __tablename__ = "prediction_batches"
    __table_args__ = (
        PrimaryKeyConstraint("first_id", "logged_at", name="pk_prediction_batches"),
        Index("ix_prediction_batches_model_name_logged_at", "model_name", "logged_at"),
        # covering: a window's summary and its block statistics are index-only scans
        Index(
            "ix_prediction_batches_model_name_id",
            "model_name",
            "id",
            postgresql_include=["status", "logged_at", "model_version", "size"],
        ),
        {"postgresql_partition_by": "RANGE (logged_at)"},
    )

    # insertion order (the prediction_batches_id_seq sequence); SQLite: the rowid, its primary key
    id: Mapped[int] = mapped_column(BigId, server_default=text("nextval('prediction_batches_id_seq')"))
    model_name: Mapped[str] = mapped_column(String(128))
    model_version: Mapped[int] = mapped_column(Integer)
    logged_at: Mapped[datetime] = mapped_column(UTCDateTime())
    source: Mapped[str] = mapped_column(String(16), default="serve")
    request_id: Mapped[str | None] = mapped_column(String(128), default=None)  # the caller's, or NULL
    protocol: Mapped[str] = mapped_column(String(8))
    status: Mapped[str] = mapped_column(String(24), default=PredictionStatus.OK.value)
    latency_ms: Mapped[float] = mapped_column(Float)
    # the predictions' ids: the first one, then its last three hex digits counting up (predictions/batch.py)
    first_id: Mapped[str] = mapped_column(PredictionId)
    size: Mapped[int] = mapped_column(Integer)
    # the inputs' typed copy (predictions/typed.py): size x width little-endian float64, row by row
    layout: Mapped[int | None] = mapped_column(BigInteger, default=None)
    numbers: Mapped[bytes | None] = mapped_column(LargeBinary, default=None)
    categories: Mapped[str | None] = mapped_column(Text, default=None)
    # one little-endian float64 per prediction: the probability (binary), the predicted class's probability
    # (multi-class) or the value (regression); NaN for none
    outputs: Mapped[bytes] = mapped_column(LargeBinary)
    # a multi-class model's probability vectors: size x K little-endian float64; NULL otherwise
    vectors: Mapped[bytes | None] = mapped_column(LargeBinary, default=None)
    flags: Mapped[list[Any] | None] = mapped_column(default=None)  # one list (or null) per prediction
    # the row documents, when the typed copy cannot hold them exactly (no layout, a value of another type,
    # a key outside the layout); NULL otherwise
    inputs: Mapped[list[Any] | None] = mapped_column(default=None)


class PredictionLogLayout(Base):
    """The feature names of typed log rows, in storage order (predictions/typed.py), one row per layout."""

    __tablename__ = "prediction_log_layouts"

    id: Mapped[int] = mapped_column(BigInteger, primary_key=True, autoincrement=False)
    numeric: Mapped[str] = mapped_column(Text)  # JSON array of names
    categorical: Mapped[str] = mapped_column(Text)  # JSON array of names
    categories: Mapped[str] = mapped_column(Text)  # JSON array: each categorical's known categories


FEEDBACK_WINDOW_INCLUDE: tuple[str, ...] = (
    "position",
    "logged_at",
    "status",
    "model_version",
    "probability",
    "label",
)
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
    # copies of the prediction's batch (what a window filters on and reads)
    log_id: Mapped[int | None] = mapped_column(BigInteger, default=None)  # the batch's id
    position: Mapped[int | None] = mapped_column(Integer, default=None)  # the prediction's place in it
    probability: Mapped[float | None] = mapped_column(Float, default=None)
    model_version: Mapped[int | None] = mapped_column(Integer, default=None)
    status: Mapped[str | None] = mapped_column(String(24), default=None)


# Field order of a batch as the writer and the spool carry it (tuples, not ORM objects: the write path is
# hot; predictions.batch.LogBatch): its ids as the prefix and the first tail (``id_prefix``, ``id_low``),
# which the table stores as one ``first_id`` (LOG_TABLE_COLUMNS). ``id`` is assigned by the database.
LOG_COLUMNS: tuple[str, ...] = (
    "id_prefix",
    "id_low",
    "size",
    "request_id",
    "model_name",
    "model_version",
    "logged_at",
    "latency_ms",
    "status",
    "protocol",
    "source",
    "layout",
    "numbers",
    "categories",
    "outputs",
    "vectors",
    "flags",
    "inputs",
)
# The table's columns of a batch (``id`` aside) in the same order: ``first_id`` for the first two fields.
LOG_TABLE_COLUMNS: tuple[str, ...] = ("first_id", *LOG_COLUMNS[2:])

# Column order of a feedback row where rows are copied between tables (partition maintenance).
FEEDBACK_COLUMNS: tuple[str, ...] = (
    "prediction_id",
    "logged_at",
    "model_name",
    "label",
    "received_at",
    "log_id",
    "position",
    "probability",
    "model_version",
    "status",
)


class CloudEventPair(Base):
    """The two halves of one inference KServe's logger reports (a request event and a response event sharing
    one ``ce-id``), kept until both have come or the wait is over (``predictions.service.pairing``).

    A half is present once its ``*_at`` is set; the bodies go once the pair is settled (``settled_at``:
    logged, expired or refused), and the row stays as a tombstone for a while so that a duplicate event is
    known."""

    __tablename__ = "cloudevent_pairs"
    __table_args__ = (Index("ix_cloudevent_pairs_opened_at", "opened_at"),)

    model_name: Mapped[str] = mapped_column(String(128), primary_key=True)
    event_id: Mapped[str] = mapped_column(String(256), primary_key=True)
    opened_at: Mapped[datetime] = mapped_column(UTCDateTime())  # when the first half arrived
    request_at: Mapped[datetime | None] = mapped_column(UTCDateTime(), default=None)  # arrival
    request_time: Mapped[datetime | None] = mapped_column(UTCDateTime(), default=None)  # ce-time
    request_body: Mapped[bytes | None] = mapped_column(LargeBinary, default=None)
    response_at: Mapped[datetime | None] = mapped_column(UTCDateTime(), default=None)
    response_time: Mapped[datetime | None] = mapped_column(UTCDateTime(), default=None)
    response_body: Mapped[bytes | None] = mapped_column(LargeBinary, default=None)
    settled_at: Mapped[datetime | None] = mapped_column(UTCDateTime(), default=None)
    outcome: Mapped[str | None] = mapped_column(String(24), default=None)  # how it was settled
