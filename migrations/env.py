"""Alembic environment: the URL comes from the caller's config or from driftwarden's settings."""

from __future__ import annotations

import contextlib

from alembic import context

import service.registry.models  # noqa: F401  (register tables on the metadata)
from service.config import get_settings
from service.database import Base, make_engine

# Each domain that owns tables imports its models module here, so autogenerate sees them.
for module in ("service.predictions.models", "monitors.models"):
    with contextlib.suppress(ModuleNotFoundError):
        __import__(module)

config = context.config
target_metadata = Base.metadata


def _url() -> str:
    return config.get_main_option("sqlalchemy.url") or get_settings().database_url.get_secret_value()


def run_migrations_offline() -> None:
    context.configure(url=_url(), target_metadata=target_metadata, literal_binds=True, render_as_batch=True)
    with context.begin_transaction():
        context.run_migrations()


def run_migrations_online() -> None:
    connectable = config.attributes.get("connection")
    if connectable is not None:
        context.configure(connection=connectable, target_metadata=target_metadata, render_as_batch=True)
        with context.begin_transaction():
            context.run_migrations()
        return
    engine = make_engine(_url())
    with engine.connect() as connection:
        context.configure(connection=connection, target_metadata=target_metadata, render_as_batch=True)
        with context.begin_transaction():
            context.run_migrations()
    engine.dispose()


if context.is_offline_mode():
    run_migrations_offline()
else:
    run_migrations_online()
