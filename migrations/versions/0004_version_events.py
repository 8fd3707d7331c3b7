"""Registry history: model_version_events (one row per state change or label move of a version).

Existing versions get their history started: a ``register`` event at their creation and, for a version no
longer staged, one event for the change that brought it to its current state (actor ``migration 0004``).

Revision ID: 0004_version_events
Revises: 0003_monitor_runs
Create Date: 2026-12-01
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0004_version_events"
down_revision = "0003_monitor_runs"
branch_labels = None
depends_on = None

ACTOR = "migration 0004"


def upgrade() -> None:
    op.create_table(
        "model_version_events",
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("model_name", sa.String(128), nullable=False),
        sa.Column("version", sa.Integer(), nullable=False),
        sa.Column("action", sa.String(16), nullable=False),
        sa.Column("from_state", sa.String(16), nullable=True),
        sa.Column("to_state", sa.String(16), nullable=True),
        sa.Column("label", sa.String(64), nullable=True),
        sa.Column("previous_version", sa.Integer(), nullable=True),
        sa.Column("reason", sa.Text(), nullable=True),
        sa.Column("actor", sa.String(128), nullable=False),
        sa.Column("at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("id", name="pk_model_version_events"),
    )
    op.create_index(
        "ix_model_version_events_model_name_version", "model_version_events", ["model_name", "version"]
    )
    # the history of versions registered before this table existed, oldest change first
    op.execute(
        sa.text(
            "INSERT INTO model_version_events (model_name, version, action, to_state, actor, at) "
            "SELECT model_name, version, 'register', 'staged', :actor, created_at "
            "FROM model_versions ORDER BY created_at, id"
        ).bindparams(actor=ACTOR)
    )
    op.execute(
        sa.text(
            "INSERT INTO model_version_events "
            "(model_name, version, action, from_state, to_state, reason, actor, at) "
            "SELECT model_name, version, "
            "CASE CAST(state AS VARCHAR(16)) WHEN 'serving' THEN 'promote' "
            "WHEN 'archived' THEN 'archive' ELSE 'reject' END, "
            "CASE CAST(state AS VARCHAR(16)) WHEN 'archived' THEN 'serving' ELSE 'staged' END, "
            "CAST(state AS VARCHAR(16)), state_reason, :actor, updated_at "
            "FROM model_versions WHERE CAST(state AS VARCHAR(16)) <> 'staged' ORDER BY updated_at, id"
        ).bindparams(actor=ACTOR)
    )


def downgrade() -> None:
    op.drop_index("ix_model_version_events_model_name_version", table_name="model_version_events")
    op.drop_table("model_version_events")
