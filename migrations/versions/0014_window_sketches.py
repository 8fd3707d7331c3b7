"""The window sketch cache: ``monitor_window_sketches``, the counts of sealed blocks of the log's ids.

One row per (model, version filter, profile-and-threshold fingerprint, ids per block, block): the block's
row count and oldest ``logged_at`` when counted, and its counts (``monitors.sketch.encode_counts``). A
monitor run on PostgreSQL merges the stored blocks still valid and counts only the rest
(``monitors.log_window``); the run deletes the blocks its window no longer needs. A new table: the
upgrade is quick.

Revision ID: 0014_window_sketches
Revises: 0013_link_key
Create Date: 2026-11-30
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0014_window_sketches"
down_revision = "0013_link_key"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "monitor_window_sketches",
        sa.Column("model_name", sa.String(128), nullable=False),
        sa.Column("version_filter", sa.Integer(), nullable=False),
        sa.Column("fingerprint", sa.String(32), nullable=False),
        sa.Column("block_ids", sa.Integer(), nullable=False),
        sa.Column("block", sa.BigInteger(), nullable=False),
        sa.Column("rows", sa.BigInteger(), nullable=False),
        sa.Column("oldest", sa.DateTime(timezone=True), nullable=False),
        sa.Column("sketch", sa.LargeBinary(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint(
            "model_name",
            "version_filter",
            "fingerprint",
            "block_ids",
            "block",
            name="pk_monitor_window_sketches",
        ),
    )


def downgrade() -> None:
    op.drop_table("monitor_window_sketches")
