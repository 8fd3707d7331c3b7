"""The app's lifespan: a component that fails to start stops every component started before it.

The real app (real database, a real model, the log writer, metric snapshots, the embedded retraining worker
and every periodic job); only one domain's start function is replaced by one that raises.
"""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path
from typing import Any

import pytest

from core.config import Settings
from predictions.spool import Spool, spool_dir
from service.serving import components
from service.serving.app import create_app
from tests.support import TrainedModels, seed_registry, serve_settings

STARTED_BEFORE_THE_FAILURE = {
    # the component that fails, and the tasks and threads of the components started before it
    "start_outbox_retention": (
        {
            "model manager refresh",
            "health checks",
            "health alerts",
            "database metrics",
            "prediction retention",
            "monitor pass",
            "webhook sender",
        },
        {"driftwarden-log-writer", "driftwarden-metrics-snapshot", "training-worker"},
    ),
    "start_observability": (
        {"model manager refresh"},
        {"driftwarden-log-writer", "driftwarden-metrics-snapshot"},
    ),
}


@pytest.mark.parametrize("failing", sorted(STARTED_BEFORE_THE_FAILURE))
def test_a_component_failing_at_start_stops_the_components_already_started(
    failing: str, trained: TrainedModels, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    url = f"sqlite:///{tmp_path / 'serve.db'}"
    seed_registry(url, trained, serving=1)
    settings: Settings = serve_settings(
        url,
        tmp_path / "spool",
        metrics_dir=tmp_path / "metrics",
        retention_interval_s=3600,
        worker_embedded=True,
    )
    want_tasks, want_threads = STARTED_BEFORE_THE_FAILURE[failing]
    seen: dict[str, Any] = {}

    def fail(*_: object, **__: object) -> None:
        seen["tasks"] = {t.get_name(): t for t in asyncio.all_tasks() if not t.done()}
        seen["threads"] = {t.name: t for t in threading.enumerate() if t.is_alive()}
        raise RuntimeError(f"{failing} failed (injected)")

    monkeypatch.setattr(components, failing, fail)
    threads_before = set(threading.enumerate())
    app = create_app(settings)

    async def run() -> list[str]:
        with pytest.raises(RuntimeError, match="injected"):
            async with app.router.lifespan_context(app):
                pytest.fail("the lifespan started although a component failed")
        started = [t for name, t in seen["tasks"].items() if name in want_tasks]
        await asyncio.wait(started, timeout=10)
        return sorted(t.get_name() for t in started if not t.cancelled())

    running = asyncio.run(run())
    assert want_tasks <= set(seen["tasks"]), f"not started before {failing}: {set(seen['tasks'])}"
    assert want_threads <= set(seen["threads"]), f"threads missing at the failure: {set(seen['threads'])}"
    assert running == [], "periodic jobs left running after the failed start"
    left = [t.name for t in threading.enumerate() if t not in threads_before and t.is_alive()]
    assert left == [], f"threads of the started components still run: {left}"
    # the log writer gave its spool slot back: the next process claims the first slot again
    folder = spool_dir(settings.spool_path, url)
    spool = Spool.claim(folder)
    try:
        assert spool.directory == folder
    finally:
        spool.close()
