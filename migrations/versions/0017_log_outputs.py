"""The prediction log keeps an answer that is more than one number: ``prediction_log.outputs``.

A multi-class model answers a probability per class. ``probability`` keeps one number per prediction (a
binary model's probability of the positive class, a regression's value, a multi-class model's probability
of the class it predicted), and ``outputs`` the whole vector (JSON array; JSONB on PostgreSQL), NULL where
the one number is the whole answer. Adding a nullable column without a default writes no row; on the
partitioned PostgreSQL log the column reaches every partition. The downgrade drops it.

Revision ID: 0017_log_outputs
Revises: 0016_sketch_lz4
Create Date: 2026-12-02
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision = "0017_log_outputs"
down_revision = "0016_sketch_lz4"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column(
        "prediction_log",
        sa.Column("outputs", sa.JSON().with_variant(postgresql.JSONB(), "postgresql"), nullable=True),
    )


def downgrade() -> None:
    op.drop_column("prediction_log", "outputs")
