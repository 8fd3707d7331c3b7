"""The retraining worker: claims queued jobs and runs them, one at a time, holding a lease by heartbeats.

Any number of workers may run against one database (``driftwarden worker`` on the training machines, or one
embedded in the API process): each job is claimed by exactly one (see
:func:`training.retraining.service.claim`). While a job runs, a heartbeat thread extends its lease every
``job_lease_s / 3``; when the heartbeat finds a cancel request (or that another worker took the job over) it
tells the job to stop, which it does at its next progress update (the launcher then stops every cluster
process). A worker that dies (SIGKILL, a lost machine) stops heartbeating: once its lease expires another
worker takes the job over, up to ``max_restarts + 1`` attempts in all; the cluster processes of the dead
worker die with it. A worker that is stopped cleanly gives its job back at once
(:func:`training.retraining.service.release`).

Every job that reaches a final state is announced with ``core.events.JOB_FINISHED`` (``db``,
``settings``, ``job_id``).
"""

from __future__ import annotations

import itertools
import logging
import os
import socket
import threading

from core.config import Settings
from core.database import Database
from core.events import JOB_FINISHED, publish
from training.retraining.job import JobControl, JobStopped, StopReason, run_job
from training.retraining.models import JobState
from training.retraining.service import claim, expire_stale, get_job, heartbeat, release

log = logging.getLogger("driftwarden.training.worker")

_numbers = itertools.count(1)


def new_worker_id() -> str:
    """``<hostname>:<pid>:<n>``: unique among the workers of one database."""
    return f"{socket.gethostname()}:{os.getpid()}:{next(_numbers)}"


class Worker:
    """Claims and runs retraining jobs against ``db``, one at a time."""

    def __init__(self, *, db: Database, settings: Settings, worker_id: str | None = None) -> None:
        self.db = db
        self.settings = settings
        self.worker_id = worker_id or new_worker_id()
        self.last_state: JobState | None = None  # the final state of the last job this worker ran
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._current: JobControl | None = None
        self._lock = threading.Lock()

    @property
    def lease_s(self) -> float:
        return self.settings.job_lease_s

    @property
    def max_attempts(self) -> int:
        return self.settings.max_restarts + 1

    def _announce(self, job_ids: list[int]) -> None:
        for job_id in job_ids:
            publish(JOB_FINISHED, db=self.db, settings=self.settings, job_id=job_id)

    def run_once(self) -> int | None:
        """Claim one job and run it to its end; returns its id (None: no job was waiting)."""
        with self.db.session() as session:
            ended = expire_stale(session=session, max_attempts=self.max_attempts)
        self._announce(ended)
        with self.db.session() as session:
            job = claim(
                session=session,
                worker_id=self.worker_id,
                lease_s=self.lease_s,
                max_attempts=self.max_attempts,
            )
            job_id = job.id if job is not None else None
        if job_id is None:
            return None
        log.info("worker %s: running job %d", self.worker_id, job_id)
        control = JobControl(db=self.db, settings=self.settings, job_id=job_id, worker_id=self.worker_id)
        with self._lock:
            self._current = control
            if self._stop.is_set():
                control.halt(StopReason.SHUTDOWN)
        beating = threading.Event()
        beat = threading.Thread(
            target=self._heartbeats, args=(control, beating), name=f"job-{job_id}-heartbeat", daemon=True
        )
        beat.start()
        try:
            self.last_state = run_job(control)
        except JobStopped as stop:
            self.last_state = None
            if stop.reason is StopReason.SHUTDOWN:
                with self.db.session() as session:
                    release(session=session, job_id=job_id, worker_id=self.worker_id, why=stop.reason.value)
                log.info("worker %s: job %d released (%s)", self.worker_id, job_id, stop.reason.value)
            else:
                log.warning("worker %s: job %d stopped: %s", self.worker_id, job_id, stop.reason.value)
            return job_id
        finally:
            beating.set()
            beat.join(timeout=10)
            with self._lock:
                self._current = None
        log.info("worker %s: job %d ended %s", self.worker_id, job_id, self.last_state)
        self._announce([job_id])
        return job_id

    def _heartbeats(self, control: JobControl, done: threading.Event) -> None:
        """Extend the lease every lease/3 until ``done``; stop the job on a cancel request or a lost lease."""
        interval = max(self.lease_s / 3.0, 0.05)
        while not done.wait(interval):
            try:
                with self.db.session() as session:
                    keep = heartbeat(
                        session=session, job_id=control.job_id, worker_id=self.worker_id, lease_s=self.lease_s
                    )
                if keep:
                    continue
                with self.db.session() as session:
                    job = get_job(session=session, job_id=control.job_id)
                    ours = job.lease_owner == self.worker_id and job.state.active
                    cancelled = job.cancel_requested
                if ours and cancelled:
                    control.halt(StopReason.CANCELLED)  # keep the lease while the job winds down
                    continue
                control.halt(StopReason.LEASE_LOST)
                return
            except Exception:  # the database may be down for a moment: the lease covers it
                log.warning("job %d: heartbeat failed", control.job_id, exc_info=True)

    def run_forever(self, stop: threading.Event) -> None:
        """Run jobs until ``stop`` is set; idle, look for jobs every ``job_poll_interval_s``."""
        while not stop.is_set():
            try:
                job_id = self.run_once()
            except Exception:
                log.exception("worker %s: a pass failed; retrying", self.worker_id)
                job_id = None
            if job_id is None:
                stop.wait(self.settings.job_poll_interval_s)

    def start(self) -> threading.Thread:
        """Run :meth:`run_forever` in a daemon thread (the worker embedded in the API process)."""
        if self._thread is not None and self._thread.is_alive():
            return self._thread
        self._stop.clear()
        self._thread = threading.Thread(
            target=self.run_forever, args=(self._stop,), name="training-worker", daemon=True
        )
        self._thread.start()
        return self._thread

    def interrupt(self) -> None:
        """Stop the running job (it is released for another worker) and the loop."""
        self._stop.set()
        with self._lock:
            if self._current is not None:
                self._current.halt(StopReason.SHUTDOWN)

    def stop(self, timeout: float = 30.0) -> bool:
        """Stop the loop and the running job (released for another worker); True when the thread ended."""
        self.interrupt()
        if self._thread is None:
            return True
        self._thread.join(timeout)
        return not self._thread.is_alive()
