"""Fixtures of the access tests: a migrated database on each backend (``database_url``)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from core.database import Database, open_database


@pytest.fixture
def db(database_url: str) -> Iterator[Database]:
    """The backend's database, upgraded to the newest migration, disposed of afterwards."""
    database = open_database(database_url, upgrade=True)
    try:
        yield database
    finally:
        database.dispose()
