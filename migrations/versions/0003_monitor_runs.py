"""Monitor runs: monitor_runs and monitor_feature_results.

Revision ID: 0003_monitor_runs
Revises: 0002_prediction_log
Create Date: 2026-11-30
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision = "0003_monitor_runs"
down_revision = "0002_prediction_log"
branch_labels = None
depends_on = None

JSONType = sa.JSON().with_variant(postgresql.JSONB(), "postgresql")


def upgrade() -> None:
    op.create_table(
        "monitor_runs",
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("model_name", sa.String(128), nullable=False),
        sa.Column("model_version", sa.Integer(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("window_start", sa.DateTime(timezone=True), nullable=True),
        sa.Column("window_end", sa.DateTime(timezone=True), nullable=True),
        sa.Column("rows", sa.Integer(), nullable=False),
        sa.Column("dataset_drifted", sa.Boolean(), nullable=False),
        sa.Column("n_features", sa.Integer(), nullable=False),
        sa.Column("n_drifted", sa.Integer(), nullable=False),
        sa.Column("prediction_drifted", sa.Boolean(), nullable=True),
        sa.Column("multivariate_drifted", sa.Boolean(), nullable=True),
        sa.Column("concept_drifted", sa.Boolean(), nullable=True),
        sa.Column("report", JSONType, nullable=False),
        sa.PrimaryKeyConstraint("id", name="pk_monitor_runs"),
    )
    op.create_index("ix_monitor_runs_model_name_created_at", "monitor_runs", ["model_name", "created_at"])
    op.create_table(
        "monitor_feature_results",
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("run_id", sa.Integer(), nullable=False),
        sa.Column("feature", sa.String(128), nullable=False),
        sa.Column("kind", sa.String(16), nullable=False),
        sa.Column("test", sa.String(32), nullable=False),
        sa.Column("statistic", sa.Float(), nullable=True),
        sa.Column("p_value", sa.Float(), nullable=True),
        sa.Column("adjusted_p_value", sa.Float(), nullable=True),
        sa.Column("effect", sa.Float(), nullable=True),
        sa.Column("threshold", sa.Float(), nullable=True),
        sa.Column("drifted", sa.Boolean(), nullable=False),
        sa.PrimaryKeyConstraint("id", name="pk_monitor_feature_results"),
        sa.UniqueConstraint("run_id", "feature", name="uq_monitor_feature_results_run_id"),
        sa.ForeignKeyConstraint(
            ["run_id"],
            ["monitor_runs.id"],
            name="fk_monitor_feature_results_run_id_monitor_runs",
            ondelete="CASCADE",
        ),
    )


def downgrade() -> None:
    op.drop_table("monitor_feature_results")
    op.drop_index("ix_monitor_runs_model_name_created_at", table_name="monitor_runs")
    op.drop_table("monitor_runs")
