"""``DRIFTWARDEN_MONITOR_READ_DATABASE_URL``: windows come from the read replica, runs go to the primary.

A real replica cannot run here; a second database with a different log stands in for it, so the test can
tell which one each step used.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from pydantic import SecretStr

from core.config import get_settings
from core.database import open_database
from monitors.flows import run_monitor
from monitors.service import list_runs
from registry.schema import ModelSchema
from tests.monitors.logdata import log_columns, register_profile
from tests.support import postgres_schema
from training.cluster.datagen import generate


@contextmanager
def _second_database(primary: str, request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    if primary.startswith("sqlite"):
        yield f"sqlite:///{tmp_path / 'replica.db'}"
        return
    with postgres_schema(request.getfixturevalue("postgres_url")) as url:
        yield url


def test_windows_are_read_from_the_replica_and_runs_stored_on_the_primary(
    database_url: str,
    tmp_path: Path,
    request: pytest.FixtureRequest,
    profile_dict: dict[str, Any],
    schema: ModelSchema,
) -> None:
    features = list(schema.feature_names)
    with _second_database(database_url, request, tmp_path) as replica_url:
        settings = get_settings().model_copy(
            update={"monitor_min_rows": 10, "monitor_read_database_url": SecretStr(replica_url)}
        )
        primary, replica = open_database(database_url), open_database(replica_url)
        try:
            register_profile(primary, settings.registry_path, profile_dict, model="credit")
            log_columns(primary.engine, generate(500, seed=41), features=features)  # stable, on the primary
            log_columns(replica.engine, generate(400, scenario="covariate_shift", seed=42), features=features)
            outcome = run_monitor(db=primary, settings=settings, model_name="credit")
            assert outcome.window.rows == 400 and outcome.report.drifted  # the replica's rows
            with primary.session() as s:
                assert [r.id for r in list_runs(session=s, model_name="credit")] == [outcome.run_id]
            with replica.session() as s:
                assert list_runs(session=s, model_name="credit") == []
            # without the setting, the same call reads the primary's stable window
            plain = run_monitor(
                db=primary,
                settings=settings.model_copy(update={"monitor_read_database_url": None}),
                model_name="credit",
            )
            assert plain.window.rows == 500 and not plain.report.drifted
        finally:
            primary.dispose()
            replica.dispose()


def test_config_masks_the_replica_password() -> None:
    settings = get_settings().model_copy(
        update={"monitor_read_database_url": SecretStr("postgresql+psycopg://reader:s3cret@replica:5432/dw")}
    )
    assert settings.masked()["monitor_read_database_url"] == "postgresql+psycopg://reader:***@replica:5432/dw"
