"""The retraining worker inside the API process (``worker_embedded``), started from the app's lifespan."""

from __future__ import annotations

import logging

from core.config import Settings
from core.database import is_sqlite
from core.runtime import Runtime
from core.scheduling import is_leader
from training.retraining.worker import Worker

log = logging.getLogger("driftwarden.training.worker")


def embedded_worker_wanted(settings: Settings) -> bool:
    """``worker_embedded`` when set; unset: yes on SQLite (one machine), no on PostgreSQL."""
    if settings.worker_embedded is not None:
        return settings.worker_embedded
    return is_sqlite(settings.database_url.get_secret_value())


def start_in_app(runtime: Runtime) -> Worker | None:
    """Start a worker thread in this API process; None when not wanted (or another worker process of
    ``serve --workers N`` holds the periodic-jobs lock: one embedded worker per server). Stop it with
    ``worker.stop(timeout)`` at shutdown: its running job is given back to the queue."""
    if not embedded_worker_wanted(runtime.settings):
        return None
    lock = runtime.leader_lock
    if lock is not None and not is_leader(lock):
        return None
    worker = Worker(db=runtime.db, settings=runtime.settings)
    worker.start()
    log.info("retraining worker %s started in the API process", worker.worker_id)
    return worker
