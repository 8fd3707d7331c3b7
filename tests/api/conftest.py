"""The Python API's fixtures: one real server (uvicorn, SQLite) serving the session's trained ``credit``,
shared by the Client tests and the notebook; small credit frames for the comparisons."""

from __future__ import annotations

from collections.abc import Iterator

import pandas as pd
import pytest

from tests.support import Server, TrainedModels, seed_registry, serve_settings
from training.cluster.datagen import generate

MIN_ROWS = 50  # the server's monitor_min_rows: a run needs this many logged predictions


@pytest.fixture(scope="session")
def api_server(trained: TrainedModels, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    """Serving version 1 of ``credit``; no periodic monitor runs and no embedded retraining worker (a
    queued job stays queued), so each run is one a test asked for."""
    root = tmp_path_factory.mktemp("api-server")
    url = f"sqlite:///{root / 'api.db'}"
    seed_registry(url, trained, serving=1)
    settings = serve_settings(
        url, root / "spool", monitor_enabled=False, monitor_min_rows=MIN_ROWS, worker_embedded=False
    )
    with Server(settings) as srv:
        yield srv


@pytest.fixture(scope="session")
def reference_frame() -> pd.DataFrame:
    return pd.DataFrame(generate(3_000, seed=1))


@pytest.fixture(scope="session")
def shifted_frame() -> pd.DataFrame:
    """Lower incomes, older applicants, lower credit scores (training.cluster.datagen's covariate shift)."""
    return pd.DataFrame(generate(1_500, seed=2, scenario="covariate_shift"))
