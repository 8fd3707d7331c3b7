"""The alert tables' write lock and the wildcard model name."""

from __future__ import annotations

import zlib

from sqlalchemy import text
from sqlalchemy.orm import Session

from core.database import begin_sqlite

WILDCARD = "*"  # the model name of the rules every model without rules of its own follows


def write_lock(*, session: Session, key: str) -> None:
    """Serialize writers of ``key`` until the transaction ends (PostgreSQL: advisory lock; SQLite: the
    database's write lock taken at once, so a read-then-write never fails halfway)."""
    connection = session.connection()
    if connection.dialect.name == "postgresql":
        lock_id = zlib.crc32(f"driftwarden.alerts:{key}".encode())
        connection.execute(text("SELECT pg_advisory_xact_lock(:k)"), {"k": lock_id})
    else:
        begin_sqlite(session, immediate=True)
