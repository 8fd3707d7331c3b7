"""A running job's control: why it stops (``StopReason``, ``JobStopped``), the handle a job runs with
(``JobControl``), its progress written to the job's row (``JobProgress``) and its log lines."""

from __future__ import annotations

import enum
import logging
import re
import threading
import time
from dataclasses import dataclass, field
from typing import Any

from core.config import Settings
from core.database import Database
from core.errors import Conflict
from training.cluster.progress import Progress
from training.cluster.sharding import parse_cluster_event
from training.retraining.service import record, update_progress

log = logging.getLogger("driftwarden.training.run_spec")


PROGRESS_FLUSH_S = 1.0  # the job row's progress is written at most this often
STEP_LINE_S = 10.0  # a "step N/M loss L" line goes into the log tail at most this often
CHECKPOINT = re.compile(r"^checkpoint step=(\d+)")


class StopReason(enum.StrEnum):
    CANCELLED = "cancelled"  # a cancel was requested (API, CLI)
    LEASE_LOST = "lease lost"  # another worker took the job over (this one missed its heartbeats)
    SHUTDOWN = "worker shutting down"  # the worker stops; the job is released for another worker


class JobStopped(Exception):
    """The job must stop now (raised in the job's thread at its next progress update or phase)."""

    def __init__(self, reason: StopReason) -> None:
        self.reason = reason
        super().__init__(f"job stopped: {reason.value}")


class NotEnoughData(Conflict):
    """The model's labelled predictions cannot make a retraining set; the message says how to get more."""


@dataclass
class JobControl:
    """What the job's thread and its worker's heartbeat thread share: the job, and a stop signal."""

    db: Database
    settings: Settings
    job_id: int
    worker_id: str
    stop: threading.Event = field(default_factory=threading.Event)
    reason: StopReason | None = None

    def halt(self, reason: StopReason) -> None:
        """Ask the job to stop (the first reason wins)."""
        if self.reason is None:
            self.reason = reason
        self.stop.set()

    def check(self) -> None:
        """Raise :class:`JobStopped` when the job was asked to stop."""
        if self.stop.is_set():
            raise JobStopped(self.reason or StopReason.CANCELLED)

    @property
    def actor(self) -> str:
        return f"job:{self.job_id}"


class JobProgress(Progress):
    """Training progress into the job row (step, loss, phase, log tail); stops the run when asked to."""

    def __init__(self, control: JobControl) -> None:
        super().__init__(f"job {control.job_id}", show_bar=False)
        self.control = control
        self.loss: float | None = None
        self.checkpoint: int | None = None
        self._owner = threading.get_ident()
        self._lines: list[str] = []
        self._lock = threading.Lock()
        self._flushed = 0.0
        self._step_line = 0.0
        self._logged_step = -1
        self.cluster: dict[str, Any] = {}  # each ps's bytes of variables, each worker's steps/s

    def start(self, total: int, initial: int) -> None:
        super().start(total, initial)
        self._note(f"training {total} steps" + (f", resuming at step {initial}" if initial else ""))
        self._sync(force=True)

    def update(self, step: int, *, loss: float | None, examples: int, rate: float | None = None) -> None:
        super().update(step, loss=loss, examples=examples, rate=rate)
        self.loss = loss
        self._sync()

    def event(self, message: str, *args: object) -> None:
        super().event(message, *args)
        text = message % args if args else message
        saved = CHECKPOINT.match(text)
        figures = parse_cluster_event(text)
        if saved:  # one per checkpoint: kept in the progress, not in the log tail
            self.checkpoint = int(saved.group(1))
        elif figures is not None:  # the cluster's figures: kept in the progress too
            self.cluster.update(figures)
        else:
            self._note(text)
        if threading.get_ident() == self._owner:  # the cluster supervisor thread reports events too
            self._sync()

    def close(self) -> None:
        super().close()
        self._write(phase="evaluating and registering")

    def _note(self, line: str) -> None:
        with self._lock:
            self._lines.append(line)

    def _sync(self, *, force: bool = False) -> None:
        self.control.check()
        now = time.monotonic()
        if not force and now - self._flushed < PROGRESS_FLUSH_S:
            return
        self._flushed = now
        if not self._write(phase="training"):
            self.control.halt(StopReason.LEASE_LOST)
            self.control.check()

    def _write(self, *, phase: str) -> bool:
        with self._lock:
            lines, self._lines = self._lines, []
        progress: dict[str, Any] = {"step": self.step, "total_steps": self.total, "loss": self.loss}
        if self.checkpoint is not None:
            progress["checkpoint_step"] = self.checkpoint
        if self.cluster:
            progress["cluster"] = dict(self.cluster)
        progress["phase"] = phase
        now = time.monotonic()
        due = self.step == self.total or now - self._step_line >= STEP_LINE_S
        if self.step and self.step != self._logged_step and due:
            self._step_line, self._logged_step = now, self.step
            loss = f"{self.loss:.4f}" if self.loss is not None else "-"
            lines.append(f"step {self.step}/{self.total} loss {loss}")
        c = self.control
        with c.db.session() as session:
            return update_progress(
                session=session, job_id=c.job_id, worker_id=c.worker_id, progress=progress, lines=lines
            )


def record_on_job(control: JobControl, **fields: Any) -> None:
    with control.db.session() as session:
        owned = record(session=session, job_id=control.job_id, worker_id=control.worker_id, **fields)
    if not owned:
        control.halt(StopReason.LEASE_LOST)
        control.check()
