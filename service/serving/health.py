"""The serving models' health checks (each served model loaded and answering a canary), and the composition
of every package's checks and of the series read from the database (drift, alerts and the webhook outbox,
the retraining job queue) into the app.

The canary is the version's warm-up row (:func:`service.serving.manager.warmup_columns`), run straight on
the loaded signature (not through the micro-batcher, so it never shows in the serving metrics); it must
answer every output of the contract with finite numbers.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from functools import partial

import numpy as np
from prometheus_client import ProcessCollector

from alerts.metrics import AlertsCollector
from core.events import HEALTH_PASS, publish
from core.health import HealthCheck, HealthCollector, HealthMonitor, Status, core_checks
from core.scheduling import every
from monitors.metrics import DriftCollector
from monitors.spark.health import spark_checks
from predictions.health import log_check
from registry.health import registry_check
from service.serving.flows import AppState
from service.serving.manager import ModelManager, NotServed, warmup_columns
from training.cluster.health import cluster_checks
from training.retraining.metrics import TrainingJobsCollector


def _canary(manager: ModelManager, name: str) -> Status:
    served = manager.models.get(name)
    if served is not None and served.serving is not None and served.serving in served.elsewhere:
        return Status(
            True, f"{name}:{served.serving} is served elsewhere (monitored only)", float(served.serving)
        )
    try:
        lv = manager.resolve(name)
    except NotServed as exc:
        failed = "; ".join(f"v{v}: {why}" for v, why in sorted(served.failed.items())) if served else ""
        return Status(False, f"{exc}" + (f" (load failures: {failed})" if failed else ""))
    out = lv.runner(warmup_columns(lv.schema))
    for o in lv.schema.outputs:
        values = np.asarray(out.get(o.name), dtype=np.float64) if o.name in out else None
        if values is None or values.size == 0:
            return Status(False, f"{name}:{lv.version} answered the canary row without output '{o.name}'")
        if not np.all(np.isfinite(values)):
            return Status(False, f"{name}:{lv.version} answered the canary row with non-finite '{o.name}'")
    return Status(True, f"{name}:{lv.version} loaded and answered the canary row", float(lv.version))


def model_checks(manager: ModelManager) -> list[HealthCheck]:
    """``model:<name>`` for every model the server serves or should (re-read on every run of the checks).

    A model with only staged versions (nothing promoted, nothing labelled, nothing loading or failed) is not
    served, so it has no check: a `driftwarden train` of a new model must not make every replica unready.
    """
    return [
        HealthCheck(f"model:{name}", partial(_canary, manager, name))
        for name, served in sorted(manager.models.items())
        if served.serving is not None or served.labels or served.loading or served.failed
    ]


@dataclass
class Observability:
    """The app's health monitor and its periodic job (``app.state.health``)."""

    monitor: HealthMonitor
    max_age_s: float
    task: asyncio.Task[None] | None = None
    drift: DriftCollector | None = None
    alerts: AlertsCollector | None = None
    jobs: TrainingJobsCollector | None = None
    metrics_task: asyncio.Task[None] | None = None  # refreshes the caches of the three collectors above
    announce_task: asyncio.Task[None] | None = None  # publishes each pass to the health alert rules

    def close(self) -> None:
        for task in (self.task, self.metrics_task, self.announce_task):
            if task is not None:
                task.cancel()


def start_observability(state: AppState) -> Observability:
    """Compose every package's health checks, export them and the series read from the database (drift,
    alerts and the webhook outbox, the job queue), start the periodic jobs.

    Called from the app's lifespan once the model manager has loaded; the first run of the checks starts
    at once, then one every ``health_interval_s``; the database series' caches are read at once, then every
    ``drift_metrics_cache_s``, one collector after the other in one job (scrapes only read the caches).
    """
    cfg, db = state.settings, state.db
    monitor = HealthMonitor(
        [
            partial(core_checks, settings=cfg, db=db),
            lambda: [registry_check(db=db, registry=cfg.registry_path, only=cfg.serve_models)],
            partial(model_checks, state.manager),
            partial(cluster_checks, cfg.cluster_spec),
            partial(log_check, state.writer),
            partial(spark_checks, cfg),
        ],
        timeout_s=cfg.health_timeout_s,
    )
    drift = DriftCollector(db=db, settings=cfg)
    alerts = AlertsCollector(db=db, settings=cfg)
    jobs = TrainingJobsCollector(db=db, settings=cfg)
    for collector in (HealthCollector(monitor), drift, alerts, jobs, ProcessCollector(registry=None)):
        state.metrics.register(collector)
    task = every(cfg.health_interval_s, monitor.run, name="health checks", initial_delay_s=0.0)

    def announce() -> None:  # the health alert rules act on the latest pass, in one worker of --workers N
        publish(
            HEALTH_PASS, db=db, settings=cfg, results=monitor.results(max_age_s=cfg.health_interval_s * 2)
        )

    announce_task = every(
        cfg.health_interval_s, announce, name="health alerts", leader_lock=state.leader_lock
    )

    # the database series are read here, never in a scrape (/metrics must not wait on the database); each
    # refresh keeps its collector's last values when the database cannot be read
    def refresh() -> None:
        for collector in (drift, alerts, jobs):
            collector.refresh()

    metrics_task = every(drift.refresh_interval_s(), refresh, name="database metrics", initial_delay_s=0.0)
    return Observability(
        monitor=monitor,
        max_age_s=max(cfg.health_interval_s, 1.0),
        task=task,
        drift=drift,
        alerts=alerts,
        jobs=jobs,
        metrics_task=metrics_task,
        announce_task=announce_task,
    )
