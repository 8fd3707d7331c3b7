"""Paired comparisons of two models scored on the same labelled rows (pure: numpy in, numbers out).

The validation gate asks of a finite holdout whether the candidate is worse than the serving version by
more than a tolerance. Both versions score the same rows, so the question is about a *paired*
difference ``metric(candidate) - metric(serving)``, whose sampling noise is far smaller than either
value's alone. Each function returns that difference with a lower and an upper bound, each of which holds
with ``confidence`` on its own (together they form a two-sided interval at ``2 * confidence - 1``):

- ROC AUC: DeLong, DeLong & Clarke-Pearson (1988), computed as in Sun & Xu (2014). Each AUC is the mean
  of per-row placement values (for a positive row: the share of negatives it outranks; for a negative:
  the share of positives that outrank it); the covariance of the two models' placements gives the
  variance of the difference, and the bounds are normal.
- Accuracy, precision, recall, F1 (at the 0.5 threshold) and the debiased expected calibration error:
  a paired bootstrap over rows (each replicate draws the same rows for both models) with percentile bounds.
  Measured on ``tests/training/retraining/test_gate_rates.py``'s population (equal models, and a candidate
  twice the tolerance worse calibrated): with the debiased ECE these bounds reject a candidate exactly the
  tolerance worse 0.5 % of the time at 95 % (conservative: resampling inflates the debiased ECE of a
  well-calibrated model, whose gaps sit at zero, more than a worse one's) and one twice the tolerance worse
  97 % of the time on 8,000 rows, 100 % on 12,000. The reflected ("basic") bounds rejected more (4.5 % and
  98 %) but, in the demo, rejected a candidate whose ECE was 0.035 against a serving version at 0.0006 with
  bounds +0.033 to +0.051: reflecting the lean of that zero-clamped statistic over-corrects. The bootstrap is
  seeded, so a verdict is reproducible from the same rows.
- Multi-class (labels: class indexes ``0..K-1`` as floats; probabilities: ``[n, K]`` rows, the predicted
  class a row's argmax): accuracy and macro F1 (the mean of the one-vs-rest F1 over the classes where it is
  defined: a class neither in the labels nor predicted has none, as in :mod:`monitors.performance`), by
  the same paired bootstrap. The calibration of class ``k`` is the debiased ECE of the one-vs-rest pair
  (``labels == k``, column ``k``): :func:`one_vs_rest`, :func:`class_calibration_errors`; the paired
  bootstrap of every class at once, on shared replicates, is :func:`bootstrap_classes`.
- Regression (labels and predictions: numbers): RMSE and MAE, by the same paired bootstrap; lower is better
  (:data:`LOWER_IS_BETTER`).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from statistics import NormalDist

import numpy as np

from monitors.performance import mid_ranks, roc_auc

ECE_BINS = 10
THRESHOLD = 0.5
BLOCK_CELLS = 2_000_000  # replicate x row cells of bootstrap weights held at once (16 MB of float64)
MAX_UNDEFINED = 0.1  # a bootstrap whose statistic is undefined in more replicates than this has no interval

# A statistic of bootstrap replicates: weights (replicates x rows, counts of each row), labels (0/1 floats;
# class indexes; numbers) and predictions ([n] probabilities; [n, K] probability rows; [n] values) -> one
# value per replicate. Weights of ones give the statistic of the rows themselves.
Weighted = Callable[[np.ndarray, np.ndarray, np.ndarray], np.ndarray]


@dataclass(frozen=True)
class Difference:
    """``metric(candidate) - metric(serving)`` on the same rows; each bound holds with ``confidence``."""

    candidate: float
    serving: float
    low: float
    high: float
    confidence: float
    method: str

    @property
    def estimate(self) -> float:
        return self.candidate - self.serving

    @property
    def half_width(self) -> float:
        """Half the distance between the bounds (NaN where there are none)."""
        return (self.high - self.low) / 2.0

    @property
    def defined(self) -> bool:
        return all(math.isfinite(v) for v in (self.candidate, self.serving, self.low, self.high))


def _z(confidence: float) -> float:
    return NormalDist().inv_cdf(confidence)


def _placements(y: np.ndarray, scores: np.ndarray) -> tuple[float, np.ndarray, np.ndarray]:
    """AUC of ``scores`` and its placement values: per positive row, per negative row."""
    pos, neg = scores[y], scores[~y]
    m, n = pos.size, neg.size
    ranks = mid_ranks(np.concatenate([pos, neg]))
    among_pos, among_neg = mid_ranks(pos), mid_ranks(neg)
    auc = (float(ranks[:m].sum()) - m * (m + 1) / 2.0) / (m * n)
    return auc, (ranks[:m] - among_pos) / n, 1.0 - (ranks[m:] - among_neg) / m


def delong(
    *, labels: np.ndarray, candidate: np.ndarray, serving: np.ndarray, confidence: float
) -> Difference:
    """ROC AUC of each model and the DeLong bounds of their difference (NaN with < 2 rows of a class)."""
    y = np.asarray(labels).astype(bool)
    a = np.asarray(candidate, dtype=np.float64)
    b = np.asarray(serving, dtype=np.float64)
    m = int(y.sum())
    n = y.size - m
    if m < 2 or n < 2 or np.isnan(a).any() or np.isnan(b).any():
        nan = float("nan")
        return Difference(nan, nan, nan, nan, confidence, "delong")
    auc_a, pos_a, neg_a = _placements(y, a)
    auc_b, pos_b, neg_b = _placements(y, b)
    var = float(np.var(pos_a - pos_b, ddof=1)) / m + float(np.var(neg_a - neg_b, ddof=1)) / n
    half = _z(confidence) * math.sqrt(max(var, 0.0))
    d = auc_a - auc_b
    return Difference(auc_a, auc_b, d - half, d + half, confidence, "delong")


def _ratio(num: np.ndarray, den: np.ndarray) -> np.ndarray:
    out = np.full(np.shape(num), np.nan)
    np.divide(num, den, out=out, where=den > 0)
    return out


def _confusion(w: np.ndarray, y: np.ndarray, p: np.ndarray) -> tuple[np.ndarray, ...]:
    pred = (p >= THRESHOLD).astype(np.float64)
    tp = w @ (pred * y)
    return tp, w @ (pred * (1.0 - y)), w @ ((1.0 - pred) * y), w.sum(axis=1)


def weighted_accuracy(w: np.ndarray, y: np.ndarray, p: np.ndarray) -> np.ndarray:
    """Share of rows whose prediction equals the label: the probability thresholded at 0.5 (binary, ``p``
    of shape [n]), the argmax class (multi-class, ``p`` of shape [n, K])."""
    if p.ndim == 2:
        correct = (np.argmax(p, axis=1) == np.rint(y)).astype(np.float64)
    else:
        correct = ((p >= THRESHOLD) == (y > 0.5)).astype(np.float64)
    return _ratio(w @ correct, w.sum(axis=1))


def weighted_precision(w: np.ndarray, y: np.ndarray, p: np.ndarray) -> np.ndarray:
    tp, fp, _, _ = _confusion(w, y, p)
    return _ratio(tp, tp + fp)


def weighted_recall(w: np.ndarray, y: np.ndarray, p: np.ndarray) -> np.ndarray:
    tp, _, fn, _ = _confusion(w, y, p)
    return _ratio(tp, tp + fn)


def weighted_f1(w: np.ndarray, y: np.ndarray, p: np.ndarray) -> np.ndarray:
    tp, fp, fn, _ = _confusion(w, y, p)
    return _ratio(2.0 * tp, 2.0 * tp + fp + fn)


def _debiased_ece(n_b: np.ndarray, s: np.ndarray, ss: np.ndarray, total: np.ndarray) -> np.ndarray:
    """The debiased ECE from per-bin weighted counts, sums and sums of squares of ``y - p`` (bins on the
    last axis), over ``total`` rows."""
    with np.errstate(invalid="ignore", divide="ignore"):
        mean = np.where(n_b > 0, s / np.maximum(n_b, 1.0), 0.0)
        var = np.where(n_b > 1, (ss / np.maximum(n_b, 1.0) - mean * mean) / np.maximum(n_b - 1.0, 1.0), 0.0)
    gaps = np.sqrt(np.maximum(mean * mean - var, 0.0))
    return _ratio((n_b * gaps).sum(axis=-1), total)


def weighted_ece(w: np.ndarray, y: np.ndarray, p: np.ndarray) -> np.ndarray:
    """Expected calibration error over 10 equal-width bins, debiased: ``sum_b (n_b / n) * g_b`` where
    ``g_b = sqrt(max(gap_b^2 - var_b, 0))``, ``gap_b`` the bin's mean of ``y - p`` and ``var_b`` that mean's
    sampling variance (after Kumar, Liang & Ma 2019). The plain ECE of a finite sample counts sampling
    noise as miscalibration (a perfectly calibrated model scores a few hundredths on 400 rows); this
    one does not, to first order."""
    with np.errstate(invalid="ignore"):  # a NaN probability (the outputs check fails it) lands in a bin
        cell = np.clip(np.floor(p * ECE_BINS).astype(np.int64), 0, ECE_BINS - 1)
    rows = np.arange(p.size)
    r = y - p
    per_bin = np.zeros((3, p.size, ECE_BINS))
    per_bin[0, rows, cell] = 1.0
    per_bin[1, rows, cell] = r
    per_bin[2, rows, cell] = r * r
    n_b, s, ss = (w @ per_bin[k] for k in range(3))
    return _debiased_ece(n_b, s, ss, w.sum(axis=1))


CLASS_CELLS = 4_000_000  # rows x (3 x classes x bins) of one per-class ECE indicator matrix (32 MB)


def weighted_class_ece(w: np.ndarray, y: np.ndarray, p: np.ndarray) -> np.ndarray:
    """Per class of ``[n, K]`` probabilities, :func:`weighted_ece` of the one-vs-rest pair (``y == k``,
    column ``k``): replicates x K. All classes in few wide products (the classes' bins side by side), not
    K thin ones: the same numbers as K calls of :func:`weighted_ece`, several times faster."""
    n, k = p.shape
    rows = np.arange(n)
    total = w.sum(axis=1)
    out = np.empty((w.shape[0], k))
    group = max(1, CLASS_CELLS // max(n * 3 * ECE_BINS, 1))
    with np.errstate(invalid="ignore"):  # a NaN probability (the outputs check fails it) lands in a bin
        cells = np.clip(np.floor(p * ECE_BINS).astype(np.int64), 0, ECE_BINS - 1)
    for lo in range(0, k, group):
        g = min(group, k - lo)
        r = (np.rint(y)[:, None] == np.arange(lo, lo + g)[None, :]) - p[:, lo : lo + g]
        col = np.arange(g)[None, :] * ECE_BINS + cells[:, lo : lo + g]  # (class, bin) of each row
        per_bin = np.zeros((n, 3, g * ECE_BINS))
        for j in range(g):
            per_bin[rows, 0, col[:, j]] = 1.0
            per_bin[rows, 1, col[:, j]] = r[:, j]
            per_bin[rows, 2, col[:, j]] = r[:, j] * r[:, j]
        sums = (w @ per_bin.reshape(n, -1)).reshape(w.shape[0], 3, g, ECE_BINS)
        out[:, lo : lo + g] = _debiased_ece(sums[:, 0], sums[:, 1], sums[:, 2], total[:, None])
    return out


def _one_hot(classes: np.ndarray, k: int) -> np.ndarray:
    """[n, k] indicators of ``classes`` (a class outside ``0..k-1``: a row of zeros)."""
    return (np.rint(classes)[:, None] == np.arange(k)[None, :]).astype(np.float64)


def weighted_macro_f1(w: np.ndarray, y: np.ndarray, p: np.ndarray) -> np.ndarray:
    """Multi-class macro F1: the mean over classes of the one-vs-rest ``2 tp / (2 tp + fp + fn)`` of the
    argmax class, over the classes where it is defined (a class with no row labelled or predicted has
    none); NaN where no class has one."""
    k = p.shape[1]
    predicted = _one_hot(np.argmax(p, axis=1).astype(np.float64), k)
    actual = _one_hot(y, k)
    tp = w @ (predicted * actual)
    both = w @ predicted + w @ actual  # 2 tp + fp + fn
    defined = both > 0
    per_class = np.where(defined, 2.0 * tp / np.where(defined, both, 1.0), 0.0)
    return _ratio(per_class.sum(axis=1), defined.sum(axis=1).astype(np.float64))


def weighted_rmse(w: np.ndarray, y: np.ndarray, p: np.ndarray) -> np.ndarray:
    """Regression: root mean squared error of the values ``p`` against the labels ``y``."""
    return np.sqrt(_ratio(w @ ((p - y) ** 2), w.sum(axis=1)))


def weighted_mae(w: np.ndarray, y: np.ndarray, p: np.ndarray) -> np.ndarray:
    """Regression: mean absolute error of the values ``p`` against the labels ``y``."""
    return _ratio(w @ np.abs(p - y), w.sum(axis=1))


WEIGHTED: dict[str, Weighted] = {
    "accuracy": weighted_accuracy,
    "precision": weighted_precision,
    "recall": weighted_recall,
    "f1": weighted_f1,
    "ece": weighted_ece,
    "macro_f1": weighted_macro_f1,
    "rmse": weighted_rmse,
    "mae": weighted_mae,
}

LOWER_IS_BETTER = frozenset({"ece", "rmse", "mae"})
"""The statistics where a higher value is worse (a candidate fails by being higher)."""


def one_vs_rest(labels: np.ndarray, probs: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """Class ``k`` of a multi-class model as a binary one: 0/1 labels (``labels == k``) and its column."""
    y = np.asarray(labels, dtype=np.float64)
    p = np.asarray(probs, dtype=np.float64)
    return (np.rint(y) == k).astype(np.float64), p[:, k]


def class_calibration_errors(labels: np.ndarray, probs: np.ndarray) -> np.ndarray:
    """Per class of ``[n, K]`` probabilities, the debiased expected calibration error of the one-vs-rest
    pair (:func:`weighted_ece` of ``labels == k`` and column ``k``); NaN for no rows."""
    y = np.asarray(labels, dtype=np.float64)
    p = np.asarray(probs, dtype=np.float64)
    if y.size == 0:
        return np.full(p.shape[1] if p.ndim == 2 else 0, np.nan)
    return weighted_class_ece(np.ones((1, y.size)), y, p)[0]


def value(statistic: str, labels: np.ndarray, probs: np.ndarray) -> float:
    """``statistic`` (``roc_auc`` or a key of :data:`WEIGHTED`) of one model's outputs on the rows."""
    y = np.asarray(labels, dtype=np.float64)
    p = np.asarray(probs, dtype=np.float64)
    if statistic == "roc_auc":
        return roc_auc(y_true=y, y_score=p)
    return float(WEIGHTED[statistic](np.ones((1, y.size)), y, p)[0]) if y.size else float("nan")


def _replicates(rng: np.random.Generator, rows: int, reps: int) -> Iterator[np.ndarray]:
    """Bootstrap weights in blocks: each row of a block counts how often each row was drawn."""
    block = max(1, min(reps, BLOCK_CELLS // max(rows, 1)))
    for start in range(0, reps, block):
        b = min(block, reps - start)
        drawn = rng.integers(0, rows, size=(b, rows)) + np.arange(b)[:, None] * rows
        yield np.bincount(drawn.ravel(), minlength=b * rows).reshape(b, rows).astype(np.float64)


def bootstrap(
    *,
    statistic: str,
    labels: np.ndarray,
    candidate: np.ndarray,
    serving: np.ndarray,
    confidence: float,
    reps: int = 1000,
    seed: int = 0,
) -> Difference:
    """``statistic`` (a key of :data:`WEIGHTED`) of each model and the paired bootstrap bounds of the
    difference; NaN bounds when the statistic is undefined in more than 10 % of the replicates."""
    fn = WEIGHTED[statistic]
    y = np.asarray(labels, dtype=np.float64)
    a = np.asarray(candidate, dtype=np.float64)
    b = np.asarray(serving, dtype=np.float64)
    nan = float("nan")
    if y.size == 0:
        return Difference(nan, nan, nan, nan, confidence, "bootstrap")
    value_a, value_b = value(statistic, y, a), value(statistic, y, b)
    rng = np.random.default_rng(seed)
    diffs = np.concatenate([fn(w, y, a) - fn(w, y, b) for w in _replicates(rng, y.size, reps)])
    finite = diffs[np.isfinite(diffs)]
    if finite.size < (1.0 - MAX_UNDEFINED) * reps:
        return Difference(value_a, value_b, nan, nan, confidence, "bootstrap")
    low, high = np.quantile(finite, [1.0 - confidence, confidence])
    return Difference(value_a, value_b, float(low), float(high), confidence, "bootstrap")


def bootstrap_classes(
    *,
    labels: np.ndarray,
    candidate: np.ndarray,
    serving: np.ndarray,
    confidence: float,
    reps: int = 1000,
    seed: int = 0,
) -> list[Difference]:
    """Per class of two models' ``[n, K]`` probabilities, the one-vs-rest debiased ECE of each and the
    paired bootstrap bounds of the difference, every class on the same replicates (each class's bounds are
    those of :func:`bootstrap` of its one-vs-rest pair; sharing the draws saves K - 1 resamplings)."""
    y = np.asarray(labels, dtype=np.float64)
    a = np.asarray(candidate, dtype=np.float64)
    b = np.asarray(serving, dtype=np.float64)
    k = a.shape[1]
    nan = float("nan")
    if y.size == 0:
        return [Difference(nan, nan, nan, nan, confidence, "bootstrap") for _ in range(k)]
    value_a, value_b = class_calibration_errors(y, a), class_calibration_errors(y, b)
    rng = np.random.default_rng(seed)
    diffs = np.concatenate(
        [weighted_class_ece(w, y, a) - weighted_class_ece(w, y, b) for w in _replicates(rng, y.size, reps)]
    )
    out = []
    for i in range(k):
        finite = diffs[:, i][np.isfinite(diffs[:, i])]
        if finite.size < (1.0 - MAX_UNDEFINED) * reps:
            out.append(Difference(float(value_a[i]), float(value_b[i]), nan, nan, confidence, "bootstrap"))
            continue
        low, high = np.quantile(finite, [1.0 - confidence, confidence])
        out.append(
            Difference(float(value_a[i]), float(value_b[i]), float(low), float(high), confidence, "bootstrap")
        )
    return out


def difference(
    *,
    statistic: str,
    labels: np.ndarray,
    candidate: np.ndarray,
    serving: np.ndarray,
    confidence: float,
    reps: int = 1000,
    seed: int = 0,
) -> Difference:
    """The paired difference of ``statistic``: DeLong for ``roc_auc``, the paired bootstrap otherwise."""
    if statistic == "roc_auc":
        return delong(labels=labels, candidate=candidate, serving=serving, confidence=confidence)
    return bootstrap(
        statistic=statistic,
        labels=labels,
        candidate=candidate,
        serving=serving,
        confidence=confidence,
        reps=reps,
        seed=seed,
    )
