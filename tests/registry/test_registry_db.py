"""Registry tables and state changes on SQLite and PostgreSQL, through the real migrations."""

from __future__ import annotations

from pathlib import Path

import pytest
from sqlalchemy.exc import IntegrityError

from core import migrate
from core.database import open_database
from core.errors import Conflict
from registry.models import VersionState
from registry.service import (
    list_versions,
    next_version,
    promote,
    register_version,
    reject,
    serving_version,
    set_label,
)


def test_migrations_upgrade_and_downgrade(database_url: str) -> None:
    migrate.upgrade(database_url)
    assert migrate.current(database_url) is not None
    migrate.downgrade(database_url, "base")
    assert migrate.current(database_url) is None
    migrate.upgrade(database_url)
    assert migrate.current(database_url) is not None


def test_versions_lifecycle(database_url: str, tmp_path: Path) -> None:
    db = open_database(database_url)
    try:
        with db.session() as s:
            assert next_version(session=s, registry=tmp_path, model_name="m") == 1
            for v in (1, 2):
                register_version(
                    session=s,
                    model_name="m",
                    version=v,
                    path=tmp_path / str(v),
                    metrics={"accuracy": 0.9},
                    lineage={"mode": "async"},
                )
            assert next_version(session=s, registry=tmp_path, model_name="m") == 3
        with db.session() as s:
            promote(session=s, model_name="m", version=1)
        with db.session() as s:
            promote(session=s, model_name="m", version=2)
            set_label(session=s, model_name="m", label="stable", version=1)
        with db.session() as s:
            states = {r.version: r.state for r in list_versions(session=s, model_name="m")}
            assert states == {1: VersionState.ARCHIVED, 2: VersionState.SERVING}
            current = serving_version(session=s, model_name="m")
            assert current is not None and current.version == 2
            rejected = reject(session=s, model_name="m", version=1, reason="accuracy 0.70 < current 0.91")
            assert rejected.state_reason == "accuracy 0.70 < current 0.91"
            with pytest.raises(Conflict, match="rejected"):
                promote(session=s, model_name="m", version=1)
        with pytest.raises(IntegrityError), db.session() as s:
            register_version(session=s, model_name="m", version=2, path=tmp_path, metrics={}, lineage={})
    finally:
        db.dispose()
