"""A surrogate of a model's answers, fitted on the reference sample (pure): what attribution asks in place
of a version served elsewhere (driftwarden holds no model to call).

It is the additive model of :mod:`monitors.performance`'s direct loss estimation: a piecewise-linear function
of each numeric feature on reference-quantile knots, one-hot categories, ridge least squares in numpy. Its
target is the model's answer on a scale where an additive model fits: the logit of a binary probability,
each class's log-probability (centred per row; the surrogate answers their softmax) for a multi-class
model, the value of a regression. Its fit is measured on held-out reference rows (a fifth of the sample,
seeded) before it is refitted on every row: ``r2`` of the logit (binary) or of the value (regression), and
``agreement`` (the share of rows where it picks the model's class) for a multi-class model. Stored in the
profile as ``profile["surrogate"]`` (:func:`fit_surrogate`), read back by :func:`surrogate_predict`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from monitors.performance import LOSS_MODEL_RIDGE, _design, _knots, _ridge, _top_categories
from monitors.rows import RowSample
from registry.schema import FeatureKind, Task

SURROGATE_FORMAT = "driftwarden.surrogate/1"
MIN_ROWS = 200  # reference rows with an answer to fit on, at least
HOLDOUT_SHARE = 0.2
LOGIT_CLIP = 1e-6  # probabilities clipped to [eps, 1 - eps] before the logit


def _targets(task: Task, predictions: np.ndarray) -> np.ndarray:
    """The model's answers on the surrogate's additive scale: ``[n, T]``."""
    p = np.asarray(predictions, dtype=np.float64)
    if task is Task.REGRESSION:
        return p.reshape(-1, 1)
    q = np.clip(p, LOGIT_CLIP, 1.0 - LOGIT_CLIP)
    if task is Task.MULTICLASS:
        logs = np.log(q)
        return logs - logs.mean(axis=1, keepdims=True)
    return np.log(q / (1.0 - q)).reshape(-1, 1)


def _answers(task: Task, scores: np.ndarray) -> np.ndarray:
    """Scores on the additive scale back to answers: a probability, probability rows or a value."""
    if task is Task.REGRESSION:
        return scores[:, 0]
    if task is Task.MULTICLASS:
        z = np.exp(scores - scores.max(axis=1, keepdims=True))
        return z / z.sum(axis=1, keepdims=True)
    return 1.0 / (1.0 + np.exp(-scores[:, 0]))


def _specs(sample: RowSample) -> list[dict[str, Any]]:
    """Each feature's knots or categories, as the loss model keeps them."""
    out: list[dict[str, Any]] = []
    for name, kind in sample.kinds.items():
        col = sample.columns[name]
        if kind is FeatureKind.CATEGORICAL:
            out.append({"name": name, "kind": "categorical", "categories": _top_categories(col)})
        else:
            out.append({"name": name, "kind": "numeric", "knots": _knots(np.asarray(col, dtype=np.float64))})
    return out


def _fit(model: Mapping[str, Any], sample: RowSample, targets: np.ndarray) -> np.ndarray:
    x = _design(sample.columns, np.zeros(sample.rows), model)
    return _ridge(x, targets, LOSS_MODEL_RIDGE)


def _scores(model: Mapping[str, Any], columns: Mapping[str, np.ndarray], coef: np.ndarray) -> np.ndarray:
    rows = len(next(iter(columns.values()))) if columns else 0
    return np.asarray(_design(columns, np.zeros(rows), model) @ coef)


def _r2(truth: np.ndarray, fitted: np.ndarray) -> float:
    sst = float(((truth - truth.mean()) ** 2).sum())
    return 1.0 - float(((truth - fitted) ** 2).sum()) / sst if sst > 0 else float("nan")


def _measure(task: Task, truth: np.ndarray, scores: np.ndarray) -> tuple[str, float]:
    """How well held-out scores match the model's: ``("r2", .)`` or ``("agreement", .)``."""
    if task is Task.MULTICLASS:
        return "agreement", float(np.mean(np.argmax(truth, axis=1) == np.argmax(scores, axis=1)))
    return "r2", _r2(truth[:, 0], scores[:, 0])


def fit_surrogate(sample: RowSample, task: Task, *, seed: int = 0) -> dict[str, Any] | None:
    """Fit the surrogate of ``sample.predictions`` from its features (JSON-ready; None: too few rows)."""
    p = np.asarray(sample.predictions, dtype=np.float64)
    ok = ~np.isnan(p).any(axis=1) if p.ndim == 2 else ~np.isnan(p)
    if task is Task.MULTICLASS and p.ndim != 2:
        return None
    rows = sample.take(np.flatnonzero(ok))
    if rows.rows < MIN_ROWS or not rows.kinds:
        return None
    targets = _targets(task, rows.predictions)
    model: dict[str, Any] = {"format": SURROGATE_FORMAT, "task": task.value, "features": _specs(rows)}
    model["prediction_knots"] = []  # the loss model's design without the prediction's own columns
    held = np.random.default_rng(seed).random(rows.rows) < HOLDOUT_SHARE
    fit_rows, test_rows = rows.take(np.flatnonzero(~held)), rows.take(np.flatnonzero(held))
    coef = _fit(model, fit_rows, targets[~held])
    metric, value = _measure(task, targets[held], _scores(model, test_rows.columns, coef))
    model["fit"] = {"metric": metric, "value": value, "rows": int(held.sum())}
    model["coefficients"] = _fit(model, rows, targets).tolist()
    model["rows"] = rows.rows
    return model


def surrogate_predict(model: Mapping[str, Any], columns: Mapping[str, np.ndarray]) -> np.ndarray:
    """The surrogate's answers to feature columns: ``[n]`` or ``[n, K]``, as the model's."""
    coef = np.asarray(model["coefficients"], dtype=np.float64)
    return _answers(Task.parse(str(model["task"])), _scores(model, columns, coef))


def profile_surrogate(profile: Mapping[str, Any], task: Task) -> dict[str, Any] | None:
    """The surrogate of a profile dict's reference sample (``profile["sample"]``); None without one."""
    from monitors.rows import sample_from_dict

    data = profile.get("sample")
    if not data:
        return None
    return fit_surrogate(sample_from_dict(data), task)


def surrogate_parts(
    model: Mapping[str, Any], columns: Mapping[str, np.ndarray]
) -> tuple[np.ndarray, dict[str, np.ndarray]]:
    """The surrogate's score split by feature: the intercept ``[T]`` and each feature's part ``[n, T]``
    (:func:`surrogate_predict` answers their sum)."""
    coef = np.asarray(model["coefficients"], dtype=np.float64)
    coef = coef.reshape(coef.shape[0], -1)
    rows = len(next(iter(columns.values()))) if columns else 0
    parts: dict[str, np.ndarray] = {}
    at = 1  # the intercept's column first, then each feature's block in order (monitors.performance._design)
    for spec in model["features"]:
        alone = {"features": [spec], "prediction_knots": []}
        block = _design({spec["name"]: columns[spec["name"]]}, np.zeros(rows), alone)[:, 1:-1]
        parts[spec["name"]] = block @ coef[at : at + block.shape[1]]
        at += block.shape[1]
    return coef[0], parts


def surrogate_answers(model: Mapping[str, Any], scores: np.ndarray) -> np.ndarray:
    """Summed scores ``[n, T]`` as the surrogate's answers."""
    return _answers(Task.parse(str(model["task"])), scores)
