"""Weak slices (pure): where the model is worst relative to its own overall figure, on one or two features.

A slice is one value of a feature or a pair of values of two features: a categorical level (the
:data:`MAX_LEVELS` most frequent levels of the sample; the rest are not searched) or a numeric quantile bin
(:data:`NUMERIC_BINS` bins of the sample's quantiles, ``low <= x < high``; a feature with at most that many
distinct values has one bin per value). Missing values belong to no slice.

Each row carries a loss and a slice's value is its mean loss:

- **labels** (``source`` "labels", at least :data:`MIN_LABELLED` labelled rows and ``min_rows``): a binary
  model's error at the threshold and a multi-class model's error of the argmax (``metric`` "error_rate"),
  a regression's absolute error ("abs_error"), on the labelled rows;
- **estimated** (``source`` "estimated", otherwise): a binary model's chance that its thresholded answer is
  wrong, from the reference calibration (:func:`monitors.performance.calibrate`), a multi-class model's
  1 - the calibrated probability of its predicted class (:func:`monitors.performance.calibrate_multiclass`),
  both "error_rate"; a regression's absolute error predicted by the reference's loss model (DLE,
  :func:`monitors.performance.predicted_abs_errors`), "abs_error".

Every slice with at least ``min_rows`` rows is tried (``tried``); its bounds hold at ``1 - level / tried``
(Bonferroni, two-sided): Wilson's interval for an error rate (a mean chance of error has the variance of a
0/1 error with that mean), the normal interval of the mean with the sample's sd for an absolute error. A
slice is ``significant`` when its lower bound is above the overall value; a pair of values is kept only when
it is worse than both its one-feature parents, and is significant only when its lower bound is above the
worse parent's value too (the pair must add something). The top slices are the significant ones by
``gap`` (slice minus overall), then the others by gap. The group-bys are ``np.bincount`` over codes.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from scipy.special import ndtri

from monitors.performance import calibrate, calibrate_multiclass, predicted_abs_errors
from monitors.profile import Profile
from monitors.rows import RowSample, category_codes
from registry.schema import FeatureKind, Task

MAX_LEVELS = 20  # most frequent levels of a categorical feature searched
NUMERIC_BINS = 5  # quantile bins of a numeric feature (quintiles)
MIN_LABELLED = 200  # fewer labelled rows: the estimated loss
TOP = 5  # slices reported
DIGITS = 6


@dataclass(frozen=True)
class Losses:
    """The per-row loss a search averages: ``values`` (NaN: the row is left out), what it is and where it
    comes from, and whether it lies in [0, 1] (Wilson bounds) or not (normal bounds)."""

    values: np.ndarray
    metric: str
    source: str  # "labels" | "estimated"
    rate: bool


@dataclass(frozen=True)
class _Feature:
    """One feature coded for the group-bys: ``codes`` (-1: in no slice) and each code's condition."""

    name: str
    codes: np.ndarray
    conditions: list[dict[str, Any]]


@dataclass(frozen=True)
class Found:
    """A search's report (the ``weak_slices`` shape) and the row mask of each reported slice."""

    report: dict[str, Any]
    masks: list[np.ndarray]


def realised_losses(
    *, task: Task, predictions: np.ndarray, labels: np.ndarray, threshold: float = 0.5
) -> Losses:
    """Each row's loss against its label: error rate (binary at ``threshold``, multi-class argmax), or a
    regression's absolute error; NaN where the label or the prediction is missing."""
    y = np.asarray(labels, dtype=np.float64)
    p = np.asarray(predictions, dtype=np.float64)
    if task is Task.REGRESSION:
        return Losses(np.abs(p.reshape(-1) - y), "abs_error", "labels", rate=False)
    if task is Task.MULTICLASS:
        bad = np.isnan(p).any(axis=1) | np.isnan(y)
        wrong = (np.argmax(np.nan_to_num(p), axis=1) != y).astype(np.float64)
    else:
        bad = np.isnan(p) | np.isnan(y)
        wrong = ((p >= threshold) != (y > 0.5)).astype(np.float64)
    return Losses(np.where(bad, np.nan, wrong), "error_rate", "labels", rate=True)


def estimated_losses(*, sample: RowSample, profile: Profile, threshold: float = 0.5) -> Losses | None:
    """Each row's expected loss without labels (module docstring); None when the profile cannot estimate it
    (a regression without a loss model)."""
    p = np.asarray(sample.predictions, dtype=np.float64)
    if profile.task is Task.REGRESSION:
        if not profile.loss_model:
            return None
        return Losses(
            predicted_abs_errors(columns=sample.columns, predictions=p, model=profile.loss_model),
            "abs_error",
            "estimated",
            rate=False,
        )
    if profile.task is Task.MULTICLASS:
        if p.ndim != 2:  # no class probabilities (a comparison of the features only)
            return None
        bad = np.isnan(p).any(axis=1)
        c = calibrate_multiclass(np.nan_to_num(p), profile.calibration)
        top = c[np.arange(p.shape[0]), np.argmax(np.nan_to_num(p), axis=1)]
        return Losses(np.where(bad, np.nan, 1.0 - top), "error_rate", "estimated", rate=True)
    c = calibrate(np.nan_to_num(p), profile.calibration)
    wrong = np.where(p >= threshold, 1.0 - c, c)
    return Losses(np.where(np.isnan(p), np.nan, wrong), "error_rate", "estimated", rate=True)


def _levels(name: str, values: np.ndarray) -> _Feature:
    """A categorical feature coded by its :data:`MAX_LEVELS` most frequent levels ("" and None: missing)."""
    codes, uniq = category_codes(values)
    counts = np.bincount(codes[codes >= 0], minlength=uniq.size)
    keep = np.argsort(-counts, kind="stable")[: min(MAX_LEVELS, int(np.count_nonzero(counts > 0)))]
    recode = np.full(uniq.size + 1, -1, dtype=np.int64)  # the last: missing (code -1)
    recode[keep] = np.arange(keep.size)
    conditions = [{"feature": name, "value": str(uniq[k])} for k in keep]
    return _Feature(name, recode[codes], conditions)


def _bins(name: str, values: np.ndarray) -> _Feature:
    """A numeric feature coded by quantile bins ``low <= x < high`` (the top edge just above the maximum)."""
    x = np.asarray(values, dtype=np.float64)
    ok = np.isfinite(x)
    if not ok.any():
        return _Feature(name, np.full(x.size, -1, dtype=np.int64), [])
    uniq = np.unique(x[ok])
    if uniq.size <= NUMERIC_BINS:
        edges = uniq
    else:
        edges = np.unique(np.quantile(x[ok], np.linspace(0.0, 1.0, NUMERIC_BINS + 1)))[:-1]
    edges = np.r_[edges, np.nextafter(uniq[-1], math.inf)]
    codes = np.searchsorted(edges, np.where(ok, x, -math.inf), side="right") - 1
    codes = np.where(ok & (codes >= 0) & (codes < edges.size - 1), codes, -1).astype(np.int64)
    conditions = [
        {"feature": name, "low": float(edges[i]), "high": float(edges[i + 1])} for i in range(edges.size - 1)
    ]
    return _Feature(name, codes, conditions)


def _coded(columns: Mapping[str, np.ndarray], kinds: Mapping[str, FeatureKind]) -> list[_Feature]:
    """The searchable features: each with at least two slices."""
    found = []
    for name, kind in kinds.items():
        if name not in columns:
            continue
        f = _levels(name, columns[name]) if kind is FeatureKind.CATEGORICAL else _bins(name, columns[name])
        if len(f.conditions) >= 2:
            found.append(f)
    return found


def _bounds(
    mean: np.ndarray, sd: np.ndarray, n: np.ndarray, *, z: float, rate: bool
) -> tuple[np.ndarray, np.ndarray]:
    """Two-sided bounds of each slice's mean: Wilson's for a rate, else the normal interval."""
    if rate:
        m = np.clip(mean, 0.0, 1.0)
        z2n = z * z / n
        centre = (m + z2n / 2.0) / (1.0 + z2n)
        half = z / (1.0 + z2n) * np.sqrt(m * (1.0 - m) / n + z2n / (4.0 * n))
        return centre - half, centre + half
    half = z * sd / np.sqrt(n)
    return mean - half, mean + half


def _condition_text(c: Mapping[str, Any]) -> str:
    if "value" in c:
        return f"{c['feature']}={c['value']}"
    return f"{c['feature']} in [{c['low']:.4g}, {c['high']:.4g})"


def condition_mask(columns: Mapping[str, np.ndarray], conditions: Sequence[Mapping[str, Any]]) -> np.ndarray:
    """The rows of ``columns`` inside a slice (its ``conditions``: ``value``, or ``low <= x < high``)."""
    mask: np.ndarray | None = None
    for c in conditions:
        col = columns[c["feature"]]
        if "value" in c:
            hit = np.asarray(col, dtype=object) == c["value"]
        else:
            x = np.asarray(col, dtype=np.float64)
            with np.errstate(invalid="ignore"):
                hit = (x >= c["low"]) & (x < c["high"])
        mask = hit if mask is None else mask & hit
    return np.zeros(0, dtype=bool) if mask is None else np.asarray(mask, dtype=bool)


def _groups(codes: np.ndarray, loss: np.ndarray, size: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Rows, mean and sd of the loss per code (codes -1 left out)."""
    ok = codes >= 0
    c, v = codes[ok], loss[ok]
    n = np.bincount(c, minlength=size).astype(np.float64)
    s = np.bincount(c, weights=v, minlength=size)
    s2 = np.bincount(c, weights=v * v, minlength=size)
    with np.errstate(invalid="ignore", divide="ignore"):
        mean = s / n
        var = np.clip(s2 / n - mean * mean, 0.0, None) * n / np.maximum(n - 1.0, 1.0)
    return n, mean, np.sqrt(var)


Cell = tuple[tuple[int, ...], list[dict[str, Any]], float, float, float]
"""A slice tried: its key ((feature, code) or two of them), conditions, rows, mean and sd of the loss."""


def _cells(features: Sequence[_Feature], loss: np.ndarray, min_rows: int) -> list[Cell]:
    """Every slice of one feature, then of two, with at least ``min_rows`` rows (``np.bincount`` on the
    combined codes)."""
    cells: list[Cell] = []
    for i, f in enumerate(features):
        n, mean, sd = _groups(f.codes, loss, len(f.conditions))
        for k in np.flatnonzero(n >= min_rows):
            cells.append(((i, int(k)), [f.conditions[k]], float(n[k]), float(mean[k]), float(sd[k])))
    for i, j in itertools.combinations(range(len(features)), 2):
        fa, fb = features[i], features[j]
        width = len(fb.conditions)
        codes = np.where((fa.codes >= 0) & (fb.codes >= 0), fa.codes * width + fb.codes, -1)
        n, mean, sd = _groups(codes, loss, len(fa.conditions) * width)
        for k in np.flatnonzero(n >= min_rows):
            a, b = divmod(int(k), width)
            conditions = [fa.conditions[a], fb.conditions[b]]
            cells.append(((i, a, j, b), conditions, float(n[k]), float(mean[k]), float(sd[k])))
    return cells


def _ranked(cells: Sequence[Cell], lower: np.ndarray, overall: float) -> list[tuple[bool, float, int]]:
    """(significant, gap, index) of the slices worth reporting, significant first, then by gap; a pair only
    when worse than both its parents, significant only when its lower bound is above them too."""
    single = {key: value for key, _, _, value, _ in cells if len(key) == 2}
    ranked: list[tuple[bool, float, int]] = []
    for idx, (key, _, _, value, _) in enumerate(cells):
        floor = overall
        if len(key) == 4:
            parents = max(single.get((key[0], key[1]), -math.inf), single.get((key[2], key[3]), -math.inf))
            if not value > parents:
                continue  # the pair adds nothing to its one-feature parents
            floor = max(floor, parents)
        ranked.append((bool(lower[idx] > floor), value - overall, idx))
    ranked.sort(key=lambda r: (not r[0], -r[1]))
    return ranked


def search(
    *,
    columns: Mapping[str, np.ndarray],
    kinds: Mapping[str, FeatureKind],
    losses: Losses,
    level: float,
    min_rows: int,
    top: int = TOP,
) -> Found | None:
    """The weak slices of one or two features by ``losses`` (module docstring); None without a row to
    search. ``level``: the chance that any slice is called significant by chance, in (0, 1)."""
    if not 0.0 < level < 1.0:
        raise ValueError(f"level must lie in (0, 1), not {level}")
    if min_rows < 1:
        raise ValueError(f"min_rows must be at least 1, not {min_rows}")
    keep = ~np.isnan(losses.values)
    if not keep.any():
        return None
    loss = losses.values[keep]
    features = _coded({k: np.asarray(v)[keep] for k, v in columns.items() if k in kinds}, kinds)
    overall = float(loss.mean())
    cells = _cells(features, loss, min_rows)
    if not cells:
        return Found(_report(losses, overall, min_rows, 0, level, []), [])
    z = float(-ndtri(level / len(cells) / 2.0))  # the normal quantile; scipy.stats loads slowly
    rows, mean, sd = (np.array([c[k] for c in cells]) for k in (2, 3, 4))
    lower, upper = _bounds(mean, sd, rows, z=z, rate=losses.rate)
    slices, masks = [], []
    for significant, gap, idx in _ranked(cells, lower, overall)[:top]:
        key, conditions, count, value, _ = cells[idx]
        masks.append(_expand(_mask(features, key), keep))
        slices.append(
            {
                "features": [c["feature"] for c in conditions],
                "slice": " & ".join(_condition_text(c) for c in conditions),
                "conditions": conditions,
                "rows": int(count),
                "value": round(value, DIGITS),
                "lower": round(float(lower[idx]), DIGITS),
                "upper": round(float(upper[idx]), DIGITS),
                "gap": round(gap, DIGITS),
                "significant": significant,
            }
        )
    return Found(_report(losses, overall, min_rows, len(cells), level, slices), masks)


def _mask(features: Sequence[_Feature], key: tuple[int, ...]) -> np.ndarray:
    """The rows (of the searched rows) of the slice ``key``: (feature, code) or two of them."""
    mask = features[key[0]].codes == key[1]
    if len(key) == 4:
        mask &= features[key[2]].codes == key[3]
    return mask


def _expand(mask: np.ndarray, keep: np.ndarray) -> np.ndarray:
    """A mask of the searched rows as a mask of every row."""
    full = np.zeros(keep.size, dtype=bool)
    full[np.flatnonzero(keep)[mask]] = True
    return full


def _report(
    losses: Losses, overall: float, min_rows: int, tried: int, level: float, slices: list[dict[str, Any]]
) -> dict[str, Any]:
    return {
        "source": losses.source,
        "metric": losses.metric,
        "overall": round(overall, DIGITS),
        "min_rows": int(min_rows),
        "tried": int(tried),
        "level": float(level),
        "slices": slices,
    }


def row_losses(
    *, sample: RowSample, profile: Profile, min_rows: int, threshold: float = 0.5
) -> Losses | None:
    """The realised losses when the sample has enough labelled rows, else the estimated ones."""
    if sample.labels is not None and sample.labelled >= max(MIN_LABELLED, min_rows):
        return realised_losses(
            task=profile.task, predictions=sample.predictions, labels=sample.labels, threshold=threshold
        )
    return estimated_losses(sample=sample, profile=profile, threshold=threshold)


def weak_slices(
    *,
    sample: RowSample,
    profile: Profile,
    level: float,
    min_rows: int,
    threshold: float = 0.5,
    top: int = TOP,
) -> dict[str, Any] | None:
    """The ``weak_slices`` report of a sample (module docstring); None without rows or a loss to average."""
    if sample.rows == 0:
        return None
    losses = row_losses(sample=sample, profile=profile, min_rows=min_rows, threshold=threshold)
    if losses is None:
        return None
    found = search(
        columns=sample.columns, kinds=sample.kinds, losses=losses, level=level, min_rows=min_rows, top=top
    )
    return None if found is None else found.report
