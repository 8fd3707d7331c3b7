"""Opening the database checks its schema: SQLite upgrades itself, a server database needs `db upgrade`."""

from __future__ import annotations

from pathlib import Path

import pytest
from sqlalchemy import create_engine, inspect, text

from core import migrate
from core.config import Settings
from core.database import open_database
from tests.support import postgres_schema


def test_sqlite_upgrades_itself_on_first_use(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'fresh.db'}"
    db = open_database(url)
    try:
        assert migrate.current(url) == migrate.head()
        assert "model_versions" in inspect(db.engine).get_table_names()
    finally:
        db.dispose()


@pytest.mark.postgres
def test_an_old_postgres_schema_stops_with_the_command_that_fixes_it(postgres_url: str) -> None:
    with postgres_schema(postgres_url, migrated=False) as url:
        with pytest.raises(migrate.SchemaOutdated, match=r"run `driftwarden db upgrade`"):
            open_database(url, settings=Settings(database_url=url))
        assert migrate.current(url) is None, "opening must not migrate as a side effect"
        migrate.upgrade(url, "0002_prediction_log")
        with pytest.raises(migrate.SchemaOutdated, match="at revision 0002_prediction_log"):
            open_database(url, settings=Settings(database_url=url))
        db = open_database(url, settings=Settings(database_url=url, database_auto_upgrade=True))
        db.dispose()
        assert migrate.current(url) == migrate.head()
        open_database(url, settings=Settings(database_url=url)).dispose()  # current now: opens


@pytest.mark.postgres
def test_a_schema_newer_than_the_code_names_the_newer_version(postgres_url: str) -> None:
    with postgres_schema(postgres_url) as url:
        engine = create_engine(url)
        with engine.begin() as conn:
            conn.execute(text("UPDATE alembic_version SET version_num = '0099_from_the_future'"))
        engine.dispose()
        for auto in (False, True):
            with pytest.raises(migrate.SchemaOutdated, match="upgraded by a newer driftwarden") as err:
                open_database(url, settings=Settings(database_url=url, database_auto_upgrade=auto))
            assert "db upgrade" not in str(err.value)
        assert migrate.current(url) == "0099_from_the_future", "never touched"
