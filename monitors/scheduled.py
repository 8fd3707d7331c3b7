"""The drift scheduler: evaluate every serving model once per interval.

It runs inside the serving process by default (started from the app's lifespan, off with
``DRIFTWARDEN_MONITOR_ENABLED=false``) or as its own process (``driftwarden monitor``). A pass skips a
model whose newest run started less than an interval ago, so several replicas (or a server and a separate
``driftwarden monitor``) sharing one database do not repeat a model within an interval. That is a
check; a per-model lock across processes (``core.database.try_lock``: an advisory lock on PostgreSQL, a
file lock beside the SQLite file) also keeps two schedulers whose passes start at the same moment from
evaluating one model twice (the second skips it; the due check runs under the lock). Evaluations run in
a worker thread; a failing model is logged and never stops the loop.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial

from core.config import Settings
from core.database import Database, open_database, try_lock
from core.runtime import Runtime
from core.scheduling import every, pause_after
from monitors.config import load_config
from monitors.flows import (
    EmptyWindow,
    MonitorError,
    Outcome,
    interval_of,
    is_due,
    prune_sketches,
    run_monitor,
    serving_models,
)

log = logging.getLogger("driftwarden.monitors")


@dataclass(frozen=True)
class PassResult:
    """What one pass did for one model."""

    model_name: str
    outcome: Outcome | None = None
    skipped: str | None = None  # why not evaluated (not due, or the MonitorError message)
    failed: str | None = None  # an unexpected error
    too_few_rows: bool = False  # skipped because its window holds fewer than monitor_min_rows predictions

    def describe(self) -> str:
        if self.outcome is not None:
            o, r = self.outcome, self.outcome.report
            drifted = ", ".join(f.name for f in r.features if f.drifted) or "none"
            return (
                f"{o.model_name}:{o.model_version} run {o.run_id}: {o.window.rows} rows, "
                f"dataset {'DRIFTED' if r.drifted else 'stable'} "
                f"({r.dataset.n_drifted}/{r.dataset.n_features}; "
                f"drifted: {drifted})"
            )
        why = f"skipped: {self.skipped}" if self.skipped else f"failed: {self.failed}"
        return f"{self.model_name}: {why}"


def run_pass(
    *,
    db: Database,
    settings: Settings,
    force: bool = False,
    only: list[str] | None = None,
    flush: Callable[[], object] | None = None,
    log_results: bool = True,
) -> list[PassResult]:
    """Evaluate each serving model that is due (every one with ``force``); never raises for one model.

    ``log_results``: log one line per model (the caller that prints them itself, ``monitor --once``, not).
    """
    if flush is not None:
        flush()
    results: list[PassResult] = []
    if not only:  # the cached window sketches of models no longer served go (a pass over every model)
        try:
            prune_sketches(db=db, keep=serving_models(db=db))
        except Exception as exc:  # e.g. the database is down: the pass reports it per model below
            log.warning("pruning the window sketch cache failed: %s", exc)
    for name in serving_models(db=db, only=only or settings.serve_models or None):
        try:
            # one evaluation of a model at a time across every scheduler on this database (PostgreSQL)
            with try_lock(db, f"driftwarden:monitor:{name}") as held:
                if not held:
                    results.append(PassResult(name, skipped="another scheduler is evaluating it now"))
                    continue
                if not force and not is_due(
                    db=db, model_name=name, interval_s=_interval(settings=settings, model_name=name)
                ):
                    results.append(PassResult(name, skipped="evaluated less than an interval ago"))
                    continue
                outcome = run_monitor(db=db, settings=settings, model_name=name)
        except EmptyWindow as exc:
            results.append(PassResult(name, skipped=str(exc), too_few_rows=True))
        except MonitorError as exc:
            results.append(PassResult(name, skipped=str(exc)))
        except Exception as exc:  # one broken model must not stop the others
            log.exception("monitor of %s failed", name)
            results.append(PassResult(name, failed=f"{type(exc).__name__}: {exc}"))
        else:
            results.append(PassResult(name, outcome=outcome))
    for r in results if log_results else ():
        log.log(
            logging.WARNING if r.failed or (r.outcome and r.outcome.report.drifted) else logging.INFO,
            "monitor %s",
            r.describe(),
        )
    return results


def _interval(*, settings: Settings, model_name: str) -> float:
    """The model's interval between runs (the server's when its monitor.json is unreadable: runs say why)."""
    try:
        config = load_config(registry=settings.registry_path, model_name=model_name)
    except (OSError, ValueError):
        return settings.monitor_interval_s
    return interval_of(settings=settings, config=config)


def start_in_app(runtime: Runtime, *, initial_delay_s: float | None = None) -> asyncio.Task[None] | None:
    """Start the scheduler in the API process (from the app lifespan); None when switched off.

    A pass runs every ``monitor_interval_s`` (the first after ``initial_delay_s``, default one interval).
    """
    settings = runtime.settings
    if not settings.monitor_enabled:
        return None
    return every(
        settings.monitor_interval_s,
        partial(run_pass, db=runtime.db, settings=settings, flush=lambda: runtime.flush_predictions(5.0)),
        name="monitor pass",
        initial_delay_s=initial_delay_s,
        leader_lock=runtime.leader_lock,
    )


def run_process(*, settings: Settings, once: bool, only: list[str] | None = None) -> list[PassResult]:
    """``driftwarden monitor``: one forced pass (``once``), or passes every interval until interrupted."""
    db = open_database(settings.database_url.get_secret_value())
    try:
        if once:
            return run_pass(db=db, settings=settings, force=True, only=only, log_results=False)
        while True:
            started = time.monotonic()
            try:
                run_pass(db=db, settings=settings, only=only)
            except Exception as exc:  # e.g. the database is down: the daemon goes on, next interval
                log.warning("monitor pass failed: %s", exc)
            time.sleep(pause_after(started, interval_s=settings.monitor_interval_s, name="monitor pass"))
    finally:
        db.dispose()
