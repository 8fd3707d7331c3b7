"""In-process events: a lower layer announces what happened, a higher layer acts on it.

The monitors publish ``monitor.run`` after storing a run, the health monitor ``health.pass`` after each
pass of the checks, the training worker ``job.finished`` when a job ends; ``alerts`` subscribes (installed
once per process by ``service``). This keeps imports pointing downward: the publisher never knows who
listens. Every payload carries the ``db`` and ``settings`` it happened on, so one subscription serves every
app in a process (tests run several). A failing handler is logged and never fails the publisher: an alert
that cannot be evaluated must not lose a stored monitor run.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import Any

log = logging.getLogger("driftwarden.events")

Handler = Callable[..., None]

MONITOR_RUN = "monitor.run"  # db, settings, outcome (monitors.flows.Outcome)
HEALTH_PASS = "health.pass"  # db, settings, results (dict[str, core.health.CheckResult])
JOB_FINISHED = "job.finished"  # db, settings, job_id (int)

_handlers: dict[str, list[Handler]] = {}
_lock = threading.Lock()


def subscribe(event: str, handler: Handler) -> Callable[[], None]:
    """Call ``handler(**payload)`` on every ``publish(event, ...)``; returns the unsubscribe function.

    Subscribing the same handler twice has no effect (``install`` functions may run more than once).
    """
    with _lock:
        handlers = _handlers.setdefault(event, [])
        if handler not in handlers:
            handlers.append(handler)

    def unsubscribe() -> None:
        with _lock:
            if handler in _handlers.get(event, []):
                _handlers[event].remove(handler)

    return unsubscribe


def publish(event: str, **payload: Any) -> None:
    """Run every handler of ``event`` in this thread; a handler's error is logged, never raised."""
    with _lock:
        handlers = list(_handlers.get(event, ()))
    for handler in handlers:
        try:
            handler(**payload)
        except Exception:
            log.exception("handler %s of event %s failed", getattr(handler, "__qualname__", handler), event)


def subscribers(event: str) -> list[Handler]:
    """The handlers of ``event`` (for tests and diagnostics)."""
    with _lock:
        return list(_handlers.get(event, ()))
