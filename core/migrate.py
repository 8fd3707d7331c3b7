"""The schema's alembic migrations (the top-level ``migrations`` package): apply, inspect, check."""

from __future__ import annotations

import importlib.util
from functools import cache
from pathlib import Path

from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import create_engine, make_url

from core.errors import Unavailable


class SchemaOutdated(Unavailable):
    """The database's schema is older (or other) than the code's; the message says how to fix it."""


@cache
def migrations_folder() -> Path:
    """The folder of the top-level ``migrations`` package, found without importing it: it sits above every
    domain (its ``env.py`` imports their models), and core imports nothing of the project."""
    spec = importlib.util.find_spec("migrations")
    locations = None if spec is None else spec.submodule_search_locations
    if not locations:
        raise Unavailable("the 'migrations' package is not installed beside core: reinstall driftwarden")
    return Path(next(iter(locations)))


def alembic_config(url: str) -> Config:
    """An alembic config for ``url`` that needs no ini file."""
    cfg = Config()
    cfg.set_main_option("script_location", str(migrations_folder()))
    cfg.set_main_option("sqlalchemy.url", url.replace("%", "%%"))
    return cfg


def upgrade(url: str, revision: str = "head") -> None:
    """Bring the database at ``url`` up to ``revision``."""
    command.upgrade(alembic_config(url), revision)


def downgrade(url: str, revision: str) -> None:
    """Take the database at ``url`` down to ``revision``."""
    command.downgrade(alembic_config(url), revision)


def head() -> str:
    """The newest revision the code knows."""
    revision = ScriptDirectory.from_config(alembic_config("sqlite://")).get_current_head()
    assert revision is not None, "the migrations folder has no revision"
    return revision


def current(url: str) -> str | None:
    """The revision the database is at (None when never migrated)."""
    engine = create_engine(url, connect_args={"connect_timeout": 10} if url.startswith("postgresql") else {})
    try:
        with engine.connect() as conn:
            return MigrationContext.configure(conn).get_current_revision()
    finally:
        engine.dispose()


def _known(revision: str) -> bool:
    """The migrations folder holds ``revision``."""
    try:
        return ScriptDirectory.from_config(alembic_config("sqlite://")).get_revision(revision) is not None
    except Exception:  # alembic raises its own errors for an unknown or malformed id
        return False


def _existing_revision(url: str) -> str | None:
    """:func:`current`, and None for a SQLite file not created yet (its folder may not exist either)."""
    parsed = make_url(url)
    if parsed.get_backend_name() == "sqlite":
        path = parsed.database
        if not path or path == ":memory:" or not Path(path).exists():
            return None
    return current(url)


def ensure_schema(url: str, *, auto_upgrade: bool) -> None:
    """Upgrade the database (``auto_upgrade``) or check that it is at the code's revision."""
    at, want = _existing_revision(url), head()
    if at is not None and at != want and not _known(at):
        raise SchemaOutdated(
            f"the database schema is at revision {at}, which this driftwarden does not know (it needs"
            f" {want}): the database was upgraded by a newer driftwarden; run that version (a schema is never"
            " downgraded behind your back)"
        )
    if auto_upgrade:
        if at != want:
            upgrade(url)
        return
    if at != want:
        raise SchemaOutdated(
            f"the database schema is at revision {at or '(none)'}, this driftwarden needs {want}: "
            "run `driftwarden db upgrade` (or set DRIFTWARDEN_DATABASE_AUTO_UPGRADE=true)"
        )
