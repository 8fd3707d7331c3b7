"""One retraining job from claim to final state: window -> data -> train -> validation gate -> outcome.

1. **Window**: the model's newest labelled predictions (prediction log joined with feedback,
   ``retrain_window_rows`` / ``retrain_window_minutes``), typed with the serving version's contract,
   read when the job starts (a job an alert started first waits, bounded, while the window is short:
   :func:`wait_for_rows`); fewer than ``retrain_min_rows`` refuses clearly. Split by time: the newest
   ``retrain_holdout_fraction`` (at least ``retrain_holdout_min_rows``, at most half) is the gate's
   holdout and is never trained on. Optionally the serving
   version's own training data is mixed in (``retrain_include_previous_data``). The drill
   ``shuffled_labels`` shuffles the training labels (the gate must reject the result). Both parts are
   written to the job's folder (``<checkpoint_path>/job-<id>-<created>/``), so a worker taking the job over
   trains on the same rows and resumes from the same checkpoints.
2. **Train**: :func:`training.flows.run_training` (mode, ps and workers from the job's params, else the
   serving version's lineage, else async with 1 ps and 2 workers) on the serving version's feature list
   and class order (the window and the mixed-in previous data hold no other column); the candidate is a
   staged version whose lineage names the parent version, the job, its trigger, its alert, its data window
   and its features.
3. **Gate** (:mod:`training.gate`) on the holdout, both versions scored through their SavedModels.
4. **Outcome**, in one transaction with the job's final state: ``promoted`` (registry promote, actor
   ``job:<id>``), ``passed`` (held: ``retrain_auto_promote`` is off), ``undecided`` (held: the holdout
   could not decide a check) or ``rejected`` (registry reject with the failed checks as the reason). An
   error ends the job ``failed``; a candidate of a failed or cancelled job is rejected. The serving
   version changes only by a promotion after a passed gate.

Cancellation and a lost lease stop the run at the next progress update (:class:`JobProgress` raises
:class:`JobStopped`; the launcher then stops every cluster process it started).
"""

from __future__ import annotations

import enum
import json
import logging
import re
import threading
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import numpy as np

from core.config import Settings
from core.database import Database, aware
from core.errors import Conflict, DomainError
from core.tabular import Columns, read_table, write_table
from predictions.service import count_labelled, labelled_rows
from registry.models import ModelVersion, VersionState
from registry.schema import FeatureKind, ModelSchema, Task, label_codes
from registry.service import (
    get_version,
    latest_version,
    promote,
    read_schema,
    read_signature,
    reject,
    serving_version,
)
from registry.signature import SourceSignature
from training.builders import lineage_ref, require_retrainable
from training.gate import GatePolicy, GateResult, Holdout, Verdict, evaluate
from training.models import JobState, Trigger
from training.progress import Progress
from training.run_spec import Mode, TrainingRunSpec, prepare
from training.service import finish, get_job, record, update_progress
from training.sharding import parse_cluster_event

log = logging.getLogger("driftwarden.training.run_spec")

PROGRESS_FLUSH_S = 1.0  # the job row's progress is written at most this often
STEP_LINE_S = 10.0  # a "step N/M loss L" line goes into the log tail at most this often
CHECKPOINT = re.compile(r"^checkpoint step=(\d+)")
SCORE_BATCH = 4096


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


@dataclass(frozen=True)
class Snapshot:
    """The job row's facts the flow needs (read once)."""

    id: int
    model_name: str
    trigger: str
    requested_by: str
    alert_id: int | None
    params: dict[str, Any]
    result_version: int | None
    created_at: datetime


@dataclass(frozen=True)
class Plan:
    """What the job trains from: the base version (serving, else the latest), its contract and settings."""

    model_name: str
    parent: int | None
    serving: int | None
    schema: ModelSchema
    base_lineage: dict[str, Any]
    mode: Mode
    ps: int
    workers: int
    epochs: float
    model_fn: str | None = None  # the parent's builder (its lineage's model_fn; None = the built-in MLP)

    @property
    def task(self) -> Task:
        return self.schema.kind


@dataclass(frozen=True)
class JobData:
    """The job's data files and the window they came from."""

    folder: Path
    train: Path
    holdout: Path
    window: dict[str, Any]


def job_folder(settings: Settings, job_id: int, created_at: datetime) -> Path:
    """``<checkpoint_path>/job-<id>-<created>/``: the job's training set, holdout and window.

    The job's creation time (UTC, to the microsecond) is part of the name: a job id alone is reused by
    another database (a fresh SQLite file, a PostgreSQL database set later, the test suite's) whose job of
    the same id would else take this folder's rows for its own as a takeover does, and train on them.
    """
    stamp = (aware(created_at) or created_at).astimezone(UTC).strftime("%Y%m%dT%H%M%S%fZ")
    return settings.checkpoint_path / f"job-{job_id}-{stamp}"


def run_job(control: JobControl) -> JobState:
    """Run the claimed job to its final state (stored with the outcome) and return that state.

    Raises :class:`JobStopped` when the job was taken over or the worker shuts down: then the job is not
    this worker's to end.
    """
    with control.db.session() as session:
        row = get_job(session=session, job_id=control.job_id)
        snap = Snapshot(
            id=row.id,
            model_name=row.model_name,
            trigger=row.trigger.value,
            requested_by=row.requested_by,
            alert_id=row.alert_id,
            params=dict(row.params or {}),
            result_version=row.result_version,
            created_at=row.created_at,
        )
    candidate: int | None = None
    try:
        plan = make_plan(control, snap)
        data = existing_data(control.settings, snap)
        if (
            snap.result_version is not None
            and data is not None
            and _staged(control, plan, snap.result_version)
        ):
            candidate = snap.result_version  # trained before a takeover: straight to the gate
            _record(control, lines=[f"candidate {plan.model_name}:{candidate} was trained already"])
        else:
            if data is None:
                _record(control, progress={"phase": "reading data"})
                data = read_data(control, snap, plan)
            else:
                _record(
                    control, lines=["reusing the data of the previous attempt (same rows, same checkpoints)"]
                )
            _record(control, data_window=data.window, parent_version=plan.parent)
            control.check()
            candidate = train(control, snap, plan, data)
        control.check()
        _record(
            control,
            state=JobState.VALIDATING,
            result_version=candidate,
            progress={"phase": "validating"},
            lines=[f"candidate {plan.model_name}:{candidate}: running the validation gate"],
        )
        result = validate(control, plan, candidate, data)
        control.check()
        return conclude(control, plan, candidate, result)
    except JobStopped as stop:
        if stop.reason is not StopReason.CANCELLED:
            raise
        _end_badly(control, snap, candidate, JobState.CANCELLED, None, "was cancelled")
        return JobState.CANCELLED
    except Exception as exc:
        if isinstance(exc, DomainError):
            message = str(exc)
            log.warning("job %d failed: %s", snap.id, message)
        else:
            message = f"{type(exc).__name__}: {exc}".strip()
            log.exception("job %d failed", snap.id)
        _end_badly(control, snap, candidate, JobState.FAILED, message, "failed")
        return JobState.FAILED


def _record(control: JobControl, **fields: Any) -> None:
    with control.db.session() as session:
        owned = record(session=session, job_id=control.job_id, worker_id=control.worker_id, **fields)
    if not owned:
        control.halt(StopReason.LEASE_LOST)
        control.check()


def _staged(control: JobControl, plan: Plan, version: int) -> bool:
    with control.db.session() as session:
        row = get_version(session=session, model_name=plan.model_name, version=version)
        return row is not None and row.state is VersionState.STAGED


def make_plan(control: JobControl, snap: Snapshot) -> Plan:
    """The base version (serving, else latest), its contract, how to train (params > lineage > default)."""
    with control.db.session() as session:
        serving = serving_version(session=session, model_name=snap.model_name)
        base: ModelVersion | None = serving or latest_version(session=session, model_name=snap.model_name)
    if base is None:
        raise Conflict(f"model {snap.model_name!r} has no registered version to retrain")
    lineage = dict(base.lineage or {})
    require_retrainable(lineage, model_name=snap.model_name, version=base.version)
    schema = read_schema(path=Path(base.path))
    params = snap.params
    shape = lineage.get("cluster")
    cluster: dict[str, Any] = shape if isinstance(shape, dict) else {}
    if "mode" in params:
        mode = Mode(params["mode"])
    elif lineage.get("mode") in {m.value for m in Mode}:
        mode = Mode(lineage["mode"])
    else:
        mode = Mode.ASYNC
    inherited = "mode" not in params and lineage.get("mode") == mode.value
    ps = int(params.get("ps") or (inherited and cluster.get("ps")) or 1)
    workers = int(params.get("workers") or (inherited and cluster.get("worker")) or 2)
    epochs = float(params.get("epochs") or control.settings.retrain_epochs)
    return Plan(
        model_name=snap.model_name,
        parent=base.version,
        serving=serving.version if serving is not None else None,
        schema=schema,
        base_lineage=lineage,
        mode=mode,
        ps=ps,
        workers=workers,
        epochs=epochs,
        model_fn=lineage_ref(lineage),
    )


def existing_data(settings: Settings, snap: Snapshot) -> JobData | None:
    """The data an earlier attempt of the job wrote, when complete."""
    folder = job_folder(settings, snap.id, snap.created_at)
    data = JobData(folder, folder / "train.parquet", folder / "holdout.parquet", {})
    meta = folder / "window.json"
    if not (data.train.exists() and data.holdout.exists() and meta.exists()):
        return None
    return JobData(data.folder, data.train, data.holdout, json.loads(meta.read_text()))


def _typed(spec_dtype: str, values: np.ndarray) -> np.ndarray:
    """A numeric column in its contract's dtype: int64 when the contract says so and none is missing."""
    if (
        spec_dtype == "int64"
        and values.size
        and not np.isnan(values).any()
        and np.all(values == np.round(values))
    ):
        return values.astype(np.int64)
    return values


def _concat(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Two parts of one column: text stays text, numbers become floats unless both are integers."""
    if a.dtype.kind == "O" or b.dtype.kind == "O":
        return np.concatenate([a.astype(object), b.astype(object)])
    if a.dtype.kind in "iu" and b.dtype.kind in "iu":
        return np.concatenate([a, b]).astype(np.int64)
    return np.concatenate([a.astype(np.float64), b.astype(np.float64)])


def _iso(moment: datetime) -> str:
    return aware(moment).isoformat()


def holdout_rows(*, labelled: int, fraction: float, min_rows: int) -> tuple[int, bool]:
    """The newest rows to hold out for the gate: ``fraction`` of the window, at least ``min_rows`` but
    never more than half of it; and whether that fell short of ``min_rows``."""
    wanted = max(int(round(labelled * fraction)), min_rows)
    n_hold = max(1, min(wanted, labelled // 2))
    return n_hold, n_hold < min_rows


WAITING_TRIGGERS = frozenset({Trigger.ALERT.value, Trigger.ALERTMANAGER.value})
QUIET_S = 30.0  # a waiting job stops waiting after this long without a new labelled prediction


def rows_wanted(settings: Settings) -> int:
    """The labelled rows a job's window needs: ``retrain_min_rows`` to train at all, and twice
    ``retrain_holdout_min_rows``, so that the gate's holdout (never more than half the window) is full;
    never more than the window holds (``retrain_window_rows``)."""
    return min(
        settings.retrain_window_rows, max(settings.retrain_min_rows, 2 * settings.retrain_holdout_min_rows)
    )


def _count(control: JobControl, snap: Snapshot, limit: int) -> int:
    minutes = control.settings.retrain_window_minutes
    since = datetime.now(UTC) - timedelta(minutes=minutes) if minutes else None
    with control.db.session() as session:
        return count_labelled(session=session, model_name=snap.model_name, limit=limit, since=since)


def wait_for_rows(control: JobControl, snap: Snapshot) -> str:
    """An alert's job whose window is short waits for more labelled rows, bounded; returns what it did.

    An alert fires on the traffic seen so far, which may be before the labelled rows it drifted on are all
    in (labels come later than predictions). So a job triggered by an alert (its own or Alertmanager's)
    whose window holds fewer than :func:`rows_wanted` re-counts it every ``job_poll_interval_s``, for at
    most ``retrain_data_wait_s`` and no longer than :data:`QUIET_S` without a new labelled row, saying so in
    its log, then reads its window (the caller does: the rows of that moment). Jobs asked for by a person
    (API, CLI) read at once: they train on what there is.
    """
    settings = control.settings
    limit = settings.retrain_wait_for_rows_s
    wanted = rows_wanted(settings)
    if snap.trigger not in WAITING_TRIGGERS or limit <= 0:
        return ""
    n = _count(control, snap, wanted)
    if n >= wanted:
        return ""
    start = changed = time.monotonic()
    quiet = min(QUIET_S, limit)
    _record(
        control,
        progress={"phase": "waiting for labelled rows", "labelled_rows": n, "wanted_rows": wanted},
        lines=[
            f"the window holds {n} labelled predictions, fewer than the {wanted} it needs "
            f"(retrain_min_rows={settings.retrain_min_rows}, twice "
            f"retrain_holdout_min_rows={settings.retrain_holdout_min_rows}): waiting for more, at most "
            f"{limit:g}s (retrain_wait_for_rows_s) and {quiet:g}s without a new one"
        ],
    )
    while True:
        if control.stop.wait(settings.job_poll_interval_s):
            control.check()
        now = time.monotonic()
        count = _count(control, snap, wanted)
        if count != n:
            n, changed = count, now
            _record(
                control,
                progress={"phase": "waiting for labelled rows", "labelled_rows": n, "wanted_rows": wanted},
            )
        if n >= wanted:
            why = f"{wanted} labelled predictions or more after waiting {now - start:.0f}s"
        elif now - start >= limit:
            why = f"waited {now - start:.0f}s (retrain_wait_for_rows_s), {n} of {wanted} labelled predictions"
        elif now - changed >= quiet:
            why = f"no new labelled prediction for {now - changed:.0f}s, {n} of {wanted}"
        else:
            continue
        _record(control, progress={"phase": "reading data"}, lines=[f"{why}: reading the window"])
        return f"; {why}"


def read_data(control: JobControl, snap: Snapshot, plan: Plan) -> JobData:
    """Read the window, split it by time, write the training set and the holdout into the job's folder."""
    settings = control.settings
    schema = plan.schema
    numeric = [f.name for f in schema.features if f.kind is FeatureKind.NUMERIC]
    categorical = [f.name for f in schema.features if f.kind is FeatureKind.CATEGORICAL]
    minutes = settings.retrain_window_minutes
    waited = wait_for_rows(control, snap)
    since = datetime.now(UTC) - timedelta(minutes=minutes) if minutes else None
    with control.db.session() as session:
        rows = labelled_rows(
            session=session,
            model_name=snap.model_name,
            numeric=numeric,
            categorical=categorical,
            limit=settings.retrain_window_rows,
            since=since,
        )
    n = int(rows.labels.size)
    where = f"the last {settings.retrain_window_rows} labelled predictions" + (
        f" of the last {minutes:g} minutes" if minutes else ""
    )
    if n < settings.retrain_min_rows:
        raise NotEnoughData(
            f"model {snap.model_name} has {n} labelled predictions in the window ({where}{waited}), fewer "
            f"than retrain_min_rows={settings.retrain_min_rows}: send feedback labels "
            f"(POST /v1/models/{snap.model_name}/feedback) or lower DRIFTWARDEN_RETRAIN_MIN_ROWS"
        )
    n_hold, short = holdout_rows(
        labelled=n, fraction=settings.retrain_holdout_fraction, min_rows=settings.retrain_holdout_min_rows
    )
    cut = n - n_hold
    labels = _labels(plan, rows.labels)
    train_y = labels[:cut].copy()
    if plan.task is Task.BINARY:
        present = sorted({int(v) for v in np.unique(train_y)})
        if present != [0, 1]:
            raise NotEnoughData(
                f"the {cut} labelled predictions of model {snap.model_name} to train on hold only label "
                f"{present[0]}: a model needs both classes; send feedback for predictions of both outcomes"
            )
    dtype = {f.name: f.dtype for f in schema.features}

    def part(lo: int, hi: int) -> Columns:
        out: Columns = {}
        for name in schema.feature_names:
            col = rows.columns[name][lo:hi]
            out[name] = _typed(dtype[name], col) if name in numeric else col
        return out

    train_cols = part(0, cut)
    holdout_cols = part(cut, n)
    drill = snap.params.get("drill")
    if drill == "shuffled_labels":
        np.random.default_rng(snap.id).shuffle(train_y)
    train_cols[schema.target] = train_y
    holdout_cols[schema.target] = labels[cut:]
    previous = _previous_data(control, plan) if settings.retrain_include_previous_data else None
    notes: list[str] = []
    previous_rows = 0
    if previous is not None:
        cols, source = previous
        previous_rows = len(cols[schema.target])
        train_cols = {name: _concat(cols[name], train_cols[name]) for name in train_cols}
        notes.append(f"mixed in {previous_rows} rows of the serving version's training data ({source})")
    elif settings.retrain_include_previous_data:
        notes.append(
            "retrain_include_previous_data is on but the serving version's data_source is not readable"
        )
    folder = job_folder(settings, snap.id, snap.created_at)
    folder.mkdir(parents=True, exist_ok=True)
    times = rows.logged_at
    window: dict[str, Any] = {
        "first_prediction_at": _iso(times[0]),
        "last_prediction_at": _iso(times[-1]),
        "holdout_from": _iso(times[cut]),
        "rows": rows.window_rows,
        "labelled_rows": n,
        "train_rows": cut + previous_rows,
        "holdout_rows": n_hold,
        "previous_data_rows": previous_rows,
        "limit": settings.retrain_window_rows,
        "since": since.isoformat() if since else None,
    }
    if drill:
        window["drill"] = drill
    data = JobData(folder, folder / "train.parquet", folder / "holdout.parquet", window)
    write_table(train_cols, data.train)
    write_table(holdout_cols, data.holdout)
    (folder / "window.json").write_text(json.dumps(window, indent=2))
    summary = (
        f"window: {n} labelled of {rows.window_rows} predictions from {window['first_prediction_at']} to "
        f"{window['last_prediction_at']}; training on {cut + previous_rows}, holding out the newest {n_hold}"
    )
    if short:
        notes.append(
            f"held out {n_hold} rows, fewer than "
            f"retrain_holdout_min_rows={settings.retrain_holdout_min_rows} (never more than half of the "
            f"{n} labelled rows): the gate's bounds may be too wide to decide; more labelled rows in the "
            "window would narrow them"
        )
    if drill:
        notes.append(
            f"fire drill {drill}: the training labels are shuffled; the gate must reject the candidate"
        )
    _record(control, lines=[summary, *notes])
    return data


def _labels(plan: Plan, values: np.ndarray) -> np.ndarray:
    """The feedback labels as the task's target column: 0/1 (binary), class names (multi-class: feedback
    labels are class indexes into the contract's classes), numbers (regression)."""
    if plan.task is Task.REGRESSION:
        return values.astype(np.float64)
    if plan.task is Task.MULTICLASS:
        classes = plan.schema.classes
        index = values.astype(np.int64)
        if values.size and (np.any(index < 0) or np.any(index >= len(classes)) or np.any(index != values)):
            raise NotEnoughData(
                f"the feedback labels of model {plan.model_name} must be class indexes 0..{len(classes) - 1} "
                f"(classes {list(classes)})"
            )
        return np.array(classes, dtype=object)[index]
    return values.astype(np.int64)


def _previous_data(control: JobControl, plan: Plan) -> tuple[Columns, str] | None:
    """The serving version's training data (its lineage's ``data_source``): features and target only."""
    source = plan.base_lineage.get("data_source")
    if not source or plan.serving is None:
        return None
    try:
        cols = read_table(source)
    except (ValueError, OSError) as exc:
        log.warning("job %d: previous data not readable: %s", control.job_id, exc)
        return None
    wanted = [*plan.schema.feature_names, plan.schema.target]
    if any(name not in cols for name in wanted):
        return None
    return {name: cols[name] for name in wanted}, str(source)


def train(control: JobControl, snap: Snapshot, plan: Plan, data: JobData) -> int:
    """Train the candidate on the job's training set; returns its (staged) version number."""
    from training.flows import metrics_line, run_training

    settings = control.settings
    base = plan.base_lineage
    job = TrainingRunSpec(
        model_name=plan.model_name,
        data=data.train,
        mode=plan.mode,
        ps=plan.ps,
        workers=plan.workers,
        epochs=plan.epochs,
        batch_size=int(base.get("batch_size") or 64),
        learning_rate=float(base.get("learning_rate") or 0.003),
        seed=snap.id,
        target=plan.schema.target,
        steps_per_closure=settings.steps_per_closure,
        checkpoint_every=settings.checkpoint_every_steps,
        parent_version=plan.parent,
        task=plan.task.short,
        model_fn=plan.model_fn,
        classes=plan.schema.classes,  # the serving version's class order, never the window's sorted labels
        features=tuple(plan.schema.feature_names),  # its features, in order: no other column of the data
    )
    shape = {Mode.ASYNC: f", {plan.ps} ps, {plan.workers} workers", Mode.SYNC: f", {plan.workers} workers"}
    builder = f", model function {plan.model_fn}" if plan.model_fn else ""
    _record(
        control,
        lines=[
            f"training {plan.model_name} ({plan.mode.value}{shape.get(plan.mode, '')}, "
            f"{plan.epochs:g} epochs{builder}) from version {plan.parent}"
        ],
    )
    prepared = prepare(job)
    progress = JobProgress(control)
    lineage = {
        "job_id": snap.id,
        "trigger": snap.trigger,
        "requested_by": snap.requested_by,
        "alert_id": snap.alert_id,
        "data_window": data.window,
    }
    try:
        result = run_training(
            job=job,
            db=control.db,
            registry=settings.registry_path,
            checkpoint_root=settings.checkpoint_path,
            progress=progress,
            prepared=prepared,
            lineage=lineage,
            settings=settings,
        )
    finally:
        progress.close()
    m = result.metrics
    _record(
        control,
        lines=[
            f"registered {plan.model_name}:{result.version.version} (staged) in {result.seconds:.1f}s: "
            f"{metrics_line(plan.task, m)}"
        ],
    )
    return result.version.version


def score_version(path: Path, schema: ModelSchema, columns: Columns) -> np.ndarray:
    """The version's output (``schema.output.name``) on the rows: ``[n]``, or ``[n, K]`` (multi-class)."""
    from registry.inputs import model_answers
    from registry.saved_model import load

    return model_answers(load(path), schema, columns, batch=SCORE_BATCH)


def validate(control: JobControl, plan: Plan, candidate: int, data: JobData) -> GateResult:
    """Score the holdout with the candidate and the version serving now, and run the gate."""
    with control.db.session() as session:
        row = get_version(session=session, model_name=plan.model_name, version=candidate)
        current = serving_version(session=session, model_name=plan.model_name)
    if row is None:
        raise Conflict(f"candidate {plan.model_name}:{candidate} is not in the registry any more")
    if current is not None and current.version != plan.serving:
        _record(
            control, lines=[f"version {current.version} serves now (not {plan.serving}): compared with it"]
        )
    cand_schema = read_schema(path=Path(row.path))
    columns = read_table(data.holdout)
    target = columns.pop(cand_schema.target)
    if cand_schema.kind is Task.MULTICLASS:  # class names -> class indexes in the output's order
        labels = label_codes(target, cand_schema.classes)
    else:
        labels = np.asarray(target, dtype=np.float64)
    cand = score_version(Path(row.path), cand_schema, columns)
    serving = serving_schema = None
    signatures: tuple[SourceSignature | None, SourceSignature | None] = (None, None)
    if current is not None and current.version != candidate:
        path = Path(current.path)
        serving_schema = read_schema(path=path)
        serving = score_version(path, serving_schema, columns)
        signatures = (read_signature(path=path), read_signature(path=Path(row.path)))
    holdout = Holdout(columns=columns, labels=labels, candidate=cand, serving=serving)
    policy = GatePolicy.from_settings(control.settings)
    return evaluate(
        schema=cand_schema,
        holdout=holdout,
        policy=policy,
        serving_schema=serving_schema,
        signatures=signatures,
    )


def conclude(control: JobControl, plan: Plan, candidate: int, result: GateResult) -> JobState:
    """Promote, hold or reject the candidate and end the job, in one transaction."""
    settings = control.settings
    lines = [f"gate {c.name}: {'passed' if c.passed else 'FAILED'}: {c.message}" for c in result.checks]
    with control.db.session() as session:
        if result.passed and settings.retrain_auto_promote:
            promote(session=session, model_name=plan.model_name, version=candidate, actor=control.actor)
            state = JobState.PROMOTED
            lines.append(f"{plan.model_name}:{candidate} is now serving")
        elif result.passed:
            state = JobState.PASSED
            lines.append(
                f"held for a manual promotion (retrain_auto_promote is off): "
                f"driftwarden models promote {plan.model_name} {candidate}"
            )
        elif result.verdict is Verdict.UNDECIDED and [c.name for c in result.undecided] == ["input_contract"]:
            state = JobState.UNDECIDED
            lines.append(
                f"{plan.model_name}:{candidate} stays staged: its contract breaks the serving version's "
                "clients (gate input_contract); a person decides: driftwarden models promote "
                f"{plan.model_name} {candidate} --accept-contract-change, or driftwarden models reject "
                f"{plan.model_name} {candidate} --reason TEXT"
            )
        elif result.verdict is Verdict.UNDECIDED:
            state = JobState.UNDECIDED
            lines.append(
                f"the gate could not decide ({', '.join(c.name for c in result.undecided)}): "
                f"{plan.model_name}:{candidate} stays staged for a person to decide: "
                f"driftwarden models promote {plan.model_name} {candidate}, or driftwarden models reject "
                f"{plan.model_name} {candidate} --reason TEXT; a larger holdout decides on its own "
                "(more labelled rows, DRIFTWARDEN_RETRAIN_HOLDOUT_MIN_ROWS)"
            )
        else:
            reject(
                session=session,
                model_name=plan.model_name,
                version=candidate,
                reason=f"job {control.job_id}: {result.summary()}",
                actor=control.actor,
            )
            state = JobState.REJECTED
            lines.append(f"{plan.model_name}:{candidate} rejected; the serving version is unchanged")
        owned = finish(
            session=session,
            job_id=control.job_id,
            worker_id=control.worker_id,
            state=state,
            gate=result.as_dict(),
            result_version=candidate,
            lines=lines,
        )
        if not owned:  # taken over meanwhile: undo the promotion / rejection with this transaction
            control.halt(StopReason.LEASE_LOST)
            control.check()
    return state


def _end_badly(
    control: JobControl, snap: Snapshot, candidate: int | None, state: JobState, error: str | None, what: str
) -> None:
    """End the job cancelled or failed; its candidate, if one was registered, is rejected with it."""
    try:
        with control.db.session() as session:
            if candidate is not None:
                row = get_version(session=session, model_name=snap.model_name, version=candidate)
                if row is not None and row.state is VersionState.STAGED:
                    reject(
                        session=session,
                        model_name=snap.model_name,
                        version=candidate,
                        reason=f"job {snap.id} {what}" + (f": {error}" if error else ""),
                        actor=control.actor,
                    )
            finish(session=session, job_id=snap.id, worker_id=control.worker_id, state=state, error=error)
    except Exception:
        log.exception("job %d: could not reject candidate %s; ending the job only", snap.id, candidate)
        with control.db.session() as session:
            finish(session=session, job_id=snap.id, worker_id=control.worker_id, state=state, error=error)
