"""Monitor run duration: monitor_runs.duration_s (seconds to read the window and evaluate it).

Runs stored before this revision keep NULL (their duration was never measured).

Revision ID: 0005_monitor_run_duration
Revises: 0004_version_events
Create Date: 2026-12-10
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0005_monitor_run_duration"
down_revision = "0004_version_events"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("monitor_runs") as batch:
        batch.add_column(sa.Column("duration_s", sa.Float(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("monitor_runs") as batch:
        batch.drop_column("duration_s")
