"""The figures of :mod:`monitors.performance` under many weightings of the same rows at once (pure).

Attribution (:mod:`monitors.attribution`) measures a figure on the same rows a few hundred times (once per
coalition of replaced features) and each time under ``B`` bootstrap weightings of the rows (multiplicities,
the first all ones: the figure itself). Calling :mod:`monitors.performance` ``B`` times per coalition would
cost seconds; these forms take a weight matrix ``[B, n]`` and answer ``[B]`` in a few numpy passes. With unit
weights each equals its counterpart in :mod:`monitors.performance` (tests/monitors/test_attribution.py checks
it): realised and CBPE ROC AUC and accuracy (binary), realised and CBPE macro F1 and accuracy (multi-class),
realised and DLE MAE and RMSE (regression).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from monitors.performance import _design, calibrate, calibrate_multiclass
from registry.schema import Task

BINARY_METRICS = ("roc_auc", "accuracy")
MULTICLASS_METRICS = ("macro_f1", "accuracy")
REGRESSION_METRICS = ("rmse", "mae")


@dataclass(frozen=True)
class Figure:
    """Which performance figure to measure: the task, the metric, realised (labels) or estimated, and what
    the estimate needs from the profile (a calibration table, or the regression's loss model)."""

    task: Task
    metric: str
    estimate: str  # "realised" | "cbpe" | "dle"
    calibration: Mapping[str, Any] | None = None
    loss_model: Mapping[str, Any] | None = None


def auc(scores: np.ndarray, truth: np.ndarray, weights: np.ndarray) -> np.ndarray:
    """ROC AUC of one score column ``[n]`` under weightings ``[B, n]``: ``[B]``; ``truth`` is each row's label
    or its chance of being positive (CBPE), so a row weighs ``w truth`` as a positive, ``w (1 - truth)`` as a
    negative.

    ``sum_j pos_j (neg_{<j} + neg_{=j} / 2) / (P N)`` over groups of tied scores (the trapezoid of the ROC
    curve, as :func:`monitors.performance.roc_auc` and ``estimate_classification_metrics``).
    """
    order = np.argsort(scores, kind="stable")
    s = scores[order]
    w = weights[:, order]
    pos = w * truth[order]
    neg = w - pos
    starts = np.flatnonzero(np.r_[True, s[1:] != s[:-1]])
    if starts.size < s.size:  # tied scores: one step of the curve each
        pos = np.add.reduceat(pos, starts, axis=1)
        neg = np.add.reduceat(neg, starts, axis=1)
    total = pos.sum(axis=1) * neg.sum(axis=1)
    num = np.sum(pos * (np.cumsum(neg, axis=1) - neg / 2.0), axis=1)
    return np.divide(num, total, out=np.full(total.shape, np.nan), where=total > 0)


def _mean(weights: np.ndarray, values: np.ndarray) -> np.ndarray:
    """Weighted mean of a per-row value under each weighting."""
    total = weights.sum(axis=1)
    return np.divide(weights @ values, total, out=np.full(total.shape, np.nan), where=total > 0)


def _macro_f1(weights: np.ndarray, chosen: np.ndarray, truth: np.ndarray) -> np.ndarray:
    """Macro F1 from per-row predicted one-hots and (expected) true-class chances ``[n, K]``."""
    true_pos = weights @ (chosen * truth)
    false_pos = weights @ (chosen * (1.0 - truth))
    false_neg = weights @ ((1.0 - chosen) * truth)
    den = 2 * true_pos + false_pos + false_neg
    f1 = np.divide(2 * true_pos, den, out=np.full(den.shape, np.nan), where=den > 0)
    defined = den > 0
    count = defined.sum(axis=1)
    return np.divide(
        np.where(defined, f1, 0.0).sum(axis=1), count, out=np.full(count.shape, np.nan), where=count > 0
    )


def values(
    figure: Figure,
    *,
    predictions: np.ndarray,
    weights: np.ndarray,
    labels: np.ndarray | None = None,
    columns: Mapping[str, np.ndarray] | None = None,
) -> np.ndarray:
    """The figure of the rows under each weighting ``[B, n]`` -> ``[B]`` (labels for realised figures, the
    columns for DLE)."""
    if figure.task is Task.MULTICLASS:
        return _multiclass(figure, predictions, weights, labels)
    if figure.task is Task.REGRESSION:
        return _regression(figure, predictions, weights, labels, columns)
    return _binary(figure, predictions, weights, labels)


def _binary(figure: Figure, p: np.ndarray, w: np.ndarray, labels: np.ndarray | None) -> np.ndarray:
    if figure.estimate == "realised":
        assert labels is not None
        truth = labels.astype(np.float64)
    else:
        truth = calibrate(p, dict(figure.calibration) if figure.calibration else None)
    if figure.metric == "accuracy":
        return _mean(w, np.where(p >= 0.5, truth, 1.0 - truth))
    return auc(p, truth, w)


def _multiclass(figure: Figure, p: np.ndarray, w: np.ndarray, labels: np.ndarray | None) -> np.ndarray:
    n, k = p.shape
    pred = np.argmax(p, axis=1)
    chosen = np.zeros((n, k))
    chosen[np.arange(n), pred] = 1.0
    if figure.estimate == "realised":
        assert labels is not None
        truth = np.zeros((n, k))
        truth[np.arange(n), labels.astype(np.int64)] = 1.0
        correct = truth[np.arange(n), pred]
    else:
        truth = calibrate_multiclass(p, figure.calibration)
        correct = calibrate(truth[np.arange(n), pred], (figure.calibration or {}).get("confidence"))
    if figure.metric == "accuracy":
        return _mean(w, correct)
    return _macro_f1(w, chosen, truth)


def _regression(
    figure: Figure,
    p: np.ndarray,
    w: np.ndarray,
    labels: np.ndarray | None,
    columns: Mapping[str, np.ndarray] | None,
) -> np.ndarray:
    if figure.estimate == "realised":
        assert labels is not None
        err = p - labels
        abs_err, sq_err = np.abs(err), err**2
    else:
        model = figure.loss_model
        assert model is not None and columns is not None
        x = _design(columns, p, model)
        abs_err = np.clip(x @ np.asarray(model["abs_error"]), 0.0, None)
        sq_err = np.clip(x @ np.asarray(model["squared_error"]), 0.0, None)
    if figure.metric == "mae":
        return _mean(w, abs_err)
    return np.sqrt(_mean(w, sq_err))
