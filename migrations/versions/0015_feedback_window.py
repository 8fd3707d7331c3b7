"""The labels of a window read from the feedback alone: copies of the log row in ``prediction_feedback``.

Four nullable columns on ``prediction_feedback`` (on PostgreSQL added to the partitioned table, so to every
partition): the prediction's log ``id`` as ``log_id``, its ``probability``, ``model_version`` and
``status``, what a window filters on and reads (``predictions.aggregates``); ``record_feedback`` fills them
from then on. Every existing label is **backfilled** from its log row (joined on the key
``(prediction_id, logged_at)``; a label whose prediction the log no longer holds keeps NULL, which no
window reads, as no join found it before). Then the index ``(model_name, log_id)``, on PostgreSQL with
``INCLUDE (logged_at, status, model_version, probability, label)``, so that a window's labels are an
index-only scan in log-id order instead of a join that scanned the whole window of the log (measured on a
1M-row window with 100k labels: see docs/monitoring.md).

The backfill rewrites every feedback row and the index is built over all of them, both while the
migration's transaction holds the feedback table (seconds per million labels): run the upgrade at a quiet
moment on a large log (docs/operations.md, "Upgrade with migrations"). The downgrade drops the index and
the columns (the labels themselves stay).

Revision ID: 0015_feedback_window
Revises: 0014_window_sketches
Create Date: 2026-12-01
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0015_feedback_window"
down_revision = "0014_window_sketches"
branch_labels = None
depends_on = None

INDEX = "ix_prediction_feedback_model_name_log_id"
INCLUDE = ["logged_at", "status", "model_version", "probability", "label"]
COPIED = ("log_id", "probability", "model_version", "status")  # copies of the log row's id and three columns

# PostgreSQL: on both keys (a label and its prediction share the partition key); SQLite: on prediction_id
# (its log's unique key, as the foreign key of 0002). UPDATE ... FROM: PostgreSQL, SQLite 3.33+.
_BACKFILL = (
    "UPDATE prediction_feedback SET log_id = p.id, probability = p.probability, "
    "model_version = p.model_version, status = p.status "
    "FROM prediction_log p WHERE p.prediction_id = prediction_feedback.prediction_id"
)
_SAME_TIME = " AND p.logged_at = prediction_feedback.logged_at"


def upgrade() -> None:
    postgres = op.get_bind().dialect.name == "postgresql"
    op.add_column("prediction_feedback", sa.Column("log_id", sa.BigInteger(), nullable=True))
    op.add_column("prediction_feedback", sa.Column("probability", sa.Float(), nullable=True))
    op.add_column("prediction_feedback", sa.Column("model_version", sa.Integer(), nullable=True))
    op.add_column("prediction_feedback", sa.Column("status", sa.String(24), nullable=True))
    op.execute(_BACKFILL + (_SAME_TIME if postgres else ""))
    if postgres:
        op.create_index(INDEX, "prediction_feedback", ["model_name", "log_id"], postgresql_include=INCLUDE)
        op.execute("ANALYZE prediction_feedback")  # the planner sees the new columns' statistics at once
    else:
        op.create_index(INDEX, "prediction_feedback", ["model_name", "log_id"])


def downgrade() -> None:
    op.drop_index(INDEX, table_name="prediction_feedback")
    for name in reversed(COPIED):
        op.drop_column("prediction_feedback", name)
