"""A job's data: the labelled window waited for and read, split by time into the training set and the
holdout, the serving version's own data mixed in, both written to the job's folder."""

from __future__ import annotations

import json
import time
from datetime import UTC, datetime, timedelta
from typing import Any

import numpy as np

from core.config import Settings
from core.database import aware
from core.tabular import Columns, read_table, write_table
from predictions.service import LabelledRows, count_labelled, labelled_rows
from registry.schema import FeatureKind, Task
from training.retraining.job.control import JobControl, NotEnoughData, log, record_on_job
from training.retraining.job.plan import JobData, Plan, Snapshot, job_folder
from training.retraining.models import Trigger


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
    record_on_job(
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
            record_on_job(
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
        record_on_job(control, progress={"phase": "reading data"}, lines=[f"{why}: reading the window"])
        return f"; {why}"


def read_data(control: JobControl, snap: Snapshot, plan: Plan) -> JobData:
    """Read the window, split it by time, write the training set and the holdout into the job's folder."""
    settings = control.settings
    if settings.lake_mode == "only":  # the labelled window is read from the database's log, which is empty
        raise NotEnoughData(
            f"model {snap.model_name}: retraining reads its labelled window from the database's prediction "
            "log, and with DRIFTWARDEN_LAKE_MODE=only the log is in the lake alone: set lake_mode=also to "
            "retrain from served traffic (or train on a file: driftwarden train --data FILE)"
        )
    waited = wait_for_rows(control, snap)
    rows, since = _read_window(control, snap, plan)
    n = int(rows.labels.size)
    _check_enough(settings, snap, n, waited)
    n_hold, short = holdout_rows(
        labelled=n, fraction=settings.retrain_holdout_fraction, min_rows=settings.retrain_holdout_min_rows
    )
    cut = n - n_hold
    train_cols, holdout_cols = _split(snap, plan, rows, cut)
    drill = snap.params.get("drill")
    notes: list[str] = []
    train_cols, previous_rows = _mix_previous(control, plan, train_cols, notes)
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
    record_on_job(control, lines=[summary, *notes, *_data_notes(settings, n, n_hold, short, drill)])
    return data


def _read_window(control: JobControl, snap: Snapshot, plan: Plan) -> tuple[LabelledRows, datetime | None]:
    """The model's newest labelled predictions (the window) and the window's start, if it has one."""
    settings = control.settings
    schema = plan.schema
    numeric = [f.name for f in schema.features if f.kind is FeatureKind.NUMERIC]
    categorical = [f.name for f in schema.features if f.kind is FeatureKind.CATEGORICAL]
    minutes = settings.retrain_window_minutes
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
    return rows, since


def _check_enough(settings: Settings, snap: Snapshot, n: int, waited: str) -> None:
    """Refuse a window of fewer than ``retrain_min_rows`` labelled predictions."""
    minutes = settings.retrain_window_minutes
    where = f"the last {settings.retrain_window_rows} labelled predictions" + (
        f" of the last {minutes:g} minutes" if minutes else ""
    )
    if n < settings.retrain_min_rows:
        raise NotEnoughData(
            f"model {snap.model_name} has {n} labelled predictions in the window ({where}{waited}), fewer "
            f"than retrain_min_rows={settings.retrain_min_rows}: send feedback labels "
            f"(POST /v1/models/{snap.model_name}/feedback) or lower DRIFTWARDEN_RETRAIN_MIN_ROWS"
        )


def _split(snap: Snapshot, plan: Plan, rows: LabelledRows, cut: int) -> tuple[Columns, Columns]:
    """The window split by time at ``cut``: the training part (labels shuffled by the drill), the holdout."""
    schema = plan.schema
    n = int(rows.labels.size)
    numeric = {f.name for f in schema.features if f.kind is FeatureKind.NUMERIC}
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
    if snap.params.get("drill") == "shuffled_labels":
        np.random.default_rng(snap.id).shuffle(train_y)
    train_cols[schema.target] = train_y
    holdout_cols[schema.target] = labels[cut:]
    return train_cols, holdout_cols


def _mix_previous(
    control: JobControl, plan: Plan, train_cols: Columns, notes: list[str]
) -> tuple[Columns, int]:
    """The training part with the serving version's own training data mixed in when the setting asks."""
    settings = control.settings
    previous = _previous_data(control, plan) if settings.retrain_include_previous_data else None
    if previous is not None:
        cols, source = previous
        previous_rows = len(cols[plan.schema.target])
        notes.append(f"mixed in {previous_rows} rows of the serving version's training data ({source})")
        return {name: _concat(cols[name], train_cols[name]) for name in train_cols}, previous_rows
    if settings.retrain_include_previous_data:
        notes.append(
            "retrain_include_previous_data is on but the serving version's data_source is not readable"
        )
    return train_cols, 0


def _data_notes(settings: Settings, n: int, n_hold: int, short: bool, drill: Any) -> list[str]:
    """The notes on a short holdout and on a fire drill for the job's log."""
    notes: list[str] = []
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
    return notes


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
