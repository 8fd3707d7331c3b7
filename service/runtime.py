"""Process-level handles built from settings: the database (engine + sessions, migrated on open)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

from sqlalchemy import Engine
from sqlalchemy.orm import Session, sessionmaker

from service import migrate
from service.config import get_settings
from service.database import make_engine, make_session_factory, session_scope


@dataclass
class Database:
    """An engine and its session factory."""

    url: str
    engine: Engine
    factory: sessionmaker[Session]

    @contextmanager
    def session(self) -> Iterator[Session]:
        """A transactional session: commit on success, roll back on error."""
        with session_scope(self.factory) as session:
            yield session

    def dispose(self) -> None:
        self.engine.dispose()


def open_database(url: str | None = None, *, upgrade: bool = True) -> Database:
    """Open the configured database, applying pending migrations first (idempotent)."""
    url = url or get_settings().database_url.get_secret_value()
    if upgrade:
        migrate.upgrade(url)
    engine = make_engine(url)
    return Database(url=url, engine=engine, factory=make_session_factory(engine))
