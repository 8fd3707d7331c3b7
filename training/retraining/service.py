"""Retraining job queue operations: the only code that touches ``training_jobs``.

Enqueueing is idempotent and race-safe: one active job (queued, running or validating) per model is a
partial unique index, so two processes enqueueing at once get the same job. Workers claim jobs with a
lease (``FOR UPDATE SKIP LOCKED`` on PostgreSQL; on SQLite one writer at a time, ``BEGIN IMMEDIATE``) and
keep it by heartbeats; every write of a worker is a compare-and-set on its lease, so a worker that lost
its job (taken over after its lease expired) can no longer change it. A job claimed more than
``max_attempts`` times (its workers died each time) fails instead of looping.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from pydantic import ValidationError
from sqlalchemy import and_, func, or_, select, update
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from core.database import begin_sqlite, utcnow
from core.errors import Conflict, Invalid, NotFound
from core.times import iso_or_none
from registry.names import check_name
from registry.service import latest_version, require_model, serving_version
from training.cluster.builders import require_retrainable
from training.retraining.models import ACTIVE_STATES, JobState, RetrainRequest, TrainingJob, Trigger

LOG_TAIL_LINES = 50
DEFAULT_MAX_ATTEMPTS = 4  # the worker passes settings.max_restarts + 1
MAX_LIST = 1000


@dataclass(frozen=True)
class Enqueued:
    """What :func:`enqueue` did: the job (None when a cooldown refused one), whether it is new, and why."""

    job_id: int | None
    created: bool
    reason: str


def _write_lock(session: Session) -> None:
    """On SQLite, take the write lock before reading (``BEGIN IMMEDIATE``): writers queue instead of failing.

    A deferred SQLite transaction that read before another one committed cannot write any more ("database
    is locked"); taking the lock first serializes the read-then-write of enqueue, claim and the worker's
    updates. PostgreSQL needs nothing here (row locks and the unique indexes do the work).
    """
    begin_sqlite(session, immediate=True)


def check_params(params: Mapping[str, Any] | None) -> dict[str, Any]:
    """A job's parameters, checked (the retrain body's fields); :class:`Invalid` names the field and rule."""
    try:
        request = RetrainRequest.model_validate(dict(params or {}))
    except ValidationError as exc:
        parts = []
        for err in exc.errors():
            where = ".".join(str(x) for x in err.get("loc", ())) or "body"
            parts.append(f"{where}: {err.get('msg', 'invalid')}")
        raise Invalid("invalid retrain parameters: " + "; ".join(parts)) from None
    out = request.params()
    mode = out.get("mode")
    if "ps" in out and mode in ("sync", "local"):
        raise Invalid(f"ps applies to mode async only (mode {mode} has no parameter servers): drop ps")
    if "workers" in out and mode == "local":
        raise Invalid("workers does not apply to mode local (one process): drop workers")
    return out


def enqueue(
    *,
    session: Session,
    model_name: str,
    trigger: str,
    requested_by: str,
    idempotency_key: str | None = None,
    alert_id: int | None = None,
    params: Mapping[str, Any] | None = None,
    cooldown_s: float = 0.0,
) -> Enqueued:
    """Queue a retraining job of ``model_name``, or answer with the job that makes a new one unneeded.

    A model whose base version (serving, else the latest) cannot be retrained (imported without its builder
    function) raises :class:`core.errors.Conflict` naming the fix.
    """
    how = _checked_request(session=session, model_name=model_name, trigger=trigger, key=idempotency_key)
    checked = check_params(params)
    _write_lock(session)
    known = _known_answer(session=session, model_name=model_name, key=idempotency_key, cooldown_s=cooldown_s)
    if known is not None:
        return known
    job = TrainingJob(
        model_name=model_name,
        state=JobState.QUEUED,
        trigger=how,
        requested_by=requested_by[:128],
        idempotency_key=idempotency_key,
        alert_id=alert_id,
        params=checked,
        progress={},
        log_tail="",
        attempts=0,
        cancel_requested=False,
        created_at=utcnow(),
    )
    _append(job, [f"queued by {how.value} ({requested_by})"])
    try:
        with session.begin_nested():
            session.add(job)
            session.flush()
    except IntegrityError:
        # another process queued one at the same moment: answer with the winner
        return _winner(session=session, model_name=model_name, key=idempotency_key)
    return Enqueued(job.id, True, f"job {job.id} queued")


def _checked_request(*, session: Session, model_name: str, trigger: str, key: str | None) -> Trigger:
    """The request's trigger, once the model, its base version, the trigger and the key are checked."""
    require_model(session=session, model_name=model_name)
    base = serving_version(session=session, model_name=model_name) or latest_version(
        session=session, model_name=model_name
    )
    if base is not None:
        require_retrainable(base.lineage, model_name=model_name, version=base.version)
    try:
        how = Trigger(trigger)
    except ValueError:
        raise Invalid(f"trigger {trigger!r} is not one of {', '.join(t.value for t in Trigger)}") from None
    if key is not None and not (0 < len(key) <= 255):
        raise Invalid("the idempotency key must be 1 to 255 characters long")
    return how


def _known_answer(
    *, session: Session, model_name: str, key: str | None, cooldown_s: float
) -> Enqueued | None:
    """The answer when no job is needed: the job the key made, the active job, or the cooldown."""
    if key is not None:
        same = session.scalar(
            select(TrainingJob).where(
                TrainingJob.model_name == model_name, TrainingJob.idempotency_key == key
            )
        )
        if same is not None:
            return Enqueued(
                same.id, False, f"idempotency key {key!r} already made job {same.id} ({same.state})"
            )
    active = active_job(session=session, model_name=model_name)
    if active is not None:
        return Enqueued(
            active.id, False, f"job {active.id} of model {model_name!r} is {active.state} already"
        )
    if cooldown_s > 0:
        last = session.scalar(
            select(TrainingJob)
            .where(TrainingJob.model_name == model_name, TrainingJob.finished_at.is_not(None))
            .order_by(TrainingJob.finished_at.desc())
            .limit(1)
        )
        ended = last.finished_at if last is not None else None
        if last is not None and ended is not None:
            ago = (utcnow() - ended).total_seconds()
            if ago < cooldown_s:
                return Enqueued(
                    None,
                    False,
                    f"cooldown: job {last.id} ended {ago:.0f}s ago (retrain_cooldown_s={cooldown_s:g})",
                )
    return None


def _winner(*, session: Session, model_name: str, key: str | None) -> Enqueued:
    """The answer when another process queued a job of the model at the same moment: its job."""
    winner = active_job(session=session, model_name=model_name)
    if winner is None and key is not None:
        winner = session.scalar(
            select(TrainingJob).where(
                TrainingJob.model_name == model_name, TrainingJob.idempotency_key == key
            )
        )
    if winner is None:
        raise Conflict(
            f"another retrain of {model_name!r} was queued at the same time and has ended; retry"
        ) from None
    return Enqueued(winner.id, False, f"job {winner.id} of model {model_name!r} was queued at the same time")


def active_job(*, session: Session, model_name: str) -> TrainingJob | None:
    """The queued, running or validating job of a model, or None."""
    return session.scalar(
        select(TrainingJob).where(
            TrainingJob.model_name == model_name, TrainingJob.state.in_(list(ACTIVE_STATES))
        )
    )


def _expired(now: datetime) -> Any:
    return and_(
        TrainingJob.state.in_([JobState.RUNNING, JobState.VALIDATING]),
        or_(TrainingJob.lease_expires_at.is_(None), TrainingJob.lease_expires_at < now),
    )


def expire_stale(*, session: Session, max_attempts: int = DEFAULT_MAX_ATTEMPTS) -> list[int]:
    """End the jobs whose worker is gone and that must not run again; returns their ids.

    A job whose lease expired is ``cancelled`` when a cancel was requested, ``failed`` when it was claimed
    ``max_attempts`` times already (each of its workers died: running it again would loop).
    """
    _write_lock(session)
    now = utcnow()
    stale = list(
        session.scalars(
            select(TrainingJob)
            .where(
                _expired(now),
                or_(TrainingJob.cancel_requested.is_(True), TrainingJob.attempts >= max_attempts),
            )
            .with_for_update(skip_locked=True)
        )
    )
    for job in stale:
        if job.cancel_requested:
            _end(job, JobState.CANCELLED, now)
            _append(job, [f"cancelled (its worker {job.lease_owner} stopped heartbeating)"])
        else:
            _end(job, JobState.FAILED, now)
            job.error = (
                f"job {job.id} was started {job.attempts} times and its worker stopped each time (last: "
                f"{job.lease_owner}); it is not retried again (the limit is max_restarts+1={max_attempts}): "
                "look at the log tail and the workers' logs, then queue a new job"
            )
            _append(job, [job.error])
    session.flush()
    return [job.id for job in stale]


def claim(
    *, session: Session, worker_id: str, lease_s: float, max_attempts: int = DEFAULT_MAX_ATTEMPTS
) -> TrainingJob | None:
    """Take the oldest queued job, or a running one whose lease expired (a takeover); None when idle.

    PostgreSQL: ``SELECT ... FOR UPDATE SKIP LOCKED``, so workers never wait on each other; SQLite: one
    writer at a time. The update is a compare-and-set on the state and the attempts read (each claim counts
    one), so two workers never both run one job.
    """
    _write_lock(session)
    now = utcnow()
    candidates = session.scalars(  # one row: SKIP LOCKED hands each worker its own
        select(TrainingJob)
        .where(
            or_(
                and_(TrainingJob.state == JobState.QUEUED, TrainingJob.cancel_requested.is_(False)),
                and_(
                    _expired(now),
                    TrainingJob.cancel_requested.is_(False),
                    TrainingJob.attempts < max_attempts,
                ),
            )
        )
        .order_by(TrainingJob.created_at, TrainingJob.id)
        .limit(1)
        .with_for_update(skip_locked=True)
    ).all()
    for job in candidates:
        previous_owner, previous_state, attempts = job.lease_owner, job.state, job.attempts
        result = session.execute(
            update(TrainingJob)
            .where(
                TrainingJob.id == job.id,
                TrainingJob.state == previous_state,
                TrainingJob.attempts == attempts,
            )
            .values(
                state=JobState.RUNNING,
                lease_owner=worker_id,
                lease_expires_at=now + timedelta(seconds=lease_s),
                heartbeat_at=now,
                attempts=attempts + 1,
                started_at=job.started_at or now,
            )
            .execution_options(synchronize_session=False)
        )
        if result.rowcount != 1:  # type: ignore[attr-defined]
            continue
        session.refresh(job)
        if previous_state is JobState.QUEUED:
            _append(job, [f"claimed by worker {worker_id} (attempt {job.attempts})"])
        else:
            _append(
                job,
                [f"taken over from {previous_owner} by worker {worker_id} (attempt {job.attempts})"],
            )
        session.flush()
        return job
    return None


def _owned(job_id: int, worker_id: str) -> Any:
    return and_(
        TrainingJob.id == job_id,
        TrainingJob.lease_owner == worker_id,
        TrainingJob.state.in_([JobState.RUNNING, JobState.VALIDATING]),
    )


def _owned_job(session: Session, job_id: int, worker_id: str) -> TrainingJob | None:
    _write_lock(session)
    return session.scalar(select(TrainingJob).where(_owned(job_id, worker_id)).with_for_update())


def heartbeat(*, session: Session, job_id: int, worker_id: str, lease_s: float) -> bool:
    """Extend the worker's lease; False when it lost the job or a cancel was requested (stop the job)."""
    job = _owned_job(session, job_id, worker_id)
    if job is None:
        return False
    now = utcnow()
    job.lease_expires_at = now + timedelta(seconds=lease_s)
    job.heartbeat_at = now
    session.flush()
    return not job.cancel_requested


def update_progress(
    *, session: Session, job_id: int, worker_id: str, progress: Mapping[str, Any], lines: Iterable[str] = ()
) -> bool:
    """Store the job's progress (step, total_steps, loss, phase) and new log lines; False: not its job."""
    job = _owned_job(session, job_id, worker_id)
    if job is None:
        return False
    job.progress = {**(job.progress or {}), **dict(progress)}
    _append(job, lines)
    session.flush()
    return True


def append_log(*, session: Session, job_id: int, lines: Iterable[str]) -> None:
    """Add lines to the job's log tail (the last 50 lines are kept)."""
    job = get_job(session=session, job_id=job_id)
    _append(job, lines)
    session.flush()


def record(
    *,
    session: Session,
    job_id: int,
    worker_id: str,
    state: JobState | None = None,
    data_window: Mapping[str, Any] | None = None,
    parent_version: int | None = None,
    result_version: int | None = None,
    progress: Mapping[str, Any] | None = None,
    lines: Iterable[str] = (),
) -> bool:
    """Store what the running job learned (its window, parent, candidate, phase, validating); False: lost."""
    job = _owned_job(session, job_id, worker_id)
    if job is None:
        return False
    if state is not None:
        if state not in (JobState.RUNNING, JobState.VALIDATING):
            raise ValueError(f"record() moves a job to running or validating, not {state}: use finish()")
        job.state = state
    if data_window is not None:
        job.data_window = dict(data_window)
    if parent_version is not None:
        job.parent_version = parent_version
    if result_version is not None:
        job.result_version = result_version
    if progress is not None:
        job.progress = {**(job.progress or {}), **dict(progress)}
    _append(job, lines)
    session.flush()
    return True


def finish(
    *,
    session: Session,
    job_id: int,
    worker_id: str,
    state: JobState,
    error: str | None = None,
    gate: Mapping[str, Any] | None = None,
    result_version: int | None = None,
    lines: Iterable[str] = (),
) -> bool:
    """Move the worker's job to a final state; False when the worker no longer holds it."""
    if state.active:
        raise ValueError(f"finish() needs a final state, not {state}")
    job = _owned_job(session, job_id, worker_id)
    if job is None:
        return False
    _end(job, state, utcnow())
    job.progress = {**(job.progress or {}), "phase": "finished"}
    if error is not None:
        job.error = error
    if gate is not None:
        job.gate = dict(gate)
    if result_version is not None:
        job.result_version = result_version
    _append(job, [*lines, f"{state.value}" + (f": {error}" if error else "")])
    session.flush()
    return True


def release(*, session: Session, job_id: int, worker_id: str, why: str) -> bool:
    """Give a running job back (its worker stops cleanly): another worker takes it over at once.

    The lease ends now and the attempt is not counted (only workers that die count towards the limit).
    """
    job = _owned_job(session, job_id, worker_id)
    if job is None:
        return False
    job.lease_expires_at = utcnow()
    job.attempts = max(0, job.attempts - 1)
    _append(job, [f"released by worker {worker_id}: {why}"])
    session.flush()
    return True


def request_cancel(*, session: Session, job_id: int) -> TrainingJob:
    """Cancel a job: a queued one at once, a running one at its worker's next heartbeat; Conflict if ended."""
    _write_lock(session)
    job = session.scalar(select(TrainingJob).where(TrainingJob.id == job_id).with_for_update())
    if job is None:
        raise NotFound(f"no job {job_id}: `driftwarden jobs list` shows the jobs")
    if job.state.final:
        raise Conflict(
            f"job {job_id} has ended ({job.state.value}): only a queued or running job can be cancelled"
        )
    if job.state is JobState.QUEUED:
        _end(job, JobState.CANCELLED, utcnow())
        job.cancel_requested = True
        _append(job, ["cancelled before it started"])
    elif not job.cancel_requested:
        job.cancel_requested = True
        _append(job, ["cancel requested: the worker stops the job at its next heartbeat"])
    session.flush()
    return job


def get_job(*, session: Session, job_id: int) -> TrainingJob:
    """One job, or NotFound."""
    job = session.get(TrainingJob, job_id)
    if job is None:
        raise NotFound(f"no job {job_id}: `driftwarden jobs list` (or GET /v1/jobs) shows the jobs")
    return job


def list_jobs(
    *, session: Session, model_name: str | None = None, state: str | None = None, limit: int = 50
) -> list[TrainingJob]:
    """Jobs, newest first, optionally of one model and/or in one state."""
    if not 1 <= limit <= MAX_LIST:
        raise Invalid(f"limit must be between 1 and {MAX_LIST}, got {limit}")
    stmt = select(TrainingJob).order_by(TrainingJob.id.desc()).limit(limit)
    if model_name is not None:
        check_name(model_name, given_as="model")
        stmt = stmt.where(TrainingJob.model_name == model_name)
    if state is not None:
        try:
            wanted = JobState(state)
        except ValueError:
            raise Invalid(
                f"state {state!r} is not a job state (one of {', '.join(s.value for s in JobState)})"
            ) from None
        stmt = stmt.where(TrainingJob.state == wanted)
    return list(session.scalars(stmt))


def finished_since(*, session: Session, since: datetime) -> list[TrainingJob]:
    """Jobs that reached a final state at or after ``since``, oldest first."""
    return list(
        session.scalars(
            select(TrainingJob).where(TrainingJob.finished_at >= since).order_by(TrainingJob.finished_at)
        )
    )


def job_counts(*, session: Session, finished_since: datetime) -> dict[tuple[str, JobState], int]:
    """Jobs by model and state: every active job, and the final ones that ended at or after
    ``finished_since`` (one query)."""
    rows = session.execute(
        select(TrainingJob.model_name, TrainingJob.state, func.count())
        .where(or_(TrainingJob.state.in_(list(ACTIVE_STATES)), TrainingJob.finished_at >= finished_since))
        .group_by(TrainingJob.model_name, TrainingJob.state)
    ).all()
    return {(str(model), JobState(state)): int(n) for model, state, n in rows}


def running_since(*, session: Session) -> dict[str, datetime]:
    """When each model's running or validating job was first claimed, by model (UTC)."""
    rows = session.execute(
        select(TrainingJob.model_name, TrainingJob.started_at, TrainingJob.created_at).where(
            TrainingJob.state.in_([JobState.RUNNING, JobState.VALIDATING])
        )
    ).all()
    out: dict[str, datetime] = {}
    for model, started, created in rows:
        moment = started or created
        if moment is not None:
            out[str(model)] = moment
    return out


def last_finished(*, session: Session) -> dict[tuple[str, JobState], datetime]:
    """When each model's latest job in each final state ended, by model and state (UTC; one query)."""
    rows = session.execute(
        select(TrainingJob.model_name, TrainingJob.state, func.max(TrainingJob.finished_at))
        .where(TrainingJob.finished_at.is_not(None))
        .group_by(TrainingJob.model_name, TrainingJob.state)
    ).all()
    out: dict[tuple[str, JobState], datetime] = {}
    for model, state, ended in rows:
        if ended is not None:
            out[(str(model), JobState(state))] = ended
    return out


def job_document(job: TrainingJob) -> dict[str, Any]:
    """A job as the API and the CLI show it (ISO times, the log tail as lines, links)."""
    return {
        "id": job.id,
        "model_name": job.model_name,
        "state": job.state.value,
        "trigger": job.trigger.value,
        "requested_by": job.requested_by,
        "idempotency_key": job.idempotency_key,
        "alert_id": job.alert_id,
        "params": job.params or {},
        "progress": job.progress or {},
        "data_window": job.data_window,
        "parent_version": job.parent_version,
        "result_version": job.result_version,
        "gate": job.gate,
        "error": job.error,
        "attempts": job.attempts,
        "lease_owner": job.lease_owner,
        "lease_expires_at": iso_or_none(job.lease_expires_at),
        "heartbeat_at": iso_or_none(job.heartbeat_at),
        "cancel_requested": job.cancel_requested,
        "created_at": iso_or_none(job.created_at),
        "started_at": iso_or_none(job.started_at),
        "finished_at": iso_or_none(job.finished_at),
        "log_tail": job.log_tail.splitlines() if job.log_tail else [],
        "links": {
            "self": f"/v1/jobs/{job.id}",
            "cancel": f"/v1/jobs/{job.id}:cancel",
            "model": f"/v1/models/{job.model_name}/versions",
        },
    }


def _end(job: TrainingJob, state: JobState, now: datetime) -> None:
    job.state = state
    job.finished_at = now
    job.lease_expires_at = None


def _append(job: TrainingJob, lines: Iterable[str]) -> None:
    new = [line.rstrip() for text in lines for line in str(text).splitlines() if line.strip()]
    if not new:
        return
    stamp = datetime.now(UTC).strftime("%H:%M:%S")
    old = job.log_tail.splitlines() if job.log_tail else []
    job.log_tail = "\n".join([*old, *(f"{stamp} {line}" for line in new)][-LOG_TAIL_LINES:])
