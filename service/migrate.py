"""Apply the alembic migrations in ``migrations/`` to a database (``driftwarden db upgrade``)."""

from __future__ import annotations

from pathlib import Path

from alembic import command
from alembic.config import Config

import migrations


def alembic_config(url: str) -> Config:
    """An alembic config for ``url`` that needs no ini file."""
    cfg = Config()
    cfg.set_main_option("script_location", str(Path(migrations.__file__).parent))
    cfg.set_main_option("sqlalchemy.url", url.replace("%", "%%"))
    return cfg


def upgrade(url: str, revision: str = "head") -> None:
    """Bring the database at ``url`` up to ``revision``."""
    command.upgrade(alembic_config(url), revision)


def downgrade(url: str, revision: str) -> None:
    """Take the database at ``url`` down to ``revision``."""
    command.downgrade(alembic_config(url), revision)


def current(url: str) -> str | None:
    """The revision the database is at (None when never migrated)."""
    from alembic.runtime.migration import MigrationContext

    from service.database import make_engine

    engine = make_engine(url)
    try:
        with engine.connect() as conn:
            return MigrationContext.configure(conn).get_current_revision()
    finally:
        engine.dispose()
