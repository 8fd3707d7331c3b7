"""When and from where a retraining job reads its window (issue 41, item 14), on both backends.

- A job an alert started reads its window when it starts, but while the window is short of the rows the
  gate needs (``retrain_min_rows``, twice ``retrain_holdout_min_rows``) it waits for the labelled rows
  still coming, bounded by ``retrain_wait_for_rows_s`` and saying so: the demo saw a job train on the 300
  rows logged when its alert fired, where 20,000 were on their way.
- A job reads its own window, never the folder a job of the same id left from another database (a checkout
  where the test suite, an earlier SQLite file or another PostgreSQL database ran jobs: the demo's job
  trained on 240 rows of another test's job 1 and the gate rejected it).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from pydantic import SecretStr

from core.config import Settings
from core.database import Database, open_database
from predictions.service import record_feedback
from tests.predictions.logdata import log_columns
from tests.support import CREDIT_FEATURES, TrainedModels, seed_registry
from training.cluster.datagen import TARGET, generate
from training.retraining import service
from training.retraining.models import JobState, TrainingJob
from training.retraining.worker import Worker


@pytest.fixture
def db(database_url: str, trained: TrainedModels) -> Iterator[Database]:
    """``credit:1`` serving (a real SavedModel, retrainable in local mode) on the backend, no traffic yet."""
    seed_registry(database_url, trained, serving=1)
    database = open_database(database_url)
    try:
        yield database
    finally:
        database.dispose()


def settings_for(db: Database, tmp_path: Path, **overrides: Any) -> Settings:
    values: dict[str, Any] = {
        "database_url": SecretStr(db.engine.url.render_as_string(hide_password=False)),
        "registry_path": tmp_path / "models",
        "checkpoint_path": tmp_path / "ckpt",
        "spool_path": tmp_path / "spool",
        "retrain_min_rows": 500,
        "retrain_holdout_min_rows": 1000,  # the window needs 2,000 labelled rows for a full holdout
        "retrain_epochs": 0.5,
        "job_lease_s": 30.0,
        "job_poll_interval_s": 0.05,
    }
    return Settings(**{**values, **overrides})


def log_labelled(db: Database, rows: int, *, seed: int) -> None:
    """``rows`` predictions of ``credit:1``, each with its label (as a client's feedback stores them)."""
    cols = generate(rows, seed=seed)
    ids = log_columns(db.engine, cols, features=CREDIT_FEATURES, model="credit", version=1)
    with db.session() as s:
        labels = [(pid, float(y)) for pid, y in zip(ids, cols[TARGET], strict=True)]
        assert record_feedback(session=s, model_name="credit", labels=labels)[0] == rows


def enqueue(db: Database, trigger: str) -> int:
    with db.session() as s:
        out = service.enqueue(
            session=s,
            model_name="credit",
            trigger=trigger,
            requested_by=f"{trigger}:test",
            params={"mode": "local"},
        )
    assert out.created and out.job_id is not None
    return out.job_id


def job_of(db: Database, job_id: int) -> TrainingJob:
    with db.session() as s:
        return service.get_job(session=s, job_id=job_id)


def run_in_thread(worker: Worker) -> threading.Thread:
    thread = threading.Thread(target=worker.run_once, name="test-worker", daemon=True)
    thread.start()
    return thread


def poll(what: str, ready: Callable[[], bool], *, timeout_s: float = 120.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not ready():
        assert time.monotonic() < deadline, f"waited {timeout_s:.0f}s for {what}"
        time.sleep(0.05)


def test_an_alerts_job_waits_for_the_labelled_rows_still_coming(db: Database, tmp_path: Path) -> None:
    log_labelled(db, 1000, seed=1)  # what was in when the alert fired
    job_id = enqueue(db, "alert")
    worker = Worker(db=db, settings=settings_for(db, tmp_path, retrain_wait_for_rows_s=120))
    thread = run_in_thread(worker)

    def waiting_or_done() -> bool:
        return (job_of(db, job_id).progress or {}).get("phase") == "waiting for labelled rows" or (
            not thread.is_alive()
        )

    poll("the job to wait for labelled rows (or to end)", waiting_or_done)
    job = job_of(db, job_id)
    assert job.progress["phase"] == "waiting for labelled rows", (job.state, job.log_tail)
    assert job.progress["labelled_rows"] == 1000 and job.progress["wanted_rows"] == 2000
    log_labelled(db, 1500, seed=2)  # the rest of the traffic the alert fired on, with its labels
    thread.join(300)
    assert not thread.is_alive()
    job = job_of(db, job_id)
    assert job.data_window is not None and job.data_window["labelled_rows"] == 2500, job.log_tail
    assert job.data_window["holdout_rows"] == 1000  # a full holdout for the gate
    assert "the window holds 1000 labelled predictions, fewer than the 2000 it needs" in job.log_tail
    assert "2000 labelled predictions or more after waiting" in job.log_tail
    assert job.state.final, job.log_tail


def test_an_alerts_job_waits_no_longer_than_its_bound(db: Database, tmp_path: Path) -> None:
    log_labelled(db, 1000, seed=1)
    job_id = enqueue(db, "alert")
    # 1,500 rows to train at all: after the wait the job fails, saying what it waited for
    settings = settings_for(db, tmp_path, retrain_wait_for_rows_s=1, retrain_min_rows=1500)
    Worker(db=db, settings=settings).run_once()
    job = job_of(db, job_id)
    assert job.state is JobState.FAILED and job.error is not None
    assert "has 1000 labelled predictions in the window" in job.error
    assert "(retrain_wait_for_rows_s), 1000 of 2000 labelled predictions" in job.error, job.error
    assert "waiting for more, at most 1s (retrain_wait_for_rows_s)" in job.log_tail


def test_a_job_a_person_asked_for_reads_at_once(db: Database, tmp_path: Path) -> None:
    log_labelled(db, 1000, seed=1)
    job_id = enqueue(db, "cli")
    settings = settings_for(db, tmp_path, retrain_wait_for_rows_s=3600, retrain_min_rows=1500)
    Worker(db=db, settings=settings).run_once()  # no wait: an hour's would fail the test by its timeout
    job = job_of(db, job_id)
    assert job.state is JobState.FAILED and job.error is not None
    assert "has 1000 labelled predictions in the window (the last 50000 labelled predictions)," in job.error
    assert "waiting" not in job.log_tail


def test_a_job_reads_its_own_window_not_a_folder_another_database_left(
    db: Database, tmp_path: Path, trained: TrainedModels
) -> None:
    # another database (an earlier SQLite file, the suite's) ran its job 1 with the same checkpoint folder
    other_url = f"sqlite:///{tmp_path / 'other.db'}"
    seed_registry(other_url, trained, serving=1)
    other = open_database(other_url)
    try:
        log_labelled(other, 600, seed=5)
        other_job = enqueue(other, "cli")
        Worker(db=other, settings=settings_for(other, tmp_path)).run_once()
        assert (job_of(other, other_job).data_window or {}).get("labelled_rows") == 600
    finally:
        other.dispose()

    log_labelled(db, 2500, seed=1)
    job_id = enqueue(db, "alert")
    assert job_id == other_job  # the same id in this database
    Worker(db=db, settings=settings_for(db, tmp_path)).run_once()
    job = job_of(db, job_id)
    assert job.data_window is not None and job.data_window["labelled_rows"] == 2500, job.log_tail
    assert "reusing the data of the previous attempt" not in job.log_tail
    assert job.state.final, job.log_tail
