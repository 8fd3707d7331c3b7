"""Prediction log: prediction_log and prediction_feedback.

Revision ID: 0002_prediction_log
Revises: 0001_registry
Create Date: 2026-11-30
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision = "0002_prediction_log"
down_revision = "0001_registry"
branch_labels = None
depends_on = None

JSONType = sa.JSON().with_variant(postgresql.JSONB(), "postgresql")
BigId = sa.BigInteger().with_variant(sa.Integer(), "sqlite")


def upgrade() -> None:
    op.create_table(
        "prediction_log",
        sa.Column("id", BigId, primary_key=True, autoincrement=True),
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
        sa.PrimaryKeyConstraint("id", name="pk_prediction_log"),
        sa.UniqueConstraint("prediction_id", name="uq_prediction_log_prediction_id"),
    )
    op.create_index("ix_prediction_log_model_name_logged_at", "prediction_log", ["model_name", "logged_at"])
    op.create_index("ix_prediction_log_model_name_id", "prediction_log", ["model_name", "id"])
    op.create_table(
        "prediction_feedback",
        sa.Column("prediction_id", sa.String(36), nullable=False),
        sa.Column("model_name", sa.String(128), nullable=False),
        sa.Column("label", sa.Float(), nullable=False),
        sa.Column("received_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("prediction_id", name="pk_prediction_feedback"),
        sa.ForeignKeyConstraint(
            ["prediction_id"],
            ["prediction_log.prediction_id"],
            name="fk_prediction_feedback_prediction_id_prediction_log",
            ondelete="CASCADE",
        ),
    )
    op.create_index(
        "ix_prediction_feedback_model_name_received_at", "prediction_feedback", ["model_name", "received_at"]
    )


def downgrade() -> None:
    op.drop_index("ix_prediction_feedback_model_name_received_at", table_name="prediction_feedback")
    op.drop_table("prediction_feedback")
    op.drop_index("ix_prediction_log_model_name_id", table_name="prediction_log")
    op.drop_index("ix_prediction_log_model_name_logged_at", table_name="prediction_log")
    op.drop_table("prediction_log")
