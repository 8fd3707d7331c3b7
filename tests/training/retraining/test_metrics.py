"""Retraining job queue series: jobs seeded through the queue's service functions (enqueue, claim, record,
finish), a refresh, then a collect, on both backends; a scrape never reads the database."""

from __future__ import annotations

import time
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path

import pytest

from core.config import Settings
from core.database import Database, make_engine, make_session_factory, open_database, utcnow
from registry.service import promote, register_version
from tests.deploy.promql import assert_promtool_accepts, exposition, samples
from training.retraining import service
from training.retraining.metrics import FINAL_WINDOW, TrainingJobsCollector, families, read_snapshot
from training.retraining.models import JobState

STATES = (
    "queued",
    "running",
    "validating",
    "promoted",
    "passed",
    "undecided",
    "rejected",
    "failed",
    "cancelled",
)
FINAL = ("promoted", "passed", "undecided", "rejected", "failed", "cancelled")
WORKER = "test-worker"


@pytest.fixture
def db(database_url: str, tmp_path: Path) -> Iterator[Database]:
    """A migrated database on each backend: ``credit`` serves version 1, ``fraud`` has a staged version,
    ``churn`` serves and never gets a job."""
    database = open_database(database_url, upgrade=True)
    with database.session() as s:
        for name in ("credit", "fraud", "churn"):
            register_version(session=s, model_name=name, version=1, path=tmp_path, metrics={}, lineage={})
        promote(session=s, model_name="credit", version=1)
        promote(session=s, model_name="churn", version=1)
    try:
        yield database
    finally:
        database.dispose()


def _enqueue(db: Database, model: str) -> int:
    with db.session() as s:
        queued = service.enqueue(session=s, model_name=model, trigger="api", requested_by="test")
    assert queued.created and queued.job_id is not None
    return queued.job_id


def _claim(db: Database, job_id: int) -> None:
    with db.session() as s:
        job = service.claim(session=s, worker_id=WORKER, lease_s=60)
        assert job is not None and job.id == job_id


def _run_to(db: Database, model: str, state: JobState) -> int:
    """A job of ``model`` queued, claimed and ended in ``state``."""
    job_id = _enqueue(db, model)
    _claim(db, job_id)
    with db.session() as s:
        assert service.finish(session=s, job_id=job_id, worker_id=WORKER, state=state, error="boom")
    return job_id


def test_every_served_model_gets_every_state_at_zero_before_any_job(db: Database) -> None:
    collector = TrainingJobsCollector(db=db, settings=Settings())
    assert samples(collector) == {}  # before the first read: nothing, never the database
    collector.refresh()
    got = samples(collector)
    assert got["driftwarden_training_jobs"] == {
        (("model", m), ("state", st)): 0.0 for m in ("churn", "credit") for st in STATES
    }
    assert got["driftwarden_training_job_running_seconds"] == {
        (("model", "churn"),): 0.0,
        (("model", "credit"),): 0.0,
    }
    assert got["driftwarden_training_last_job_finished_timestamp_seconds"] == {
        (("model", m), ("state", st)): 0.0 for m in ("churn", "credit") for st in FINAL
    }


def test_jobs_by_state_running_age_and_latest_outcomes(db: Database) -> None:
    before = time.time()
    _run_to(db, "credit", JobState.PROMOTED)
    _run_to(db, "credit", JobState.REJECTED)
    _run_to(db, "credit", JobState.REJECTED)
    after_finished = time.time()
    running = _enqueue(db, "credit")
    _claim(db, running)
    with db.session() as s:  # the gate runs: still held by its worker
        assert service.record(session=s, job_id=running, worker_id=WORKER, state=JobState.VALIDATING)
    _enqueue(db, "fraud")  # a model without a serving version, with a job: it gets series too

    collector = TrainingJobsCollector(db=db, settings=Settings())
    collector.refresh()
    got = samples(collector)
    models = ("churn", "credit", "fraud")
    expected = {(("model", m), ("state", st)): 0.0 for m in models for st in STATES}
    expected |= {
        (("model", "credit"), ("state", "promoted")): 1.0,
        (("model", "credit"), ("state", "rejected")): 2.0,
        (("model", "credit"), ("state", "validating")): 1.0,
        (("model", "fraud"), ("state", "queued")): 1.0,
    }
    assert got["driftwarden_training_jobs"] == expected

    ages = got["driftwarden_training_job_running_seconds"]
    assert ages[(("model", "churn"),)] == 0.0 and ages[(("model", "fraud"),)] == 0.0
    assert 0.0 < ages[(("model", "credit"),)] <= time.time() - before + 1

    ended = got["driftwarden_training_last_job_finished_timestamp_seconds"]
    assert set(ended) == {(("model", m), ("state", st)) for m in models for st in FINAL}
    for state in ("promoted", "rejected"):
        assert before - 1 <= ended[(("model", "credit"), ("state", state))] <= after_finished + 1
    assert (
        ended[(("model", "credit"), ("state", "promoted"))]
        < ended[(("model", "credit"), ("state", "rejected"))]
    )
    assert {k: v for k, v in ended.items() if v != 0.0}.keys() == {
        (("model", "credit"), ("state", "promoted")),
        (("model", "credit"), ("state", "rejected")),
    }


def test_final_states_count_the_last_24_hours_and_ages_are_dated_at_the_scrape(db: Database) -> None:
    _run_to(db, "credit", JobState.FAILED)
    running = _enqueue(db, "credit")
    _claim(db, running)
    now = utcnow()
    fresh = read_snapshot(db=db, now=now)
    assert fresh.counts == {("credit", JobState.FAILED): 1, ("credit", JobState.RUNNING): 1}
    later = read_snapshot(db=db, now=now + FINAL_WINDOW + timedelta(minutes=1))
    assert later.counts == {("credit", JobState.RUNNING): 1}  # the failure left the window, the run did not
    assert later.last_finished == fresh.last_finished  # the latest outcome stays whatever its age
    started = fresh.running_since["credit"].timestamp()
    by_name = {f.name: f for f in families(fresh, now=started + 7200)}
    ages = {s.labels["model"]: s.value for s in by_name["driftwarden_training_job_running_seconds"].samples}
    assert ages == {"churn": 0.0, "credit": 7200.0}


def test_a_scrape_never_reads_the_database_and_keeps_the_last_values(db: Database, tmp_path: Path) -> None:
    _enqueue(db, "credit")
    collector = TrainingJobsCollector(db=db, settings=Settings())
    collector.refresh()
    before = samples(collector)
    assert before["driftwarden_training_jobs"][(("model", "credit"), ("state", "queued"))] == 1.0
    gone = make_engine(f"sqlite:///{tmp_path / 'missing' / 'x.db'}")
    collector.db = Database(url="gone", engine=gone, factory=make_session_factory(gone))
    collector.refresh()
    assert collector.refreshes == 2
    assert samples(collector)["driftwarden_training_jobs"] == before["driftwarden_training_jobs"]
    gone.dispose()


def test_the_exposition_passes_promtool_check_metrics(db: Database) -> None:
    _run_to(db, "credit", JobState.CANCELLED)
    collector = TrainingJobsCollector(db=db, settings=Settings())
    collector.refresh()
    text = exposition(collector)
    assert 'driftwarden_training_jobs{model="credit",state="cancelled"} 1.0' in text
    assert_promtool_accepts(text)
