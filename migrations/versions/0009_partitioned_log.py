"""Prediction log partitioned by time on PostgreSQL; the feedback carries its prediction's logged_at.

PostgreSQL: ``prediction_log`` and ``prediction_feedback`` become ``PARTITION BY RANGE (logged_at)`` (why and
how they are maintained: ``predictions/partitions.py``). The existing tables are renamed aside; the new ones
are created with a DEFAULT partition and one daily partition per day that has rows, plus today and tomorrow
(the retention job, which runs at start-up, creates the rest of the coming week: fewer tables here keeps a
fresh schema quick to make); every row is copied with its ``id`` (the feedback gets its prediction's
``logged_at`` from the log); the keys and indexes are built once per partition after the copy (faster than
maintaining them row by row); the ``id`` sequence is kept (it moves to the new table and is set to at least
the highest copied id); the old tables are dropped. Keys: log ``(id, logged_at)`` and unique
``(prediction_id, logged_at)``; feedback ``(prediction_id, logged_at)``, no foreign key. The conversion is
one transaction under an ACCESS EXCLUSIVE lock: stop the writers (or accept that they spool) while it runs
on a large log.

SQLite: the log stays as it is; the feedback table is rebuilt with the ``logged_at`` column (filled from the
log) and the key ``(prediction_id, logged_at)``, keeping its foreign key with ON DELETE CASCADE.

The downgrade converts back (it refuses, naming the count, when a prediction id is logged twice at different
times or a label's prediction is missing: the old keys cannot hold those rows).

Revision ID: 0009_partitioned_log
Revises: 0008_alerts
Create Date: 2026-11-30
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision = "0009_partitioned_log"
down_revision = "0008_alerts"
branch_labels = None
depends_on = None

JSONType = sa.JSON().with_variant(postgresql.JSONB(), "postgresql")
LOG_COLS = (
    "id, prediction_id, request_id, model_name, model_version, logged_at, inputs, probability, flags, "
    "latency_ms, status, protocol"
)
FEEDBACK_COLS = "prediction_id, logged_at, model_name, label, received_at"
OLD_FEEDBACK_COLS = "prediction_id, model_name, label, received_at"
AHEAD_DAYS = 1  # the retention job, run at start-up, creates the rest of the week
OLD = "_0008"  # suffix of the tables being converted, while both exist
NEW = "_0009"


def _log_columns(id_default: str) -> list[sa.Column[Any]]:
    return [
        sa.Column("id", sa.BigInteger(), server_default=sa.text(f"nextval('{id_default}')"), nullable=False),
        sa.Column("prediction_id", sa.String(36), nullable=False),
        sa.Column("request_id", sa.String(128), nullable=False),
        sa.Column("model_name", sa.String(128), nullable=False),
        sa.Column("model_version", sa.Integer(), nullable=False),
        sa.Column("logged_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("inputs", JSONType, nullable=False),
        sa.Column("probability", sa.Float(), nullable=True),
        sa.Column("flags", JSONType, nullable=True),
        sa.Column("latency_ms", sa.Float(), nullable=False),
        sa.Column("status", sa.String(24), nullable=False),
        sa.Column("protocol", sa.String(8), nullable=False),
    ]


def _feedback_columns(*, logged_at: bool) -> list[sa.Column[Any]]:
    cols: list[sa.Column[Any]] = [sa.Column("prediction_id", sa.String(36), nullable=False)]
    if logged_at:
        cols.append(sa.Column("logged_at", sa.DateTime(timezone=True), nullable=False))
    return [
        *cols,
        sa.Column("model_name", sa.String(128), nullable=False),
        sa.Column("label", sa.Float(), nullable=False),
        sa.Column("received_at", sa.DateTime(timezone=True), nullable=False),
    ]


def _scalar(sql: str) -> Any:
    return op.get_bind().execute(sa.text(sql)).scalar()


def _set_aside(suffix: str) -> str:
    """Rename both tables (and their index and constraint names, which are schema-wide) with ``suffix``;
    detach the id sequence from the log so it outlives the old table. Returns the sequence's name."""
    op.execute("LOCK TABLE prediction_log, prediction_feedback IN ACCESS EXCLUSIVE MODE")
    sequence = _scalar("SELECT pg_get_serial_sequence('prediction_log', 'id')")
    if sequence is None:
        raise RuntimeError("prediction_log.id has no sequence of its own: not a schema driftwarden made")
    op.execute(f"ALTER SEQUENCE {sequence} OWNED BY NONE")
    for table, constraints, indexes in (
        (
            "prediction_log",
            ("pk_prediction_log", "uq_prediction_log_prediction_id"),
            ("ix_prediction_log_model_name_logged_at", "ix_prediction_log_model_name_id"),
        ),
        (
            "prediction_feedback",
            ("pk_prediction_feedback",),
            ("ix_prediction_feedback_model_name_received_at",),
        ),
    ):
        op.execute(f"ALTER TABLE {table} RENAME TO {table}{suffix}")
        for name in constraints:
            op.execute(f"ALTER TABLE {table}{suffix} RENAME CONSTRAINT {name} TO {name}{suffix}")
        for name in indexes:
            op.execute(f"ALTER INDEX {name} RENAME TO {name}{suffix}")
    return str(sequence)


def _days_with_rows() -> list[datetime]:
    days = op.get_bind().execute(
        sa.text(f"SELECT DISTINCT date_trunc('day', logged_at AT TIME ZONE 'UTC') FROM prediction_log{OLD}")
    )
    today = datetime.now(UTC).replace(hour=0, minute=0, second=0, microsecond=0, tzinfo=None)
    ahead = [today + timedelta(days=i) for i in range(AHEAD_DAYS + 1)]
    return sorted({*(day for (day,) in days), *ahead})


def _copy_checked(table: str, select: str, expected: int, *, columns: str = LOG_COLS) -> None:
    """``INSERT INTO table (columns) select``, refusing to go on unless it copied every one of the rows."""
    copied = op.get_bind().execute(sa.text(f"INSERT INTO {table} ({columns}) {select}")).rowcount
    if copied != expected:
        raise RuntimeError(
            f"{table}: copied {copied} rows of {expected} (a label whose prediction is missing?); "
            "the migration is rolled back"
        )


def _pg_upgrade() -> None:
    sequence = _set_aside(OLD)
    op.create_table("prediction_log", *_log_columns(sequence), postgresql_partition_by="RANGE (logged_at)")
    op.execute(f"ALTER SEQUENCE {sequence} OWNED BY prediction_log.id")
    op.create_table(
        "prediction_feedback", *_feedback_columns(logged_at=True), postgresql_partition_by="RANGE (logged_at)"
    )
    for table in ("prediction_log", "prediction_feedback"):
        op.execute(f"CREATE TABLE {table}_default PARTITION OF {table} DEFAULT")
        for day in _days_with_rows():
            start, end = f"{day:%Y-%m-%d} 00:00+00", f"{day + timedelta(days=1):%Y-%m-%d} 00:00+00"
            op.execute(
                f"CREATE TABLE {table}_p{day:%Y%m%d} PARTITION OF {table} "
                f"FOR VALUES FROM ('{start}') TO ('{end}')"
            )
    rows = int(_scalar(f"SELECT count(*) FROM prediction_log{OLD}"))
    labels = int(_scalar(f"SELECT count(*) FROM prediction_feedback{OLD}"))
    _copy_checked("prediction_log", f"SELECT {LOG_COLS} FROM prediction_log{OLD}", rows)
    _copy_checked(
        "prediction_feedback",
        "SELECT f.prediction_id, p.logged_at, f.model_name, f.label, f.received_at "
        f"FROM prediction_feedback{OLD} f JOIN prediction_log{OLD} p ON p.prediction_id = f.prediction_id",
        labels,
        columns=FEEDBACK_COLS,
    )
    op.create_primary_key("pk_prediction_log", "prediction_log", ["id", "logged_at"])
    op.create_unique_constraint(
        "uq_prediction_log_prediction_id", "prediction_log", ["prediction_id", "logged_at"]
    )
    op.create_index("ix_prediction_log_model_name_logged_at", "prediction_log", ["model_name", "logged_at"])
    op.create_index("ix_prediction_log_model_name_id", "prediction_log", ["model_name", "id"])
    op.create_primary_key("pk_prediction_feedback", "prediction_feedback", ["prediction_id", "logged_at"])
    op.create_index(
        "ix_prediction_feedback_model_name_received_at", "prediction_feedback", ["model_name", "received_at"]
    )
    # the sequence is the old one, so it is already past every id; make sure of it anyway
    op.execute(
        f"SELECT setval('{sequence}', m) FROM (SELECT max(id) AS m FROM prediction_log) t "
        f"WHERE m IS NOT NULL AND m > (SELECT last_value FROM {sequence})"
    )
    op.execute(f"DROP TABLE prediction_feedback{OLD}")
    op.execute(f"DROP TABLE prediction_log{OLD}")
    op.execute("ANALYZE prediction_log")
    op.execute("ANALYZE prediction_feedback")


def _pg_downgrade() -> None:
    twice = int(
        _scalar(
            "SELECT count(*) FROM (SELECT 1 FROM prediction_log GROUP BY prediction_id HAVING count(*) > 1) t"
        )
    )
    if twice:
        raise RuntimeError(
            f"cannot downgrade below 0009: {twice} prediction ids are logged more than once (at different "
            "times), which the unpartitioned log's unique prediction_id cannot hold; delete duplicates first"
        )
    orphans = int(
        _scalar(
            "SELECT count(*) FROM prediction_feedback f WHERE NOT EXISTS (SELECT 1 FROM prediction_log p "
            "WHERE p.prediction_id = f.prediction_id AND p.logged_at = f.logged_at)"
        )
    )
    if orphans:
        raise RuntimeError(
            f"cannot downgrade below 0009: {orphans} labels have no logged prediction, which the "
            "unpartitioned feedback's foreign key cannot hold; delete them first"
        )
    sequence = _set_aside(NEW)
    op.create_table(
        "prediction_log",
        *_log_columns(sequence),
        sa.PrimaryKeyConstraint("id", name="pk_prediction_log"),
        sa.UniqueConstraint("prediction_id", name="uq_prediction_log_prediction_id"),
    )
    op.execute(f"ALTER SEQUENCE {sequence} OWNED BY prediction_log.id")
    op.create_table(
        "prediction_feedback",
        *_feedback_columns(logged_at=False),
        sa.PrimaryKeyConstraint("prediction_id", name="pk_prediction_feedback"),
        sa.ForeignKeyConstraint(
            ["prediction_id"],
            ["prediction_log.prediction_id"],
            name="fk_prediction_feedback_prediction_id_prediction_log",
            ondelete="CASCADE",
        ),
    )
    rows = int(_scalar(f"SELECT count(*) FROM prediction_log{NEW}"))
    labels = int(_scalar(f"SELECT count(*) FROM prediction_feedback{NEW}"))
    _copy_checked("prediction_log", f"SELECT {LOG_COLS} FROM prediction_log{NEW}", rows)
    _copy_checked(
        "prediction_feedback",
        f"SELECT prediction_id, model_name, label, received_at FROM prediction_feedback{NEW}",
        labels,
        columns=OLD_FEEDBACK_COLS,
    )
    op.create_index("ix_prediction_log_model_name_logged_at", "prediction_log", ["model_name", "logged_at"])
    op.create_index("ix_prediction_log_model_name_id", "prediction_log", ["model_name", "id"])
    op.create_index(
        "ix_prediction_feedback_model_name_received_at", "prediction_feedback", ["model_name", "received_at"]
    )
    op.execute(f"DROP TABLE prediction_feedback{NEW}")  # with its partitions
    op.execute(f"DROP TABLE prediction_log{NEW}")


def _sqlite_feedback(*, logged_at: bool) -> None:
    """Rebuild SQLite's feedback table with or without ``logged_at`` (and the key that goes with it)."""
    key = ["prediction_id", "logged_at"] if logged_at else ["prediction_id"]
    op.create_table(
        f"prediction_feedback{NEW}",
        *_feedback_columns(logged_at=logged_at),
        sa.PrimaryKeyConstraint(*key, name="pk_prediction_feedback"),
        sa.ForeignKeyConstraint(
            ["prediction_id"],
            ["prediction_log.prediction_id"],
            name="fk_prediction_feedback_prediction_id_prediction_log",
            ondelete="CASCADE",
        ),
    )
    labels = int(_scalar("SELECT count(*) FROM prediction_feedback"))
    if logged_at:
        select = (
            "SELECT f.prediction_id, p.logged_at, f.model_name, f.label, f.received_at "
            "FROM prediction_feedback f JOIN prediction_log p ON p.prediction_id = f.prediction_id"
        )
        cols = FEEDBACK_COLS
    else:
        select = f"SELECT {OLD_FEEDBACK_COLS} FROM prediction_feedback"
        cols = OLD_FEEDBACK_COLS
    _copy_checked(f"prediction_feedback{NEW}", select, labels, columns=cols)
    op.drop_index("ix_prediction_feedback_model_name_received_at", table_name="prediction_feedback")
    op.drop_table("prediction_feedback")
    op.rename_table(f"prediction_feedback{NEW}", "prediction_feedback")
    op.create_index(
        "ix_prediction_feedback_model_name_received_at", "prediction_feedback", ["model_name", "received_at"]
    )


def upgrade() -> None:
    if op.get_bind().dialect.name == "postgresql":
        _pg_upgrade()
    else:
        _sqlite_feedback(logged_at=True)


def downgrade() -> None:
    if op.get_bind().dialect.name == "postgresql":
        _pg_downgrade()
    else:
        _sqlite_feedback(logged_at=False)
