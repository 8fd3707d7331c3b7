"""The metric check: the candidate's task metric against the serving version's on the holdout."""

from __future__ import annotations

import numpy as np

from registry.schema import Task
from training.retraining.gate.figures import (
    MIN_CLASS_ROWS,
    MIN_ROWS_PER_CLASS,
    min_rows,
    shape_check,
    shape_problem,
    task_metric,
    unfit_check,
)
from training.retraining.gate.judgement import compare, comparison_check, no_serving_check
from training.retraining.gate.verdict import DEFAULT_POLICY, GateCheck, GatePolicy


def metric(
    *,
    name: str,
    labels: np.ndarray,
    candidate: np.ndarray,
    serving: np.ndarray | None,
    tolerance: float,
    policy: GatePolicy = DEFAULT_POLICY,
    task: Task = Task.BINARY,
) -> GateCheck:
    """The paired difference of metric ``name`` (:func:`task_metric` of the ``task``) and its verdict against
    ``tolerance`` (a share of serving's value for RMSE and MAE); undecided when ``name`` does not fit."""
    used = task_metric(task, name)
    if used is None:
        return unfit_check("metric", task, name)
    if used == "roc_auc" and np.unique(labels).size < 2:
        used = "accuracy"  # one class in the holdout: ROC AUC is undefined
    if task is not Task.BINARY and (problem := shape_problem(task, labels, candidate, serving)):
        return shape_check("metric", used, problem)
    if serving is None:
        return no_serving_check("metric", used, labels, candidate, tolerance)
    classes = candidate.shape[1] if task is Task.MULTICLASS else 0
    c = compare(
        statistic=used,
        labels=labels,
        candidate=candidate,
        serving=serving,
        tolerance=tolerance,
        policy=policy,
        min_rows=min_rows(task, "metric", classes),
        min_class_rows=MIN_CLASS_ROWS if used == "roc_auc" else 0,
        seed=1,
        rows_note=per_class_note(classes),
    )
    return comparison_check("metric", c)


def per_class_note(classes: int) -> str:
    return f" ({MIN_ROWS_PER_CLASS} a class, {classes} classes)" if classes else ""
