"""The window sketch cache's counts compressed with lz4 (PostgreSQL 14+ built with lz4), not pglz.

A stored block (``monitor_window_sketches.sketch``, ~0.5 MB with 25 features on fine grids, mostly zero
counts) goes to TOAST compressed. pglz, the default, made storing the blocks of a cold run a step of its own:
14 blocks of the bench's 1M-row window took 151-162 ms to insert with pglz and 24-26 ms with lz4, at 2.7
against 2.4 MB stored (docs/monitoring.md, "The sketch cache"). Values stored before keep pglz and read as
before; the column's method applies to new values. A server without lz4 (``default_toast_compression``
does not offer it) or SQLite: nothing changes. The downgrade sets the column back to the server's default.

Revision ID: 0016_sketch_lz4
Revises: 0015_feedback_window
Create Date: 2026-12-01
"""

from __future__ import annotations

from alembic import op

revision = "0016_sketch_lz4"
down_revision = "0015_feedback_window"
branch_labels = None
depends_on = None

_OFFERS_LZ4 = (
    "SELECT count(*) FROM pg_settings WHERE name = 'default_toast_compression' AND 'lz4' = ANY(enumvals)"
)


def _lz4_available() -> bool:
    bind = op.get_bind()
    return bind.dialect.name == "postgresql" and bool(bind.exec_driver_sql(_OFFERS_LZ4).scalar())


def upgrade() -> None:
    if _lz4_available():
        op.execute("ALTER TABLE monitor_window_sketches ALTER COLUMN sketch SET COMPRESSION lz4")


def downgrade() -> None:
    if _lz4_available():
        op.execute("ALTER TABLE monitor_window_sketches ALTER COLUMN sketch SET COMPRESSION DEFAULT")
