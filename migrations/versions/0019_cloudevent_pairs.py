"""The pairing state of KServe's inference logger: ``cloudevent_pairs``, one row per ``(model, ce-id)``.

KServe's logger reports one inference as two CloudEvents (the request, then the response) that may reach
different workers or replicas of the server, in either order. The first half to arrive is kept here; the
second completes the pair, which is logged and settled in the same transaction (``predictions.service.
pairing``). A settled row loses its bodies and stays for a while as a tombstone, so a duplicate event is
known. A new table: the upgrade writes no row of any other table; the downgrade drops it. Both are safe to run
again (an upgrade or downgrade that died after its DDL, before alembic recorded the revision).

Revision ID: 0019_cloudevent_pairs
Revises: 0018_log_batches
Create Date: 2026-12-02
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0019_cloudevent_pairs"
down_revision = "0018_log_batches"
branch_labels = None
depends_on = None
TABLE = "cloudevent_pairs"


def _exists() -> bool:
    return sa.inspect(op.get_bind()).has_table(TABLE)


def upgrade() -> None:
    if _exists():
        return
    op.create_table(
        "cloudevent_pairs",
        sa.Column("model_name", sa.String(128), nullable=False),
        sa.Column("event_id", sa.String(256), nullable=False),
        sa.Column("opened_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("request_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("request_time", sa.DateTime(timezone=True), nullable=True),
        sa.Column("request_body", sa.LargeBinary(), nullable=True),
        sa.Column("response_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("response_time", sa.DateTime(timezone=True), nullable=True),
        sa.Column("response_body", sa.LargeBinary(), nullable=True),
        sa.Column("settled_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("outcome", sa.String(24), nullable=True),
        sa.PrimaryKeyConstraint("model_name", "event_id", name="pk_cloudevent_pairs"),
    )
    op.create_index("ix_cloudevent_pairs_opened_at", "cloudevent_pairs", ["opened_at"])


def downgrade() -> None:
    if not _exists():
        return
    op.drop_index("ix_cloudevent_pairs_opened_at", table_name="cloudevent_pairs")
    op.drop_table("cloudevent_pairs")
