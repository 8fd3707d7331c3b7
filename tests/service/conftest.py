"""Serving fixtures: one real server per module and backend."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.support import Server, TrainedModels, seed_registry, serve_settings


@pytest.fixture(scope="module")
def server(
    module_db_url: str, trained: TrainedModels, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Server]:
    """One server per module and backend (durable log); serving version 1, label ``canary`` -> 2."""
    seed_registry(module_db_url, trained, serving=1, labels={"canary": 2})
    settings = serve_settings(module_db_url, tmp_path_factory.mktemp("spool"), log_durability="durable")
    with Server(settings) as srv:
        yield srv
