"""Fixtures for the training tests: a baseline data file and a workspace per test."""

from __future__ import annotations

import os
import signal
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from pydantic import SecretStr

from core.config import Settings
from core.database import open_database
from core.events import JOB_FINISHED, subscribe
from core.tabular import write_table
from tests.support import TrainedModels, seed_registry
from tests.training.helpers import Workspace, pid_alive
from tests.training.retraindata import World
from training.cluster.datagen import generate


@pytest.fixture(scope="module")
def baseline_csv(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("data") / "baseline.csv"
    write_table(generate(20_000, seed=7), path)
    return path


@pytest.fixture
def workspace(tmp_path: Path, baseline_csv: Path) -> Iterator[Workspace]:
    ws = Workspace(root=tmp_path, data=baseline_csv)
    yield ws
    # whatever the test did, nothing it started may outlive it
    for pids in ws.pids().values():
        for pid in pids:
            if pid_alive(pid):
                os.kill(pid, signal.SIGKILL)


@pytest.fixture
def cli(database_url: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[Path]:
    """The CLI on ``database_url`` with a registry of its own (yields the registry's folder)."""
    from core.config import get_settings
    from core.database import open_database

    monkeypatch.setenv("DRIFTWARDEN_DATABASE_URL", database_url)
    monkeypatch.setenv("DRIFTWARDEN_REGISTRY_PATH", str(tmp_path / "registry"))
    get_settings.cache_clear()
    open_database(database_url, upgrade=True).dispose()
    yield tmp_path / "registry"
    get_settings.cache_clear()


@pytest.fixture
def world(tmp_path: Path, trained: TrainedModels) -> Iterator[World]:
    url = f"sqlite:///{tmp_path / 'jobs.db'}"
    seed_registry(url, trained, serving=1)
    settings = Settings(
        database_url=SecretStr(url),
        registry_path=tmp_path / "models",
        checkpoint_path=tmp_path / "ckpt",
        spool_path=tmp_path / "spool",
        retrain_min_rows=500,
        retrain_epochs=3.0,
        job_lease_s=6.0,
        job_poll_interval_s=0.1,
    )
    db = open_database(url, settings=settings)
    finished: list[int] = []

    def on_finished(**payload: Any) -> None:
        if payload["db"] is db:
            assert payload["settings"] is not None
            finished.append(payload["job_id"])

    unsubscribe = subscribe(JOB_FINISHED, on_finished)
    try:
        yield World(db=db, settings=settings, url=url, finished=finished)
    finally:
        unsubscribe()
        db.dispose()
