"""Alembic environment: the URL comes from the caller's config or from driftwarden's settings."""

from __future__ import annotations

from alembic import context

# Every domain that owns tables is imported here, so that autogenerate sees all of them.
import access.models  # noqa: F401
import alerts.models  # noqa: F401
import monitors.models  # noqa: F401
import predictions.models  # noqa: F401
import registry.models  # noqa: F401
import training.retraining.models  # noqa: F401
from core.config import get_settings
from core.database import Base, make_engine
from predictions.partitions import include_object

config = context.config
target_metadata = Base.metadata


def _url() -> str:
    return config.get_main_option("sqlalchemy.url") or get_settings().database_url.get_secret_value()


def run_migrations_offline() -> None:
    context.configure(
        url=_url(),
        target_metadata=target_metadata,
        literal_binds=True,
        render_as_batch=True,
        include_object=include_object,
    )
    with context.begin_transaction():
        context.run_migrations()


def run_migrations_online() -> None:
    connectable = config.attributes.get("connection")
    if connectable is not None:
        context.configure(
            connection=connectable,
            target_metadata=target_metadata,
            render_as_batch=True,
            include_object=include_object,
        )
        with context.begin_transaction():
            context.run_migrations()
        return
    engine = make_engine(_url())
    with engine.connect() as connection:
        context.configure(
            connection=connection,
            target_metadata=target_metadata,
            render_as_batch=True,
            include_object=include_object,
        )
        with context.begin_transaction():
            context.run_migrations()
    engine.dispose()


if context.is_offline_mode():
    run_migrations_offline()
else:
    run_migrations_online()
