"""Fixtures for the training tests: a baseline data file and a workspace per test."""

from __future__ import annotations

import os
import signal
from collections.abc import Iterator
from pathlib import Path

import pytest

from core.tabular import write_table
from tests.training.helpers import Workspace, pid_alive
from training.datagen import generate


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
