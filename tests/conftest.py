"""Shared fixtures: databases (SQLite and the real PostgreSQL), settings isolation, CLI runner."""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from sqlalchemy import create_engine, text

PG_ADMIN_URL = os.environ.get(
    "DRIFTWARDEN_TEST_PG_ADMIN_URL", "postgresql+psycopg://postgres@127.0.0.1:5432/postgres"
)


def _pg_available() -> bool:
    try:
        engine = create_engine(PG_ADMIN_URL, connect_args={"connect_timeout": 3})
        with engine.connect() as conn:
            conn.execute(text("select 1"))
        engine.dispose()
        return True
    except Exception:
        return False


@pytest.fixture(scope="session")
def postgres_url() -> Iterator[str]:
    """A fresh PostgreSQL database for this test session, dropped at the end.

    Fails (does not skip) when PostgreSQL is down: CI starts it, and the suite promises both backends.
    """
    if not _pg_available():
        pytest.fail(f"PostgreSQL not reachable at {PG_ADMIN_URL}; start it (see .ci/run)")
    name = f"driftwarden_test_{uuid.uuid4().hex[:10]}"
    admin = create_engine(PG_ADMIN_URL, isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.execute(text(f'CREATE DATABASE "{name}"'))
    yield PG_ADMIN_URL.rsplit("/", 1)[0] + f"/{name}"
    with admin.connect() as conn:
        conn.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
    admin.dispose()


@contextmanager
def postgres_schema(base_url: str, *, migrated: bool = True) -> Iterator[str]:
    """A URL into a fresh schema of the test database (dropped afterwards).

    ``migrated``: as after ``driftwarden db upgrade`` (a server database is not upgraded on open);
    otherwise empty.
    """
    from core import migrate

    schema = f"t_{uuid.uuid4().hex[:10]}"
    engine = create_engine(base_url, isolation_level="AUTOCOMMIT")
    with engine.connect() as conn:
        conn.execute(text(f'CREATE SCHEMA "{schema}"'))
    url = f"{base_url}?options=-csearch_path%3D{schema}"
    try:
        if migrated:
            migrate.upgrade(url)
        yield url
    finally:
        with engine.connect() as conn:
            conn.execute(text(f'DROP SCHEMA "{schema}" CASCADE'))
        engine.dispose()


@pytest.fixture(params=["sqlite", "postgresql"])
def database_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """A fresh database URL on each backend (PostgreSQL: a fresh schema per test, migrated)."""
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path / 'test.db'}"
        return
    with postgres_schema(request.getfixturevalue("postgres_url")) as url:
        yield url


@pytest.fixture(autouse=True)
def _isolated_settings(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[None]:
    """Each test gets its own var/ folder; settings are re-read."""
    from core.config import get_settings

    monkeypatch.setenv("DRIFTWARDEN_DATABASE_URL", f"sqlite:///{tmp_path / 'var' / 'driftwarden.db'}")
    monkeypatch.setenv("DRIFTWARDEN_REGISTRY_PATH", str(tmp_path / "var" / "models"))
    monkeypatch.setenv("DRIFTWARDEN_CHECKPOINT_PATH", str(tmp_path / "var" / "checkpoints"))
    get_settings.cache_clear()
    yield
    get_settings.cache_clear()
