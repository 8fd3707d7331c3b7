"""The prediction log's typed copy of the inputs: ``layout``, ``numbers``, ``categories``; the layouts table.

Three nullable columns on ``prediction_log`` (on PostgreSQL added to the partitioned table, so to every
partition; existing rows keep NULL and are read from their JSON document) and ``prediction_log_layouts``:
the feature names of each layout in storage order and its categoricals' known categories (what the
columns hold and why: ``predictions/typed.py``). Adding nullable columns without a default rewrites
nothing: the upgrade is quick on a large log.

Revision ID: 0010_typed_log
Revises: 0009_partitioned_log
Create Date: 2026-11-30
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0010_typed_log"
down_revision = "0009_partitioned_log"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("prediction_log", sa.Column("layout", sa.BigInteger(), nullable=True))
    op.add_column("prediction_log", sa.Column("numbers", sa.LargeBinary(), nullable=True))
    op.add_column("prediction_log", sa.Column("categories", sa.Text(), nullable=True))
    op.create_table(
        "prediction_log_layouts",
        sa.Column("id", sa.BigInteger(), autoincrement=False, nullable=False),
        sa.Column("numeric", sa.Text(), nullable=False),
        sa.Column("categorical", sa.Text(), nullable=False),
        sa.Column("categories", sa.Text(), nullable=False),
        sa.PrimaryKeyConstraint("id", name="pk_prediction_log_layouts"),
    )


def downgrade() -> None:
    op.drop_table("prediction_log_layouts")
    for name in ("categories", "numbers", "layout"):
        op.drop_column("prediction_log", name)
