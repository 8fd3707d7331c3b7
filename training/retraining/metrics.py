"""Retraining job queue series for Prometheus, read from ``training_jobs`` by a periodic job.

As with the drift series (:mod:`monitors.metrics`), the values come from the database, so every worker and
replica reports the same numbers: a periodic job reads them every ``drift_metrics_cache_s`` (half a second
at the least; three small queries) into a cache, and a scrape only reads that cache, so it never waits on
the database; when the database cannot be read the last values are kept. Ages are computed at the scrape
from the cached times, so they keep growing between two reads.

Series (``model`` is a registered model: the models with a serving version, and any model with a job):

- ``driftwarden_training_jobs{model,state}``: jobs by state. The active states (queued, running,
  validating) count every such job; the final states (promoted, passed, rejected, failed, cancelled) count
  the jobs that ended in the last 24 hours (:data:`FINAL_WINDOW`), so the gauge says "recently" and does
  not grow for ever.
- ``driftwarden_training_job_running_seconds{model}``: how long the model's running or validating job has
  run since a worker first claimed it (takeovers included); 0 when none runs.
- ``driftwarden_training_last_job_finished_timestamp_seconds{model,state}``: Unix time when the model's
  latest job in each final state ended; 0 when no job ever ended in that state.

Every model gets every state in each family (0 when there is none), so the series exist before the first
job and an expression over them never comes back empty.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from prometheus_client.core import GaugeMetricFamily, Metric

from core.cached_metrics import CachedCollector
from core.config import Settings
from core.database import Database, utcnow
from registry.service import serving_model_names
from training.retraining import service
from training.retraining.models import FINAL_STATES, JobState

log = logging.getLogger("driftwarden.training.metrics")

FINAL_WINDOW = timedelta(hours=24)  # final states count the jobs that ended this recently
STATES = tuple(JobState)  # every state, in lifecycle order
FINAL = tuple(s for s in JobState if s in FINAL_STATES)


@dataclass(frozen=True)
class JobSnapshot:
    """What the series need from ``training_jobs``, read in one session."""

    models: tuple[str, ...] = ()
    counts: dict[tuple[str, JobState], int] = field(default_factory=dict)
    running_since: dict[str, datetime] = field(default_factory=dict)
    last_finished: dict[tuple[str, JobState], datetime] = field(default_factory=dict)


def read_snapshot(*, db: Database, now: datetime | None = None) -> JobSnapshot:
    """The job counts, running jobs and latest outcomes of every model (the served ones at the least)."""
    now = now or utcnow()
    with db.session() as session:
        served = serving_model_names(session=session)
        counts = service.job_counts(session=session, finished_since=now - FINAL_WINDOW)
        running = service.running_since(session=session)
        last = service.last_finished(session=session)
    models = set(served) | {m for m, _ in counts} | set(running) | {m for m, _ in last}
    return JobSnapshot(tuple(sorted(models)), counts, running, last)


def families(snapshot: JobSnapshot, *, now: float) -> list[GaugeMetricFamily]:
    """The gauge families of a snapshot; ``now`` (Unix time) dates the running jobs' ages."""
    jobs = GaugeMetricFamily(
        "driftwarden_training_jobs",
        "Retraining jobs by state: active ones all, final ones that ended in the last 24 hours.",
        labels=["model", "state"],
    )
    running = GaugeMetricFamily(
        "driftwarden_training_job_running_seconds",
        "Seconds since a worker first claimed the model's running or validating job (0: none).",
        labels=["model"],
    )
    finished = GaugeMetricFamily(
        "driftwarden_training_last_job_finished_timestamp_seconds",
        "Unix time the model's latest job in this final state ended (0: never).",
        labels=["model", "state"],
    )
    for model in snapshot.models:
        for state in STATES:
            jobs.add_metric([model, state.value], float(snapshot.counts.get((model, state), 0)))
        started = snapshot.running_since.get(model)
        running.add_metric([model], max(0.0, now - started.timestamp()) if started is not None else 0.0)
        for state in FINAL:
            ended = snapshot.last_finished.get((model, state))
            finished.add_metric([model, state.value], ended.timestamp() if ended is not None else 0.0)
    return [jobs, running, finished]


class TrainingJobsCollector(CachedCollector[JobSnapshot]):
    """Yields the job queue gauges from a cache: :meth:`refresh` (a periodic job) reads the database,
    :meth:`collect` (a scrape) never does."""

    what = "job metrics"

    def __init__(self, *, db: Database, settings: Settings) -> None:
        super().__init__(settings=settings, empty=JobSnapshot())
        self.db = db

    def read(self) -> JobSnapshot:
        return read_snapshot(db=self.db)

    def families(self, snapshot: JobSnapshot, *, now: float) -> list[Metric]:
        return list(families(snapshot, now=now))
