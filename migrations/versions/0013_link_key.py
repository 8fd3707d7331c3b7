"""The key of the signed report links (one row, made here with a random secret; rotated by the CLI).

Revision ID: 0013_link_key
Revises: 0012_tokens
Create Date: 2026-11-30
"""

from __future__ import annotations

import secrets
from datetime import UTC, datetime

import sqlalchemy as sa
from alembic import op

revision = "0013_link_key"
down_revision = "0012_tokens"
branch_labels = None
depends_on = None


def upgrade() -> None:
    table = op.create_table(
        "link_signing_key",
        sa.Column("id", sa.Integer(), primary_key=True, autoincrement=False),
        sa.Column("secret", sa.String(64), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.CheckConstraint("id = 1", name="ck_link_signing_key_one_row"),
    )
    # one key per database from the start: every process sharing it signs and verifies with the same key
    op.bulk_insert(table, [{"id": 1, "secret": secrets.token_urlsafe(32), "created_at": datetime.now(UTC)}])


def downgrade() -> None:
    op.drop_table("link_signing_key")
