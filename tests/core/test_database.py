"""Opening the database checks its schema: SQLite upgrades itself, a server database needs `db upgrade`."""

from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import SecretStr
from sqlalchemy import create_engine, inspect, text

from core import migrate
from core.config import Settings
from core.database import DatabaseUnavailable, make_engine, open_database, unavailable, unreachable
from core.network import free_port
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
            open_database(url, settings=Settings(database_url=SecretStr(url)))
        assert migrate.current(url) is None, "opening must not migrate as a side effect"
        migrate.upgrade(url, "0002_prediction_log")
        with pytest.raises(migrate.SchemaOutdated, match="at revision 0002_prediction_log"):
            open_database(url, settings=Settings(database_url=SecretStr(url)))
        db = open_database(url, settings=Settings(database_url=SecretStr(url), database_auto_upgrade=True))
        db.dispose()
        assert migrate.current(url) == migrate.head()
        open_database(url, settings=Settings(database_url=SecretStr(url))).dispose()  # current now: opens


@pytest.mark.postgres
def test_a_schema_newer_than_the_code_names_the_newer_version(postgres_url: str) -> None:
    with postgres_schema(postgres_url) as url:
        engine = create_engine(url)
        with engine.begin() as conn:
            conn.execute(text("UPDATE alembic_version SET version_num = '0099_from_the_future'"))
        engine.dispose()
        for auto in (False, True):
            with pytest.raises(migrate.SchemaOutdated, match="upgraded by a newer driftwarden") as err:
                open_database(url, settings=Settings(database_url=SecretStr(url), database_auto_upgrade=auto))
            assert "db upgrade" not in str(err.value)
        assert migrate.current(url) == "0099_from_the_future", "never touched"


def _raised(url: str, sql: str = "select 1") -> BaseException:
    engine = make_engine(url)
    try:
        with engine.connect() as conn:
            conn.execute(text(sql))
    except Exception as exc:
        return exc
    finally:
        engine.dispose()
    raise AssertionError(f"{sql!r} on {url} raised nothing")


def test_unreachable_is_only_a_database_that_cannot_be_reached(database_url: str, tmp_path: Path) -> None:
    """A connection refused (PostgreSQL) or a file that cannot be opened (SQLite) is an outage; a statement
    the database refuses (a missing table) is not, on either backend: a bug must stay a 500."""
    if database_url.startswith("sqlite"):
        (tmp_path / "a-folder").mkdir()  # a folder where the database's file should be: it cannot open
        outage = _raised(f"sqlite:///{tmp_path / 'a-folder'}")
    else:
        outage = _raised(f"postgresql+psycopg://postgres@127.0.0.1:{free_port()}/postgres")
    assert unreachable(outage)
    assert isinstance(unavailable(outage), DatabaseUnavailable)
    assert unavailable(outage).headers == {"Retry-After": "5"}  # type: ignore[union-attr]
    refused = _raised(database_url, "select * from no_such_table_here")
    assert not unreachable(refused) and unavailable(refused) is None
    assert not unreachable(RuntimeError("connection refused"))  # words alone are not an outage


def test_unreachable_reads_psycopgs_own_errors_by_their_sqlstate() -> None:
    """psycopg's errors escape some paths unwrapped (the writer's batch insert): an operational error of
    the connection (no SQLSTATE, class 08, the server shutting down) is an outage, a cancelled statement is
    not."""
    import psycopg

    assert unreachable(psycopg.OperationalError("connection failed: Connection refused"))
    assert unreachable(psycopg.errors.AdminShutdown("terminating connection"))
    assert unreachable(psycopg.errors.ConnectionFailure("lost"))
    assert unreachable(psycopg.InterfaceError("the connection is closed"))
    assert not unreachable(psycopg.errors.QueryCanceled("canceling statement due to statement timeout"))
    assert not unreachable(psycopg.errors.UntranslatableCharacter("unsupported Unicode escape sequence"))
    wrapped = RuntimeError("while replaying")
    wrapped.__cause__ = psycopg.errors.AdminShutdown("terminating connection")
    assert unreachable(wrapped)
