"""Model performance per window: with labels (realised) and without (confidence-based estimate).

Realised metrics compare labels ``y`` with probabilities ``p`` thresholded at ``t`` (default 0.5).
ROC AUC is the Mann-Whitney form ``U / (n_pos * n_neg)`` with mid-ranks for ties.

The label-free estimate (CBPE, as in NannyML) treats the calibrated probability ``c(p_i)`` as the
chance that row ``i`` is positive. The expected confusion matrix is then
``TP = sum c_i [p_i >= t]``, ``FP = sum (1 - c_i) [p_i >= t]``, ``FN = sum c_i [p_i < t]``,
``TN = sum (1 - c_i) [p_i < t]``, and expected ROC AUC integrates the expected ROC curve with
``TPR(k) = sum_{j<=k} c_j / sum c`` and ``FPR(k) = sum_{j<=k} (1 - c_j) / sum (1 - c)`` over rows
sorted by decreasing ``p``. It holds while ``P(y | x)`` is unchanged (covariate shift); a pure
concept drift is invisible to it and shows only in realised metrics and the error stream.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

import numpy as np


@dataclass(frozen=True)
class ClassificationMetrics:
    """Binary classification metrics of one window."""

    rows: int
    accuracy: float
    precision: float
    recall: float
    f1: float
    roc_auc: float
    positive_rate: float

    def as_dict(self) -> dict[str, float]:
        return {k: float(v) for k, v in asdict(self).items()}


@dataclass(frozen=True)
class RegressionMetrics:
    """Regression metrics of one window."""

    rows: int
    mae: float
    rmse: float

    def as_dict(self) -> dict[str, float]:
        return {k: float(v) for k, v in asdict(self).items()}


def _ratio(num: float, den: float) -> float:
    return num / den if den > 0 else float("nan")


def _from_confusion(
    *,
    rows: int,
    true_pos: float,
    false_pos: float,
    false_neg: float,
    true_neg: float,
    auc: float,
    pos: float,
) -> ClassificationMetrics:
    precision = _ratio(true_pos, true_pos + false_pos)
    recall = _ratio(true_pos, true_pos + false_neg)
    f1 = _ratio(2 * true_pos, 2 * true_pos + false_pos + false_neg)
    return ClassificationMetrics(
        rows=rows,
        accuracy=_ratio(true_pos + true_neg, true_pos + true_neg + false_pos + false_neg),
        precision=precision,
        recall=recall,
        f1=f1,
        roc_auc=auc,
        positive_rate=_ratio(pos, rows),
    )


def mid_ranks(values: np.ndarray) -> np.ndarray:
    """Ranks 1..n of ``values``, tied values sharing the mean of their ranks (as ``scipy.stats.rankdata``);
    all NaN when a value is NaN."""
    x = np.asarray(values, dtype=np.float64).reshape(-1)
    if np.isnan(x).any():
        return np.full(x.shape, np.nan)
    order = np.argsort(x, kind="stable")
    ordered = x[order]
    starts = np.flatnonzero(np.r_[True, ordered[1:] != ordered[:-1]])  # first position of each tie group
    ends = np.r_[starts[1:], x.size]  # one past its last
    ranks = np.empty(x.size)
    ranks[order] = np.repeat((starts + 1 + ends) / 2.0, ends - starts)  # ranks starts+1 .. ends, averaged
    return ranks


def roc_auc(*, y_true: np.ndarray, y_score: np.ndarray) -> float:
    """ROC AUC as the normalised Mann-Whitney U statistic (mid-ranks for tied scores)."""
    y = np.asarray(y_true).astype(bool)
    n_pos = int(y.sum())
    n_neg = y.size - n_pos
    if n_pos == 0 or n_neg == 0:
        return float("nan")
    ranks = mid_ranks(y_score)
    u = float(ranks[y].sum()) - n_pos * (n_pos + 1) / 2.0
    return u / (n_pos * n_neg)


def classification_metrics(
    *, y_true: np.ndarray, y_prob: np.ndarray, threshold: float = 0.5
) -> ClassificationMetrics:
    """Accuracy, precision, recall, F1 (at ``threshold``) and ROC AUC of labelled rows."""
    y = np.asarray(y_true).astype(bool)
    p = np.asarray(y_prob, dtype=np.float64)
    pred = p >= threshold
    return _from_confusion(
        rows=int(y.size),
        true_pos=float(np.sum(pred & y)),
        false_pos=float(np.sum(pred & ~y)),
        false_neg=float(np.sum(~pred & y)),
        true_neg=float(np.sum(~pred & ~y)),
        auc=roc_auc(y_true=y, y_score=p),
        pos=float(y.sum()),
    )


def regression_metrics(*, y_true: np.ndarray, y_pred: np.ndarray) -> RegressionMetrics:
    """Mean absolute error and root mean squared error."""
    err = np.asarray(y_pred, dtype=np.float64) - np.asarray(y_true, dtype=np.float64)
    if err.size == 0:
        return RegressionMetrics(rows=0, mae=float("nan"), rmse=float("nan"))
    mae, rmse = float(np.abs(err).mean()), float(np.sqrt((err**2).mean()))
    return RegressionMetrics(rows=int(err.size), mae=mae, rmse=rmse)


def calibrate(y_prob: np.ndarray, calibration: dict[str, list[float]] | None) -> np.ndarray:
    """Map raw probabilities through the reference reliability table (identity without one)."""
    p = np.asarray(y_prob, dtype=np.float64)
    if not calibration or not calibration.get("mean_prediction"):
        return np.clip(p, 0.0, 1.0)
    mean_prediction = np.asarray(calibration["mean_prediction"], dtype=np.float64)
    mean_label = np.asarray(calibration["mean_label"], dtype=np.float64)
    return np.clip(np.interp(p, mean_prediction, mean_label), 0.0, 1.0)


def estimate_classification_metrics(
    *,
    y_prob: np.ndarray,
    threshold: float = 0.5,
    calibration: dict[str, list[float]] | None = None,
    weights: np.ndarray | None = None,
) -> ClassificationMetrics:
    """Confidence-based estimate of the window's metrics without labels (see module docstring).

    ``weights`` lets a histogram stand for the rows: ``y_prob`` are bin values, ``weights`` counts.
    """
    p = np.asarray(y_prob, dtype=np.float64)
    w = np.ones(p.shape) if weights is None else np.asarray(weights, dtype=np.float64)
    ok = ~np.isnan(p) & (w > 0)
    p, w = p[ok], w[ok]
    c = calibrate(p, calibration)
    pred = p >= threshold
    true_pos = float((w * c)[pred].sum())
    false_pos = float((w * (1.0 - c))[pred].sum())
    false_neg = float((w * c)[~pred].sum())
    true_neg = float((w * (1.0 - c))[~pred].sum())
    order = np.argsort(-p, kind="stable")
    pos_w, neg_w = (w * c)[order], (w * (1.0 - c))[order]
    pos, neg = float(pos_w.sum()), float(neg_w.sum())
    auc = float("nan")
    if pos > 0 and neg > 0:
        # rows with tied scores form one step of the ROC curve
        ps = p[order]
        last = np.r_[np.flatnonzero(np.diff(ps) != 0), ps.size - 1]
        tpr = np.r_[0.0, np.cumsum(pos_w)[last] / pos]
        fpr = np.r_[0.0, np.cumsum(neg_w)[last] / neg]
        auc = float(np.trapezoid(tpr, fpr))
    return _from_confusion(
        rows=int(round(w.sum())),
        true_pos=true_pos,
        false_pos=false_pos,
        false_neg=false_neg,
        true_neg=true_neg,
        auc=auc,
        pos=pos,
    )


def roc_auc_from_counts(*, positive: np.ndarray, negative: np.ndarray) -> float:
    """ROC AUC from per-bin counts of positives and negatives on ordered score bins (ties within a bin).

    ``AUC = sum_j pos_j (neg_{<j} + neg_j / 2) / (P N)``: equal to :func:`roc_auc` when each bin
    holds a single score value.
    """
    pos = np.asarray(positive, dtype=np.float64)
    neg = np.asarray(negative, dtype=np.float64)
    p_total, n_total = pos.sum(), neg.sum()
    if p_total == 0 or n_total == 0:
        return float("nan")
    below = np.cumsum(neg) - neg
    return float(np.sum(pos * (below + neg / 2.0)) / (p_total * n_total))


def metrics_from_counts(
    *,
    true_pos: int,
    false_pos: int,
    false_neg: int,
    true_neg: int,
    positive: np.ndarray,
    negative: np.ndarray,
) -> ClassificationMetrics:
    """Realised metrics of a window summarised by its confusion counts and per-bin class counts."""
    return _from_confusion(
        rows=true_pos + false_pos + false_neg + true_neg,
        true_pos=true_pos,
        false_pos=false_pos,
        false_neg=false_neg,
        true_neg=true_neg,
        auc=roc_auc_from_counts(positive=positive, negative=negative),
        pos=float(true_pos + false_neg),
    )


def label_coverage(*, labels: np.ndarray) -> float:
    """Share of rows whose label has arrived (NaN or None = not yet)."""
    y = np.asarray(labels)
    if y.size == 0:
        return 0.0
    missing = np.isnan(y.astype(np.float64)) if y.dtype.kind in "fiub" else np.array([v is None for v in y])
    return float(1.0 - missing.mean())
