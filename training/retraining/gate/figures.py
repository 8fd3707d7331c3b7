"""What the checks share: their limits, the metric a task is judged by, and figures rounded for the record."""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from registry.schema import Task
from training.retraining.gate.verdict import GateCheck, Verdict

SHOWN = 5  # violations / slices listed in a check's figures


NO_SERVING = "no serving version to compare with"


MIN_ROWS = {"metric": 200, "calibration": 200}  # fewer holdout rows: the comparison is undecided


MIN_CLASS_ROWS = 20  # ROC AUC needs this many rows of each class (a slice: SLICE_MIN_CLASS_ROWS)


MIN_ROWS_PER_CLASS = 20  # multi-class: metric and calibration need this many rows per class (or MIN_ROWS)


SLICE_MIN_CLASS_ROWS = 10  # a slice with fewer rows of a class is judged by accuracy


TASK_METRICS: dict[Task, tuple[str, ...]] = {
    Task.BINARY: ("roc_auc", "accuracy", "f1", "precision", "recall"),
    Task.MULTICLASS: ("macro_f1", "accuracy"),
    Task.REGRESSION: ("rmse", "mae"),
}


RELATIVE = frozenset({"rmse", "mae"})  # a tolerance of these is a share of the serving version's value


TAIL_REPS = 50  # bootstrap replicates beyond each bound (more replicates at a high confidence)


MAX_REPS = 20_000


MAX_CELLS = 50_000_000  # replicates x rows of one comparison: beyond it, no more than the configured reps


def task_metric(task: Task, configured: str) -> str | None:
    """The metric the gate judges a ``task`` model by: ``configured`` when it fits the task; the task's
    default for the binary default ``roc_auc`` (``gate_metric`` is one setting for all models); else None
    (the configured metric does not fit the task)."""
    fits = TASK_METRICS[task]
    if configured in fits:
        return configured
    if configured == TASK_METRICS[Task.BINARY][0]:
        return fits[0]
    return None


def min_rows(task: Task, check: str, classes: int = 0) -> int:
    """Holdout rows a whole-holdout comparison needs: :data:`MIN_ROWS`, and for a multi-class model at least
    :data:`MIN_ROWS_PER_CLASS` per class."""
    if task is Task.MULTICLASS:
        return max(MIN_ROWS[check], MIN_ROWS_PER_CLASS * classes)
    return MIN_ROWS[check]


def unfit_check(name: str, task: Task, configured: str) -> GateCheck:
    """Undecided: the configured metric does not fit the task (a setting, not evidence about the model)."""
    fits = TASK_METRICS[task]
    return GateCheck(
        name,
        Verdict.UNDECIDED,
        {"metric": configured, "task": task.value, "metrics_of_task": list(fits)},
        f"undecided: the gate metric {configured!r} (DRIFTWARDEN_GATE_METRIC) does not fit a {task.short} "
        f"model, which is judged by {' or '.join(fits)} (the default roc_auc stands for {fits[0]})",
    )


def shape_problem(task: Task, labels: np.ndarray, candidate: np.ndarray, serving: np.ndarray | None) -> str:
    """Why the versions' outputs cannot be compared on these labels ("" when they can): a multi-class model
    answers ``[n, K]`` (both versions the same K), the others ``[n]``."""
    rows = labels.size
    for who, out in (("candidate", candidate), ("serving version", serving)):
        if out is None:
            continue
        if task is Task.MULTICLASS and (out.ndim != 2 or out.shape[0] != rows):
            return f"the {who}'s outputs have shape {list(out.shape)}, not [{rows}, classes]"
        if task is not Task.MULTICLASS and out.shape != (rows,):
            return f"the {who}'s outputs have shape {list(out.shape)}, not [{rows}]"
    if serving is not None and serving.shape != candidate.shape:
        return (
            f"the serving version answers {serving.shape[-1]} classes, the candidate {candidate.shape[-1]}: "
            "their metrics cannot be compared"
        )
    return ""


def shape_check(name: str, statistic: str, problem: str) -> GateCheck:
    return GateCheck(name, Verdict.UNDECIDED, {"metric": statistic}, f"undecided: {problem}")


def number_text(statistic: str, value: float, sign: str = "") -> str:
    """A statistic's value as text: 4 decimals in [0, 1]; 6 significant digits on a target's scale."""
    return f"{value:{sign}.6g}" if statistic in RELATIVE else f"{value:{sign}.4f}"


def as_figure(statistic: str, value: float | None) -> float | None:
    """A statistic's value as a figure: rounded to 4 decimals, or 6 significant digits on a target's scale."""
    if statistic in RELATIVE and value is not None and math.isfinite(value):
        return float(f"{value:.6g}")
    return round_figure(value)


def round_figure(value: float | None, digits: int = 4) -> float | None:
    """A figure for JSON: rounded, NaN as None."""
    if value is None or not math.isfinite(value):
        return None
    return round(float(value), digits)


def json_value(value: Any) -> Any:
    """A numpy value as the JSON value serving would have received (NaN and missing as null)."""
    if value is None:
        return None
    if isinstance(value, float | np.floating):
        return None if math.isnan(value) else float(value)
    if isinstance(value, np.integer):
        return int(value)
    return value
