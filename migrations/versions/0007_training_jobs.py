"""Retraining job queue: training_jobs (one row per job: request, lease, progress, gate verdict, outcome).

A partial unique index allows one active job (queued, running or validating) per model, so two API
processes enqueueing at once cannot both create one; another makes an idempotency key unique per model.

Revision ID: 0007_training_jobs
Revises: 0006_one_serving_version
Create Date: 2027-01-05
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision = "0007_training_jobs"
down_revision = "0006_one_serving_version"
branch_labels = None
depends_on = None

ONE_ACTIVE = "uq_training_jobs_one_active"
WHERE = "state IN ('queued', 'running', 'validating')"
JSONType = sa.JSON().with_variant(postgresql.JSONB(), "postgresql")


def upgrade() -> None:
    op.create_table(
        "training_jobs",
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("model_name", sa.String(128), nullable=False),
        sa.Column("state", sa.String(16), nullable=False),
        sa.Column("trigger", sa.String(16), nullable=False),
        sa.Column("requested_by", sa.String(128), nullable=False),
        sa.Column("idempotency_key", sa.String(255), nullable=True),
        sa.Column("alert_id", sa.Integer(), nullable=True),
        sa.Column("params", JSONType, nullable=False),
        sa.Column("progress", JSONType, nullable=False),
        sa.Column("log_tail", sa.Text(), nullable=False),
        sa.Column("data_window", JSONType, nullable=True),
        sa.Column("parent_version", sa.Integer(), nullable=True),
        sa.Column("result_version", sa.Integer(), nullable=True),
        sa.Column("gate", JSONType, nullable=True),
        sa.Column("error", sa.Text(), nullable=True),
        sa.Column("attempts", sa.Integer(), nullable=False),
        sa.Column("lease_owner", sa.String(255), nullable=True),
        sa.Column("lease_expires_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("heartbeat_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("cancel_requested", sa.Boolean(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("started_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("finished_at", sa.DateTime(timezone=True), nullable=True),
        sa.PrimaryKeyConstraint("id", name="pk_training_jobs"),
    )
    op.create_index("ix_training_jobs_state_created_at", "training_jobs", ["state", "created_at"])
    op.create_index("ix_training_jobs_model_name_state", "training_jobs", ["model_name", "state"])
    op.create_index(
        "uq_training_jobs_model_name_idempotency_key",
        "training_jobs",
        ["model_name", "idempotency_key"],
        unique=True,
    )
    op.create_index(
        ONE_ACTIVE,
        "training_jobs",
        ["model_name"],
        unique=True,
        sqlite_where=sa.text(WHERE),
        postgresql_where=sa.text(WHERE),
    )


def downgrade() -> None:
    op.drop_index(ONE_ACTIVE, table_name="training_jobs")
    op.drop_index("uq_training_jobs_model_name_idempotency_key", table_name="training_jobs")
    op.drop_index("ix_training_jobs_model_name_state", table_name="training_jobs")
    op.drop_index("ix_training_jobs_state_created_at", table_name="training_jobs")
    op.drop_table("training_jobs")
