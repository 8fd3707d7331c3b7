"""The retraining job queue on SQLite and PostgreSQL: enqueue rules, claims, leases, takeovers, cancel.

No training here: the jobs are rows; what runs them is tested in test_job*.py.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path

import pytest
import sqlalchemy as sa
from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext
from sqlalchemy.exc import IntegrityError

from core.database import Base, Database, aware, open_database, utcnow
from core.errors import Conflict, Invalid, NotFound
from registry.service import register_version
from tests.training.jobworkspace import read_job
from training.retraining import service
from training.retraining.models import JobState, TrainingJob

LEASE = 30.0


@pytest.fixture
def db(database_url: str, tmp_path: Path) -> Iterator[Database]:
    database = open_database(database_url, upgrade=True)
    with database.session() as s:
        for name in ("credit", "other", *(f"m{i}" for i in range(8))):
            register_version(
                session=s, model_name=name, version=1, path=tmp_path / name, metrics={}, lineage={}
            )
    yield database
    database.dispose()


def _enqueue(db: Database, model: str = "credit", **kwargs: object) -> service.Enqueued:
    with db.session() as s:
        return service.enqueue(
            session=s,
            model_name=model,
            trigger=str(kwargs.pop("trigger", "api")),
            requested_by="test",
            **kwargs,  # type: ignore[arg-type]
        )


def _claim(db: Database, worker: str, lease_s: float = LEASE, max_attempts: int = 4) -> TrainingJob | None:
    with db.session() as s:
        return service.claim(session=s, worker_id=worker, lease_s=lease_s, max_attempts=max_attempts)


def _finish(db: Database, job_id: int, worker: str, state: JobState = JobState.FAILED) -> bool:
    with db.session() as s:
        return service.finish(session=s, job_id=job_id, worker_id=worker, state=state, error="test")


def test_the_migration_creates_what_the_model_declares(database_url: str) -> None:
    db = open_database(database_url, upgrade=True)
    try:
        with db.engine.connect() as conn:
            diff = compare_metadata(MigrationContext.configure(conn), Base.metadata)
        mine = [d for d in diff if "training_jobs" in repr(d)]
        assert mine == []
        names = {ix["name"] for ix in sa.inspect(db.engine).get_indexes("training_jobs")}
        assert {"ix_training_jobs_state_created_at", "uq_training_jobs_one_active"} <= names
    finally:
        db.dispose()


def test_the_database_refuses_a_second_active_job_of_a_model(db: Database) -> None:
    first = _enqueue(db)
    assert first.created and first.job_id is not None
    with pytest.raises(IntegrityError), db.session() as s:  # the index, not the code, says no
        s.add(
            TrainingJob(
                model_name="credit",
                state=JobState.RUNNING,
                trigger="api",
                requested_by="x",
                params={},
                progress={},
                log_tail="",
                attempts=0,
                cancel_requested=False,
                created_at=utcnow(),
            )
        )
    assert _enqueue(db, "other").created  # another model: its own active job


def test_enqueue_answers_with_the_active_job_and_the_job_of_the_same_key(db: Database) -> None:
    a = _enqueue(db, idempotency_key="k-1", params={"epochs": 2, "reason": "drift"})
    assert a.created and a.reason == f"job {a.job_id} queued"
    again = _enqueue(db, idempotency_key="k-1")
    assert again == service.Enqueued(a.job_id, False, again.reason)
    assert "idempotency key 'k-1'" in again.reason and f"job {a.job_id}" in again.reason
    other_key = _enqueue(db, idempotency_key="k-2")
    assert (other_key.job_id, other_key.created) == (a.job_id, False)
    assert other_key.reason == f"job {a.job_id} of model 'credit' is queued already"
    job = read_job(db, a.job_id)  # type: ignore[arg-type]
    assert job.params == {"epochs": 2.0, "reason": "drift"} and job.trigger.value == "api"
    assert "queued by api (test)" in job.log_tail
    # once the job has ended, the same key still names it; a new key queues a new job
    assert _claim(db, "w1") is not None
    assert _finish(db, a.job_id, "w1")  # type: ignore[arg-type]
    assert _enqueue(db, idempotency_key="k-1").job_id == a.job_id
    fresh = _enqueue(db, idempotency_key="k-3")
    assert fresh.created and fresh.job_id != a.job_id


def test_enqueue_inside_a_callers_savepoint_after_its_reads(db: Database) -> None:
    """As the alert rules call it: in their own transaction, after reading, inside a savepoint."""
    with db.session() as s:
        assert service.list_jobs(session=s) == []  # a read first
        with s.begin_nested():
            first = service.enqueue(
                session=s, model_name="credit", trigger="alert", requested_by="rule", idempotency_key="a-1"
            )
        with pytest.raises(NotFound), s.begin_nested():  # a refusal undoes only its savepoint
            service.enqueue(session=s, model_name="ghost", trigger="alert", requested_by="rule")
        with s.begin_nested():
            again = service.enqueue(
                session=s, model_name="credit", trigger="alert", requested_by="rule", idempotency_key="a-1"
            )
    assert first.created and (again.job_id, again.created) == (first.job_id, False)
    assert [j.id for j in _list(db)] == [first.job_id]


def _list(db: Database) -> list[TrainingJob]:
    with db.session() as s:
        return service.list_jobs(session=s)


def test_enqueue_refuses_unknown_models_and_bad_parameters_before_writing(db: Database) -> None:
    with pytest.raises(NotFound, match="no model 'ghost' in the registry"):
        _enqueue(db, "ghost")
    with pytest.raises(Invalid, match="epochs: Input should be greater than 0"):
        _enqueue(db, params={"epochs": 0})
    with pytest.raises(Invalid, match="drill"):
        _enqueue(db, params={"drill": "fire"})
    with pytest.raises(Invalid, match="ps applies to mode async only"):
        _enqueue(db, params={"mode": "sync", "ps": 2})
    with pytest.raises(Invalid, match="workers does not apply to mode local"):
        _enqueue(db, params={"mode": "local", "workers": 2})
    with pytest.raises(Invalid, match="trigger 'cron' is not one of api, alert, alertmanager, cli"):
        _enqueue(db, trigger="cron")
    with db.session() as s:
        assert service.list_jobs(session=s) == []


def test_cooldown_refuses_a_job_soon_after_one_ended(db: Database) -> None:
    first = _enqueue(db)
    assert _claim(db, "w") is not None
    assert _finish(db, first.job_id, "w", JobState.REJECTED)  # type: ignore[arg-type]
    refused = _enqueue(db, trigger="alert", alert_id=7, cooldown_s=3600)
    assert refused.job_id is None and not refused.created
    assert refused.reason.startswith(f"cooldown: job {first.job_id} ended ")
    assert refused.reason.endswith("s ago (retrain_cooldown_s=3600)")
    assert _enqueue(db, "other", cooldown_s=3600).created  # another model has no recent job
    with db.session() as s:  # the job ended long ago: the cooldown is over
        s.execute(
            sa.update(TrainingJob)
            .where(TrainingJob.id == first.job_id)
            .values(finished_at=utcnow() - timedelta(hours=2))
        )
    later = _enqueue(db, trigger="alert", alert_id=7, cooldown_s=3600)
    assert later.created and read_job(db, later.job_id).alert_id == 7  # type: ignore[arg-type]


@pytest.mark.postgres
def test_twenty_enqueues_at_once_make_one_job(postgres_url: str, tmp_path: Path) -> None:
    from tests.support import postgres_schema

    with postgres_schema(postgres_url) as url:
        db = open_database(url)
        try:
            with db.session() as s:
                register_version(
                    session=s, model_name="credit", version=1, path=tmp_path, metrics={}, lineage={}
                )
            barrier = threading.Barrier(20)
            results: list[service.Enqueued] = []
            errors: list[BaseException] = []

            def one(i: int) -> None:
                try:
                    barrier.wait()
                    results.append(_enqueue(db, idempotency_key=f"key-{i}"))
                except BaseException as exc:  # noqa: BLE001 (reported below)
                    errors.append(exc)

            threads = [threading.Thread(target=one, args=(i,)) for i in range(20)]
            for t in threads:
                t.start()
            for t in threads:
                t.join(60)
            assert errors == []
            assert len(results) == 20
            assert sum(r.created for r in results) == 1
            assert len({r.job_id for r in results}) == 1
            with db.session() as s:
                assert len(service.list_jobs(session=s)) == 1
        finally:
            db.dispose()


def test_claim_takes_the_oldest_queued_job_and_holds_a_lease(db: Database) -> None:
    a, b = _enqueue(db, "m0"), _enqueue(db, "m1")
    job = _claim(db, "host:1:1")
    assert job is not None and job.id == a.job_id
    assert job.state is JobState.RUNNING and job.attempts == 1 and job.lease_owner == "host:1:1"
    expires = aware(job.lease_expires_at)
    assert expires is not None and expires > utcnow() + timedelta(seconds=LEASE - 5)
    nxt = _claim(db, "host:2:1")
    assert nxt is not None and nxt.id == b.job_id
    assert _claim(db, "host:3:1") is None  # nothing left, and running leases are alive


@pytest.mark.postgres
def test_two_workers_never_run_the_same_job(postgres_url: str, tmp_path: Path) -> None:
    from tests.support import postgres_schema

    with postgres_schema(postgres_url) as url:
        db = open_database(url)
        try:
            with db.session() as s:
                for i in range(12):
                    register_version(
                        session=s, model_name=f"m{i}", version=1, path=tmp_path, metrics={}, lineage={}
                    )
            queued = {int(_enqueue(db, f"m{i}").job_id or 0) for i in range(12)}
            claimed: dict[str, list[int]] = {"a": [], "b": []}
            barrier = threading.Barrier(2)

            def work(name: str) -> None:
                for _ in range(7):  # 12 jobs, two claims per round: both workers claim at the same moment
                    barrier.wait()
                    job = _claim(db, name)
                    if job is not None:
                        claimed[name].append(job.id)

            threads = [threading.Thread(target=work, args=(n,)) for n in claimed]
            for t in threads:
                t.start()
            for t in threads:
                t.join(60)
            every = claimed["a"] + claimed["b"]
            assert sorted(every) == sorted(queued)  # each job claimed once, none twice
            assert len(claimed["a"]) == len(claimed["b"]) == 6, claimed  # SKIP LOCKED: nobody waited
            with db.session() as s:
                owners = {j.id: j.lease_owner for j in service.list_jobs(session=s)}
            assert all(owners[i] == "a" for i in claimed["a"])
            assert all(owners[i] == "b" for i in claimed["b"])
        finally:
            db.dispose()


def test_an_expired_lease_is_taken_over_and_the_old_worker_loses_the_job(db: Database) -> None:
    a = _enqueue(db)
    assert a.job_id is not None
    first = _claim(db, "dead:1:1", lease_s=0.2)
    assert first is not None
    assert _claim(db, "live:2:1") is None  # the lease is still valid
    time.sleep(0.4)
    taken = _claim(db, "live:2:1")
    assert taken is not None and taken.id == a.job_id
    assert taken.attempts == 2 and taken.lease_owner == "live:2:1"
    assert "taken over from dead:1:1 by worker live:2:1 (attempt 2)" in taken.log_tail
    with db.session() as s:  # every write of the old worker is refused now
        assert not service.heartbeat(session=s, job_id=a.job_id, worker_id="dead:1:1", lease_s=LEASE)
        assert not service.update_progress(
            session=s, job_id=a.job_id, worker_id="dead:1:1", progress={"step": 1}
        )
    assert not _finish(db, a.job_id, "dead:1:1", JobState.PROMOTED)
    assert read_job(db, a.job_id).state is JobState.RUNNING
    with db.session() as s:
        assert service.heartbeat(session=s, job_id=a.job_id, worker_id="live:2:1", lease_s=LEASE)
        assert service.update_progress(
            session=s, job_id=a.job_id, worker_id="live:2:1", progress={"step": 5, "loss": 0.5}, lines=["x"]
        )
    assert read_job(db, a.job_id).progress == {"step": 5, "loss": 0.5}


def test_a_job_whose_workers_keep_dying_fails_instead_of_looping(db: Database) -> None:
    a = _enqueue(db)
    assert a.job_id is not None
    for attempt in (1, 2):
        job = _claim(db, f"w{attempt}", lease_s=0.05, max_attempts=2)
        assert job is not None and job.attempts == attempt
        time.sleep(0.1)
    assert _claim(db, "w3", max_attempts=2) is None  # over the limit: never claimed again
    with db.session() as s:
        ended = service.expire_stale(session=s, max_attempts=2)
    assert ended == [a.job_id]
    job = read_job(db, a.job_id)
    assert job.state is JobState.FAILED and job.finished_at is not None
    assert (
        job.error is not None and "started 2 times and its worker stopped each time (last: w2)" in job.error
    )
    assert "max_restarts+1=2" in job.error


def test_release_gives_the_job_back_at_once_without_counting_the_attempt(db: Database) -> None:
    a = _enqueue(db)
    assert a.job_id is not None and _claim(db, "w1") is not None
    with db.session() as s:
        assert service.release(session=s, job_id=a.job_id, worker_id="w1", why="worker shutting down")
    again = _claim(db, "w2")
    assert again is not None and again.id == a.job_id and again.attempts == 1
    assert "released by worker w1: worker shutting down" in again.log_tail


def test_cancel_queued_at_once_running_at_the_heartbeat_ended_never(db: Database) -> None:
    queued = _enqueue(db, "m0")
    running = _enqueue(db, "m1")
    assert queued.job_id is not None and running.job_id is not None
    with db.session() as s:
        job = service.request_cancel(session=s, job_id=queued.job_id)
        assert job.state is JobState.CANCELLED and job.finished_at is not None
    assert _enqueue(db, "m0").created  # a cancelled job is not active any more
    claimed = _claim(db, "w")
    assert claimed is not None and claimed.id == running.job_id
    with db.session() as s:
        job = service.request_cancel(session=s, job_id=running.job_id)
        assert job.state is JobState.RUNNING and job.cancel_requested
        assert not service.heartbeat(session=s, job_id=running.job_id, worker_id="w", lease_s=LEASE)
    assert _finish(db, running.job_id, "w", JobState.CANCELLED)
    with pytest.raises(Conflict, match=rf"job {running.job_id} has ended \(cancelled\)"), db.session() as s:
        service.request_cancel(session=s, job_id=running.job_id)
    with pytest.raises(NotFound, match="no job 999"), db.session() as s:
        service.request_cancel(session=s, job_id=999)


def test_a_cancelled_job_whose_worker_died_ends_cancelled(db: Database) -> None:
    a = _enqueue(db)
    assert a.job_id is not None and _claim(db, "gone", lease_s=0.05) is not None
    with db.session() as s:
        service.request_cancel(session=s, job_id=a.job_id)
    time.sleep(0.1)
    assert _claim(db, "w2") is None  # never run again
    with db.session() as s:
        assert service.expire_stale(session=s) == [a.job_id]
    assert read_job(db, a.job_id).state is JobState.CANCELLED


def test_list_and_document(db: Database) -> None:
    ids = [_enqueue(db, f"m{i}").job_id for i in range(3)]
    with db.session() as s:
        assert [j.id for j in service.list_jobs(session=s)] == ids[::-1]
        assert [j.id for j in service.list_jobs(session=s, model_name="m1")] == [ids[1]]
        assert [j.id for j in service.list_jobs(session=s, state="queued", limit=2)] == ids[:0:-1]
        assert service.list_jobs(session=s, state="running") == []
        with pytest.raises(Invalid, match="state 'done' is not a job state"):
            service.list_jobs(session=s, state="done")
        with pytest.raises(Invalid, match="limit must be between 1 and 1000"):
            service.list_jobs(session=s, limit=0)
        doc = service.job_document(service.get_job(session=s, job_id=ids[0]))  # type: ignore[arg-type]
    assert doc["id"] == ids[0] and doc["state"] == "queued" and doc["model_name"] == "m0"
    assert doc["links"]["self"] == f"/v1/jobs/{ids[0]}"
    assert doc["created_at"].endswith("+00:00") and doc["started_at"] is None
    assert doc["log_tail"][0].endswith("queued by api (test)")
    for key in ("progress", "data_window", "gate", "error", "attempts", "result_version", "parent_version"):
        assert key in doc
