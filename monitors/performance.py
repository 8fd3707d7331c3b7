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

Multi-class (labels are class indexes ``0..K-1``, predictions ``[n, K]`` probability rows, the predicted class
the row's argmax): realised accuracy, macro F1 (the mean of the per-class one-vs-rest F1 over the classes
where it is defined), log loss (the true class's probability clipped at 1e-15) and per-class recall, flattened
by :meth:`MulticlassMetrics.as_dict` as ``recall_0 .. recall_{K-1}`` (class index, in the model's output
order), which :func:`class_named` names by class as every report and series shows them (``recall[low]``, like
the report's ``prediction[low]``). The label-free estimate is CBPE one-vs-rest: a monotone reliability table
per class (:func:`fit_multiclass_calibration`), calibrated rows renormalised to sum to 1; expected accuracy is
the mean calibrated probability of the predicted class, expected macro F1 comes from the expected per-class
confusion counts as in the binary case. Renormalising one-vs-rest maps biases the predicted class's
probability (low for an under-confident model), so a last top-label reliability table, fitted on the
reference, maps it to the chance the prediction is right before accuracy averages it.

Regression: MAE, RMSE and R^2. The label-free estimate is direct loss estimation (DLE, as in NannyML): a
small "nanny" model fitted on the reference predicts each row's absolute and squared error from its
inputs and the model's prediction (:func:`fit_loss_model`: an additive model, a piecewise-linear function
of each numeric input and of the prediction on reference-quantile knots, one-hot categories, fitted by
ridge least squares in numpy); the estimated MAE is the mean predicted absolute error of the window, the
estimated RMSE the root of the mean predicted squared error. Like CBPE it holds under covariate shift
only.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

from core.tabular import CodedColumn
from registry.schema import Task


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
    r2: float = float("nan")

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
    """Mean absolute error, root mean squared error and R^2 (``1 - SSE/SST``; NaN if SST is 0 or rows < 2)."""
    y = np.asarray(y_true, dtype=np.float64)
    err = np.asarray(y_pred, dtype=np.float64) - y
    if err.size == 0:
        return RegressionMetrics(rows=0, mae=float("nan"), rmse=float("nan"), r2=float("nan"))
    mae, rmse = float(np.abs(err).mean()), float(np.sqrt((err**2).mean()))
    sst = float(((y - y.mean()) ** 2).sum())
    r2 = 1.0 - float((err**2).sum()) / sst if err.size >= 2 and sst > 0 else float("nan")
    return RegressionMetrics(rows=int(err.size), mae=mae, rmse=rmse, r2=r2)


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


# ---------------------------------------------------------------- multi-class

MULTICLASS_CALIBRATION_BINS = 20
"""Prediction-quantile bins of each class's one-vs-rest reliability table."""
LOG_LOSS_EPS = 1e-15


@dataclass(frozen=True)
class MulticlassMetrics:
    """Multi-class classification metrics of one window; ``recall[k]`` is class ``k``'s recall."""

    rows: int
    accuracy: float
    macro_f1: float
    log_loss: float
    recall: tuple[float, ...] = field(default_factory=tuple)

    def as_dict(self) -> dict[str, float]:
        """Flat dict: rows, accuracy, macro_f1, log_loss, then ``recall_<k>`` for class index ``k``."""
        out = {"rows": float(self.rows), "accuracy": self.accuracy, "macro_f1": self.macro_f1}
        out["log_loss"] = self.log_loss
        out.update({f"recall_{k}": float(r) for k, r in enumerate(self.recall)})
        return out


def _macro_f1(true_pos: np.ndarray, false_pos: np.ndarray, false_neg: np.ndarray) -> float:
    """Mean per-class F1 over the classes where it is defined (some support or some predictions)."""
    den = 2 * true_pos + false_pos + false_neg
    f1 = np.divide(2 * true_pos, den, out=np.full(den.shape, np.nan), where=den > 0)
    return float(np.nanmean(f1)) if np.any(den > 0) else float("nan")


def multiclass_metrics(*, y_true: np.ndarray, y_prob: np.ndarray) -> MulticlassMetrics:
    """Accuracy, macro F1, log loss and per-class recall of labelled rows (labels: class indexes)."""
    p = np.asarray(y_prob, dtype=np.float64)
    p = p.reshape(-1, p.shape[-1]) if p.ndim else p.reshape(0, 0)
    y = np.asarray(y_true, dtype=np.float64).reshape(-1).astype(np.int64)
    n, k = p.shape
    if n == 0:
        nan = float("nan")
        return MulticlassMetrics(rows=0, accuracy=nan, macro_f1=nan, log_loss=nan, recall=(nan,) * k)
    if y.size != n or y.min() < 0 or y.max() >= k:
        raise ValueError(f"labels must be {n} class indexes in 0..{k - 1}")
    pred = np.argmax(p, axis=1)
    hit = pred == y
    support = np.bincount(y, minlength=k)[:k].astype(np.float64)
    predicted = np.bincount(pred, minlength=k)[:k].astype(np.float64)
    true_pos = np.bincount(y[hit], minlength=k)[:k].astype(np.float64)
    recall = np.divide(true_pos, support, out=np.full(k, np.nan), where=support > 0)
    truth = np.clip(p[np.arange(n), y], LOG_LOSS_EPS, 1.0)
    return MulticlassMetrics(
        rows=n,
        accuracy=float(hit.mean()),
        macro_f1=_macro_f1(true_pos, predicted - true_pos, support - true_pos),
        log_loss=float(-np.log(truth).mean()),
        recall=tuple(float(r) for r in recall),
    )


def reliability_table(y_prob: np.ndarray, y_true: np.ndarray, *, bins: int) -> dict[str, list[float]]:
    """Isotonic reliability table (mean prediction, fitted mean label) on prediction-quantile bins."""
    from scipy.optimize import isotonic_regression

    order = np.argsort(y_prob, kind="stable")
    p, y = y_prob[order], np.asarray(y_true, dtype=np.float64)[order]
    chunks = [c for c in np.array_split(np.arange(p.size), min(bins, max(p.size, 1))) if c.size]
    if not chunks:
        return {"mean_prediction": [], "mean_label": []}
    mean_y = [float(y[c].mean()) for c in chunks]
    fitted = isotonic_regression(mean_y, weights=[float(c.size) for c in chunks]).x
    return {"mean_prediction": [float(p[c].mean()) for c in chunks], "mean_label": [float(v) for v in fitted]}


def fit_multiclass_calibration(
    y_prob: np.ndarray, y_true: np.ndarray, *, bins: int = MULTICLASS_CALIBRATION_BINS
) -> dict[str, Any]:
    """Reliability tables: ``{"classes": K, "per_class": [table_0, ...], "confidence": table}``.

    ``per_class[k]`` maps class ``k``'s probability to the chance of class ``k`` (one-vs-rest);
    ``confidence`` maps the predicted class's calibrated, renormalised probability to the chance the
    prediction is right. Each table has the binary format (``mean_prediction``, ``mean_label``) read by
    :func:`calibrate`; rows with a NaN probability or label are left out.
    """
    p = np.asarray(y_prob, dtype=np.float64)
    y = np.asarray(y_true, dtype=np.float64).reshape(-1)
    ok = ~np.isnan(y) & ~np.isnan(p).any(axis=1)
    p, y = p[ok], y[ok]
    tables = [reliability_table(p[:, k], y == k, bins=bins) for k in range(p.shape[1])]
    out: dict[str, Any] = {"classes": int(p.shape[1]), "per_class": tables}
    pred = np.argmax(p, axis=1) if p.size else np.zeros(0, dtype=np.int64)
    top = calibrate_multiclass(p, out)[np.arange(pred.size), pred]
    out["confidence"] = reliability_table(top, pred == y, bins=bins)
    return out


def calibrate_multiclass(y_prob: np.ndarray, calibration: Mapping[str, Any] | None) -> np.ndarray:
    """Calibrated probability rows: each class through its table, then renormalised to sum to 1."""
    p = np.asarray(y_prob, dtype=np.float64)
    tables = (calibration or {}).get("per_class") or [None] * p.shape[1]
    if len(tables) != p.shape[1]:
        raise ValueError(f"calibration has {len(tables)} classes, predictions have {p.shape[1]}")
    c = np.column_stack([calibrate(p[:, k], t) for k, t in enumerate(tables)]) if p.shape[1] else p
    total = c.sum(axis=1, keepdims=True)
    return np.where(total > 0, c / np.where(total > 0, total, 1.0), np.clip(p, 0.0, 1.0))


def estimate_multiclass_metrics(
    *, y_prob: np.ndarray, calibration: Mapping[str, Any] | None
) -> dict[str, float]:
    """Confidence-based estimate without labels: ``{"rows", "accuracy", "macro_f1"}`` (module docstring)."""
    p = np.asarray(y_prob, dtype=np.float64)
    p = p[~np.isnan(p).any(axis=1)]
    n = p.shape[0]
    if n == 0:
        return {"rows": 0.0, "accuracy": float("nan"), "macro_f1": float("nan")}
    c = calibrate_multiclass(p, calibration)
    pred = np.argmax(p, axis=1)
    chosen = np.zeros(p.shape, dtype=bool)
    chosen[np.arange(n), pred] = True
    true_pos = np.where(chosen, c, 0.0).sum(axis=0)
    false_pos = np.where(chosen, 1.0 - c, 0.0).sum(axis=0)
    false_neg = np.where(chosen, 0.0, c).sum(axis=0)
    accuracy = float(calibrate(c[np.arange(n), pred], (calibration or {}).get("confidence")).mean())
    return {"rows": float(n), "accuracy": accuracy, "macro_f1": _macro_f1(true_pos, false_pos, false_neg)}


# ---------------------------------------------------------------- any task


_PER_CLASS = re.compile(r"^(recall)_(\d+)$")


def class_named(metrics: Mapping[str, Any], classes: Sequence[str]) -> dict[str, Any]:
    """``metrics`` with each per-class metric named by its class (``recall_0`` -> ``recall[low]``, the form of
    the report's ``prediction[low]``); a metric already named, or of a class index beyond ``classes``
    (a document stored before), is kept as it is."""
    out: dict[str, Any] = {}
    for key, value in metrics.items():
        found = _PER_CLASS.match(key)
        k = int(found.group(2)) if found else -1
        out[f"{found.group(1)}[{classes[k]}]" if found and k < len(classes) else key] = value
    return out


def metrics_for(
    task: Task, *, y_true: np.ndarray, predictions: np.ndarray, classes: Sequence[str] | None = None
) -> dict[str, float]:
    """Realised metrics of ``task`` as a flat dict with ``rows``; rows with a NaN label or prediction are
    left out (binary: probabilities ``[n]``; multi-class: ``[n, K]``, its per-class metrics named by
    ``classes`` when given (:func:`class_named`); regression: values ``[n]``)."""
    y = np.asarray(y_true, dtype=np.float64).reshape(-1)
    p = np.asarray(predictions, dtype=np.float64)
    if task is Task.MULTICLASS:
        p = p if p.ndim == 2 else p.reshape(y.size, -1)
        if p.shape[0] != y.size:
            raise ValueError(f"labels ({y.size}) and predictions ({p.shape[0]}) differ in length")
        ok = ~np.isnan(y) & ~np.isnan(p).any(axis=1)
        flat = multiclass_metrics(y_true=y[ok], y_prob=p[ok]).as_dict()
        return class_named(flat, classes) if classes else flat
    p = p.reshape(-1)
    if p.shape != y.shape:
        raise ValueError(f"labels {y.shape} and predictions {p.shape} differ in length")
    ok = ~np.isnan(y) & ~np.isnan(p)
    if task is Task.REGRESSION:
        return regression_metrics(y_true=y[ok], y_pred=p[ok]).as_dict()
    return classification_metrics(y_true=y[ok], y_prob=p[ok]).as_dict()


# ---------------------------------------------------------------- regression: direct loss estimation

LOSS_MODEL_FORMAT = "driftwarden.dle/1"
LOSS_MODEL_KNOTS = (0.0, 0.01, 0.03, 0.07, 0.15, 0.3, 0.5, 0.7, 0.85, 0.93, 0.97, 0.99, 1.0)
"""Reference quantiles used as knots of each numeric input and of the prediction (denser in the tails,
where a covariate shift takes the window)."""
LOSS_MODEL_CATEGORIES = 50  # most frequent categories of a categorical input kept as one-hot columns
LOSS_MODEL_RIDGE = 1.0  # ridge penalty on every coefficient but the intercept


def _knots(values: np.ndarray) -> list[float]:
    """Distinct quantiles :data:`LOSS_MODEL_KNOTS` of the present values (at least two, else none)."""
    x = values[~np.isnan(values)]
    if x.size == 0:
        return []
    knots = np.unique(np.quantile(x, LOSS_MODEL_KNOTS))
    return [float(v) for v in knots] if knots.size >= 2 else []


def _hat_basis(values: np.ndarray, knots: Sequence[float]) -> np.ndarray:
    """Piecewise-linear ("hat") basis on ``knots``, values clamped to their range; a last column flags NaN.

    Returns ``[n, len(knots) + 1]``; a missing value is all zeros but the flag.
    """
    k = np.asarray(knots, dtype=np.float64)
    missing = np.isnan(values)
    out = np.zeros((values.size, k.size + 1))
    out[:, -1] = missing
    if k.size < 2:
        return out
    x = np.clip(np.where(missing, k[0], values), k[0], k[-1])
    right = np.clip(np.searchsorted(k, x, side="right"), 1, k.size - 1)
    frac = (x - k[right - 1]) / (k[right] - k[right - 1])
    rows = np.flatnonzero(~missing)
    out[rows, right[rows] - 1] = 1.0 - frac[rows]
    out[rows, right[rows]] = frac[rows]
    return out


def _category_index(values: Any, categories: Sequence[str]) -> np.ndarray:
    """Index of each row's category in ``categories`` (``str(value)``), -1 for missing or unseen."""
    index = {c: i for i, c in enumerate(categories)}
    if isinstance(values, CodedColumn):
        lookup = np.array([index.get(str(c), -1) for c in values.categories.tolist()] + [-1], dtype=np.int64)
        return np.asarray(lookup[values.codes.astype(np.int64)])
    out = [index.get(str(v), -1) if v is not None else -1 for v in np.asarray(values).reshape(-1).tolist()]
    return np.asarray(out, dtype=np.int64)


def _top_categories(values: Any, limit: int = LOSS_MODEL_CATEGORIES) -> list[str]:
    """The ``limit`` most frequent present categories (ties by name), as ``str``."""
    from core.tabular import value_counts

    counts: dict[str, int] = {}
    for key, n in value_counts(values if isinstance(values, CodedColumn) else np.asarray(values)).items():
        if key is None or key == "" or (isinstance(key, float) and np.isnan(key)):
            continue
        counts[str(key)] = counts.get(str(key), 0) + n
    return [c for c, _ in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))[:limit]]


def _as_numeric(values: Any) -> np.ndarray:
    """A numeric column as float64 (NaN for missing)."""
    from core.tabular import as_float

    return as_float(values if isinstance(values, CodedColumn) else np.asarray(values))


def _design(columns: Mapping[str, Any], predictions: np.ndarray, model: Mapping[str, Any]) -> np.ndarray:
    """The loss model's design matrix: intercept, each input's columns in order, then the prediction's."""
    blocks = [np.ones((predictions.size, 1))]
    for spec in model["features"]:
        if spec["kind"] == "categorical":
            idx = _category_index(columns[spec["name"]], spec["categories"])
            onehot = np.zeros((predictions.size, len(spec["categories"])))
            seen = np.flatnonzero(idx >= 0)
            onehot[seen, idx[seen]] = 1.0
            blocks.append(onehot)
        else:
            blocks.append(_hat_basis(_as_numeric(columns[spec["name"]]), spec["knots"]))
    blocks.append(_hat_basis(predictions, model["prediction_knots"]))
    return np.hstack(blocks)


def _ridge(x: np.ndarray, targets: np.ndarray, penalty: float) -> np.ndarray:
    """Ridge least squares coefficients (one column per target), the intercept (column 0) unpenalised."""
    gram = x.T @ x
    reg = np.full(x.shape[1], penalty)
    reg[0] = 0.0
    gram[np.diag_indices_from(gram)] += reg
    solved, *_ = np.linalg.lstsq(gram, x.T @ targets, rcond=None)
    return np.asarray(solved)


def fit_loss_model(
    columns: Mapping[str, Any],
    predictions: np.ndarray,
    y_true: np.ndarray,
    *,
    features: Sequence[tuple[str, str]],
    penalty: float = LOSS_MODEL_RIDGE,
) -> dict[str, Any]:
    """Fit the direct-loss-estimation model on reference rows (JSON-serialisable; see module docstring).

    ``features`` are ``(name, kind)`` pairs, kind ``"numeric"`` or ``"categorical"``. Rows with a NaN
    prediction or label are left out. The dict holds ``format``, ``features`` (per input its ``name``,
    ``kind`` and ``knots`` or ``categories``), ``prediction_knots``, ``abs_error`` and ``squared_error``
    (coefficients over the design columns: intercept, inputs in order, prediction) and ``rows``.
    """
    p = np.asarray(predictions, dtype=np.float64).reshape(-1)
    y = np.asarray(y_true, dtype=np.float64).reshape(-1)
    ok = np.flatnonzero(~np.isnan(p) & ~np.isnan(y))
    specs: list[dict[str, Any]] = []
    for name, kind in features:
        col = columns[name]
        sub = col[ok] if isinstance(col, CodedColumn) else np.asarray(col)[ok]
        if kind == "categorical":
            specs.append({"name": name, "kind": "categorical", "categories": _top_categories(sub)})
        else:
            specs.append({"name": name, "kind": "numeric", "knots": _knots(_as_numeric(sub))})
    model: dict[str, Any] = {"format": LOSS_MODEL_FORMAT, "features": specs}
    model["prediction_knots"] = _knots(p[ok])
    sub_cols = {s["name"]: columns[s["name"]][ok] for s in specs}
    x = _design(sub_cols, p[ok], model)
    err = p[ok] - y[ok]
    targets = np.column_stack([np.abs(err), err**2])
    coef = _ridge(x, targets, penalty) if ok.size else np.zeros((x.shape[1], 2))
    model.update(
        abs_error=[float(v) for v in coef[:, 0]],
        squared_error=[float(v) for v in coef[:, 1]],
        rows=int(ok.size),
    )
    return model


def estimate_regression_metrics(
    *, columns: Mapping[str, Any], predictions: np.ndarray, model: Mapping[str, Any]
) -> dict[str, float]:
    """Direct loss estimate without labels: ``{"rows", "mae", "rmse"}`` of the window (NaN predictions left
    out; predicted losses below 0 count as 0)."""
    p = np.asarray(predictions, dtype=np.float64).reshape(-1)
    ok = np.flatnonzero(~np.isnan(p))
    if ok.size == 0:
        return {"rows": 0.0, "mae": float("nan"), "rmse": float("nan")}
    sub_cols = {s["name"]: columns[s["name"]][ok] for s in model["features"]}
    x = _design(sub_cols, p[ok], model)
    abs_err = np.clip(x @ np.asarray(model["abs_error"]), 0.0, None)
    sq_err = np.clip(x @ np.asarray(model["squared_error"]), 0.0, None)
    return {"rows": float(ok.size), "mae": float(abs_err.mean()), "rmse": float(np.sqrt(sq_err.mean()))}


def predicted_abs_errors(
    *, columns: Mapping[str, Any], predictions: np.ndarray, model: Mapping[str, Any]
) -> np.ndarray:
    """The loss model's predicted absolute error of each row (NaN where the prediction is; below 0: 0)."""
    p = np.asarray(predictions, dtype=np.float64).reshape(-1)
    out = np.full(p.size, np.nan)
    ok = np.flatnonzero(~np.isnan(p))
    if ok.size:
        sub_cols = {s["name"]: columns[s["name"]][ok] for s in model["features"]}
        out[ok] = np.clip(_design(sub_cols, p[ok], model) @ np.asarray(model["abs_error"]), 0.0, None)
    return out


def mean_design(
    model: Mapping[str, Any],
    *,
    rows: int,
    numeric: Mapping[str, tuple[np.ndarray, np.ndarray, int]],
    categorical: Mapping[str, Mapping[Any, int]],
    prediction: tuple[np.ndarray, np.ndarray, int],
) -> np.ndarray:
    """The loss model's design row averaged over a window known only by its histograms.

    The model is additive in its inputs, so the window's mean design row needs each input's own
    distribution, not the rows: a numeric input (and the prediction) as ``(points, counts, missing)``, a
    representative value per histogram cell with its count; a categorical input as counts per value.
    """
    n = float(max(rows, 1))
    blocks = [np.ones(1)]

    def hat_mean(cells: tuple[np.ndarray, np.ndarray, int], knots: Sequence[float]) -> np.ndarray:
        points, counts, missing = cells
        basis = _hat_basis(np.asarray(points, dtype=np.float64), knots)
        out = np.asarray(counts, dtype=np.float64) @ basis
        out[-1] = missing
        return out / n

    for spec in model["features"]:
        if spec["kind"] == "categorical":
            counts = categorical.get(spec["name"], {})
            blocks.append(np.array([counts.get(c, 0) for c in spec["categories"]], dtype=np.float64) / n)
        else:
            knots = spec["knots"]
            blocks.append(hat_mean(numeric.get(spec["name"], (np.zeros(0), np.zeros(0), 0)), knots))
    blocks.append(hat_mean(prediction, model["prediction_knots"]))
    return np.concatenate(blocks)


def estimate_regression_from_design(
    model: Mapping[str, Any], design: np.ndarray, *, rows: int
) -> dict[str, float]:
    """Direct loss estimate of a window from its mean design row (:func:`mean_design`): ``{"rows", "mae",
    "rmse"}``; the same as :func:`estimate_regression_metrics` on the rows while no row's predicted loss
    is below 0 (the rows' clip at 0 cannot be applied to a mean)."""
    if rows == 0:
        return {"rows": 0.0, "mae": float("nan"), "rmse": float("nan")}
    mae = max(float(design @ np.asarray(model["abs_error"])), 0.0)
    squared = max(float(design @ np.asarray(model["squared_error"])), 0.0)
    return {"rows": float(rows), "mae": mae, "rmse": float(np.sqrt(squared))}


def multiclass_from_counts(*, confusion: np.ndarray, log_loss_sum: float) -> dict[str, float]:
    """Realised multi-class metrics of labelled rows summarised by their confusion matrix ``[label,
    predicted]`` and summed log loss (the keys of :meth:`MulticlassMetrics.as_dict`)."""
    m = np.asarray(confusion, dtype=np.float64)
    n = float(m.sum())
    k = m.shape[0]
    if n == 0:
        nan = float("nan")
        return MulticlassMetrics(
            rows=0, accuracy=nan, macro_f1=nan, log_loss=nan, recall=(nan,) * k
        ).as_dict()
    true_pos = np.diag(m)
    support, predicted = m.sum(axis=1), m.sum(axis=0)
    recall = np.divide(true_pos, support, out=np.full(k, np.nan), where=support > 0)
    return MulticlassMetrics(
        rows=int(n),
        accuracy=float(true_pos.sum() / n),
        macro_f1=_macro_f1(true_pos, predicted - true_pos, support - true_pos),
        log_loss=log_loss_sum / n,
        recall=tuple(float(r) for r in recall),
    ).as_dict()


def multiclass_estimate_from_counts(
    *, rows: int, expected_correct: float, true_pos: np.ndarray, false_pos: np.ndarray, false_neg: np.ndarray
) -> dict[str, float]:
    """The confidence-based estimate (:func:`estimate_multiclass_metrics`) from its sums over a window."""
    if rows == 0:
        return {"rows": 0.0, "accuracy": float("nan"), "macro_f1": float("nan")}
    return {
        "rows": float(rows),
        "accuracy": expected_correct / rows,
        "macro_f1": _macro_f1(np.asarray(true_pos), np.asarray(false_pos), np.asarray(false_neg)),
    }
