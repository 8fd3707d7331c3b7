"""The reference profile: everything drift monitors compare a window against, without raw training data.

``build_reference_profile`` turns the training (or held-out) columns into a JSON-serialisable dict,
stored with each model version as ``profile.json``. Per numeric feature it keeps moments, range, a
1001-point quantile sketch (``method="inverted_cdf"``, so every quantile is an observed value), the
exact counts on the grid of distinct quantiles (see :mod:`monitors.binning`) and the decile bins used
by PSI and Jensen-Shannon. Per categorical feature it keeps the category counts. The model's
held-out output probabilities are profiled like a numeric feature under ``"prediction"``; with
labels, the reference performance and a calibration table for label-free estimation are kept too.

Per task (``schema.task``): binary, one probability per row, as above. Multi-class, a probability row
``[n, K]`` per row and labels as class indexes: ``"prediction"`` summarises the predicted class's
probability (the confidence), ``"classes"`` holds ``names`` (the schema's classes), ``probabilities`` (per
class name the numeric summary of its probability) and ``predicted`` (the categorical summary of the
predicted class names); ``"performance"`` is :func:`monitors.performance.multiclass_metrics` and
``"calibration"`` the one-vs-rest tables of :func:`monitors.performance.fit_multiclass_calibration`.
Regression, one value per row: ``"prediction"`` summarises the values, ``"performance"`` is
:func:`monitors.performance.regression_metrics` and ``"loss_model"`` the direct-loss-estimation model of
:func:`monitors.performance.fit_loss_model`. Keys a task does not use are not written (binary profiles
are unchanged).

With labels, every task also keeps ``"performance_spread"`` (else None): how much each realised metric
varies between consecutive chunks of the labelled reference rows (:func:`performance_spread`), from which
:func:`metric_sd` gives the sd expected of a window's metric against the reference value.

A PCA of the standardised numeric features (``"multivariate"``) lets joint shifts be detected. It is
cross-fitted: the axes are fitted on half the sampled rows and the reference error distribution comes
from the other half, so it is the distribution fresh rows of the same population have.

With a reference sample (``"sample"``) holding the model's answers, ``"surrogate"`` is a surrogate of those
answers (:func:`monitors.surrogate.fit_surrogate`), which attribution asks for a version served elsewhere.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any

import numpy as np

from core.tabular import CodedColumn, Column, as_float, value_counts
from monitors.binning import count_sorted
from monitors.reservoir import sample_texts
from monitors.rows import RowSample, sample_from_dict, uniform_positions
from registry.schema import FeatureKind, FeatureSpec, ModelSchema, Task

PROFILE_FORMAT = "driftwarden.profile/1"
N_QUANTILES = 1001  # quantile sketch size: F is known to within 1/1000 between grid points
N_BINS = 10  # reference-quantile (decile) bins for PSI and Jensen-Shannon
PREDICTION = "prediction"
MISSING_CATEGORY = None  # categorical missing values: None or ""
PROFILE_LEVELS = 256  # a categorical with more levels keeps its most frequent 255 and folds the rest:
OTHER_LEVELS = "(other levels)"  # ... into this one count (drift tests fold a window's other values into it)
PCA_MAX_ROWS = 200_000
PCA_VARIANCE = 0.9
CALIBRATION_BINS = 20
SPREAD_CHUNK_ROWS = 500  # labelled rows per chunk at least (fewer chunks when there are fewer rows)
SPREAD_MAX_CHUNKS = 50  # more chunks, a closer estimate of the sd (relative error ~ 1 / sqrt(2 (chunks - 1)))
SPREAD_MIN_CHUNKS = 5  # fewer chunks than this: no performance spread
REFERENCE_SAMPLE_ROWS = (
    5_000  # rows of the reference kept raw (``profile["sample"]``) for root-cause analysis
)
REFERENCE_SAMPLE_SEED = 0


def _cores() -> int:
    """The cores this process may run on."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


WORKERS = min(4, _cores())
"""Threads that summarise or count columns at once (each holds a sorted copy of the column it works on)."""


# ---------------------------------------------------------------- typed view


@dataclass(frozen=True)
class NumericProfile:
    """Reference summary of one numeric column."""

    name: str
    count: int
    missing: int
    mean: float
    std: float
    min: float
    max: float
    quantiles: np.ndarray  # N_QUANTILES values, non-decreasing
    grid: np.ndarray  # distinct quantiles
    grid_counts: np.ndarray  # 2 * len(grid) + 1 exact cell counts
    grid_sums: np.ndarray  # sum of the values per cell (empty when not stored)
    bin_cuts: np.ndarray  # interior decile cut points (a subset of the grid)
    bin_counts: np.ndarray  # len(bin_cuts) + 1
    observed_min: float | None = None
    observed_max: float | None = None
    allowed_min: float | None = None
    allowed_max: float | None = None
    allowed_chance: float | None = None  # the contract's chance per value of a legitimate value outside
    kind: FeatureKind = FeatureKind.NUMERIC

    @property
    def missing_rate(self) -> float:
        total = self.count + self.missing
        return self.missing / total if total else 0.0

    @property
    def scale(self) -> float:
        """Spread used to normalise distances: the std, else IQR/1.349, else 1."""
        if self.std > 0:
            return self.std
        q = self.quantiles
        iqr = float(q[int(0.75 * (len(q) - 1))] - q[int(0.25 * (len(q) - 1))]) if len(q) else 0.0
        return iqr / 1.349 if iqr > 0 else 1.0


@dataclass(frozen=True)
class CategoricalProfile:
    """Reference summary of one categorical column."""

    name: str
    count: int
    missing: int
    categories: dict[str, int]
    kind: FeatureKind = FeatureKind.CATEGORICAL

    @property
    def missing_rate(self) -> float:
        total = self.count + self.missing
        return self.missing / total if total else 0.0


@dataclass(frozen=True)
class PCAProfile:
    """PCA of standardised numeric features and the reference distribution of reconstruction error."""

    features: tuple[str, ...]
    center: np.ndarray
    scale: np.ndarray
    components: np.ndarray  # (n_components, n_features), orthonormal rows
    residual_components: np.ndarray  # the remaining principal axes: the error is the energy along them
    explained_variance: float
    error: NumericProfile


FeatureProfile = NumericProfile | CategoricalProfile


@dataclass(frozen=True)
class Profile:
    """A parsed ``profile.json``."""

    rows: int
    features: dict[str, FeatureProfile]
    prediction: NumericProfile | None = None
    performance: dict[str, float] | None = None
    calibration: dict[str, Any] | None = None  # binary: one reliability table; multi-class: "per_class"
    multivariate: PCAProfile | None = None
    extra: dict[str, Any] = field(default_factory=dict)  # every other key of the dict, as stored
    task: Task = Task.BINARY
    class_probabilities: dict[str, NumericProfile] = field(default_factory=dict)  # multi-class, by name
    predicted_class: CategoricalProfile | None = None  # multi-class: the predicted class names
    loss_model: dict[str, Any] | None = None  # regression: the direct-loss-estimation model
    performance_spread: dict[str, Any] | None = None  # sd of each metric across reference chunks
    sample_data: Mapping[str, Any] | None = field(default=None, repr=False, compare=False)  # as stored

    @cached_property
    def sample(self) -> RowSample | None:
        """The reference's row sample (:func:`reference_sample`), parsed on first use; None for a profile
        built before profiles kept one."""
        return None if self.sample_data is None else sample_from_dict(self.sample_data)

    @property
    def surrogate(self) -> dict[str, Any] | None:
        """The surrogate of the model's answers fitted on the reference sample (:mod:`monitors.surrogate`);
        None: a profile without a sample, or built before surrogates."""
        model = self.extra.get("surrogate")
        return model if isinstance(model, dict) else None


# ---------------------------------------------------------------- building


def quantile_positions(n: int, q: np.ndarray) -> np.ndarray:
    """Positions in ``n`` sorted values of the quantiles ``q`` by ``np.quantile(method="inverted_cdf")``.

    Parameters
    ----------
    n : int
        Number of values (at least 1).
    q : np.ndarray
        Probabilities in [0, 1].

    Returns
    -------
    np.ndarray
        Integer positions: the smallest ``i`` with ``(i + 1) / n >= q`` (numpy's rule, in its arithmetic), so
        ``sorted_values[positions]`` equals ``np.quantile(values, q, method="inverted_cdf")`` without
        partitioning the values again.
    """
    index = n * np.asarray(q, dtype=np.float64) - 1
    below = np.floor(index)
    positions = np.where(index - below == 0, below, below + 1).astype(np.intp)
    return np.clip(positions, 0, n - 1)


def numeric_summary(
    values: Column, *, name: str, n_quantiles: int = N_QUANTILES, n_bins: int = N_BINS
) -> dict[str, Any]:
    """Summary dict of one numeric column (NaN = missing); one sort of the values."""
    x = np.sort(as_float(values))  # NaN sorts last
    n_valid = int(np.searchsorted(x, np.nan, side="left")) if x.size and np.isnan(x[-1]) else x.size
    present = x[:n_valid]
    out: dict[str, Any] = {"kind": FeatureKind.NUMERIC.value, "name": name, "count": int(present.size)}
    out["missing"] = int(x.size - present.size)
    if present.size == 0:
        out.update(
            mean=0.0, std=0.0, min=None, max=None, quantiles=[], grid=[], grid_counts=[0], grid_sums=[0.0]
        )
        out.update(bin_cuts=[], bin_counts=[0])
        return out
    q = present[quantile_positions(present.size, np.linspace(0.0, 1.0, n_quantiles))]
    grid = np.unique(q)
    counts = count_sorted(present, grid)
    # decile cuts are taken from the sketch itself, so they are grid points
    cuts = np.unique(q[np.round(np.arange(1, n_bins) * (n_quantiles - 1) / n_bins).astype(np.int64)])
    cuts = cuts[cuts < grid[-1]]  # a cut at the maximum would leave an always-empty last bin
    bin_counts = np.diff(np.concatenate([[0], np.searchsorted(present, cuts, side="right"), [present.size]]))
    out.update(
        mean=float(present.mean()),
        std=float(present.std()),
        min=float(present[0]),
        max=float(present[-1]),
        quantiles=q.tolist(),
        grid=grid.tolist(),
        grid_counts=counts.cells.tolist(),
        grid_sums=counts.sums.tolist(),
        bin_cuts=cuts.tolist(),
        bin_counts=bin_counts.astype(int).tolist(),
    )
    return out


def categorical_summary(values: Column, *, name: str) -> dict[str, Any]:
    """Summary dict of one categorical column (None or "" = missing)."""
    counts = value_counts(values)
    missing = 0
    cats: dict[str, int] = {}
    for key, n in counts.items():
        if key is None or key == "" or (isinstance(key, float) and np.isnan(key)):
            missing += n
        else:
            cats[str(key)] = cats.get(str(key), 0) + n
    if len(cats) > PROFILE_LEVELS:  # a high-cardinality feature (an id): the profile stays bounded
        top = sorted(cats.items(), key=lambda kv: (-kv[1], kv[0]))[: PROFILE_LEVELS - 1]
        cats = {**dict(top), OTHER_LEVELS: sum(cats.values()) - sum(n for _, n in top)}
    return {
        "kind": FeatureKind.CATEGORICAL.value,
        "name": name,
        "count": int(sum(cats.values())),
        "missing": int(missing),
        "categories": dict(sorted(cats.items())),
    }


def _pca_summary(columns: Mapping[str, Column], names: list[str]) -> dict[str, Any] | None:
    """PCA of the standardised ``names`` with a held-out reference error distribution (None: too few rows).

    The sampled rows are cross-fitted in two folds (even and odd positions): a PCA (center, scale, axes) is
    fitted on each, and the reconstruction errors summarised are those of each fold under the OTHER fold's
    PCA, standardised as :func:`pca_errors` standardises a window's rows; the even fold's PCA is kept. Errors
    of the fitting rows would be biased low (the discarded axes are their own smallest-variance directions),
    so fresh rows would look drifted; both folds' held-out errors keep every sampled row in the distribution.
    """
    if len(names) < 2:
        return None
    rows = len(columns[names[0]])
    pick = np.linspace(0, rows - 1, PCA_MAX_ROWS).astype(np.int64) if rows > PCA_MAX_ROWS else slice(None)
    x = np.empty((min(rows, PCA_MAX_ROWS), len(names)), order="F")  # sampled rows first, one column a time
    for j, n in enumerate(names):
        x[:, j] = as_float(columns[n][pick])
    even, odd = np.ascontiguousarray(x[0::2]), np.ascontiguousarray(x[1::2])
    if odd.shape[0] < 2 * len(names):  # the smaller fold (odd has at most as many rows as even)
        return None
    kept = _fit_pca(even)
    other = _fit_pca(odd, k=kept.components.shape[0])  # as many axes kept: errors on one scale
    err = np.concatenate([_fold_errors(odd, kept), _fold_errors(even, other)])
    return {
        "features": names,
        "center": kept.center.tolist(),
        "scale": kept.scale.tolist(),
        "components": kept.components.tolist(),
        "residual_components": kept.residual_components.tolist(),
        "explained_variance": kept.explained_variance,
        "error": numeric_summary(err, name="pca_reconstruction_error"),
    }


@dataclass(frozen=True)
class _Fitted:
    """A PCA fitted on one fold: its standardisation, kept and discarded axes, explained variance."""

    center: np.ndarray
    scale: np.ndarray
    components: np.ndarray
    residual_components: np.ndarray
    explained_variance: float


def _fit_pca(rows: np.ndarray, *, k: int | None = None) -> _Fitted:
    """The principal axes of ``rows`` standardised (a missing value at the center); ``k`` kept axes, or as
    many as explain :data:`PCA_VARIANCE` of the variance (at most ``d - 1``)."""
    center = np.nan_to_num(np.nanmean(rows, axis=0))
    scale = np.nanstd(rows, axis=0)
    scale[~(scale > 0)] = 1.0
    z = np.nan_to_num((rows - center) / scale)
    # principal axes from the d x d scatter matrix (the right singular vectors of z), largest first
    eigenvalues, vectors = np.linalg.eigh(z.T @ z)
    order = np.argsort(eigenvalues)[::-1]
    energy = np.clip(eigenvalues[order], 0.0, None)
    vt = np.ascontiguousarray(vectors[:, order].T)
    var = energy / max(float(energy.sum()), 1e-300)
    d = rows.shape[1]
    if k is None:
        k = min(max(int(np.searchsorted(np.cumsum(var), PCA_VARIANCE) + 1), 1), d - 1)
    return _Fitted(center, scale, vt[:k], vt[k:], float(var[:k].sum()))


def _fold_errors(rows: np.ndarray, pca: _Fitted) -> np.ndarray:
    """The reconstruction errors of ``rows`` under a PCA fitted on other rows (as :func:`pca_errors`)."""
    z = np.nan_to_num((rows - pca.center) / pca.scale)
    return reconstruction_error(z, pca.residual_components)


def pca_errors(columns: Mapping[str, Column], pca: PCAProfile) -> np.ndarray:
    """Reconstruction error of each row of ``columns`` under the reference ``pca``.

    Each row is standardised with the reference center and scale, a missing value at the center (0), then
    measured by :func:`reconstruction_error`. The block is built transposed (a feature per row: contiguous
    copies), which is also the order the matrix product reads fastest.
    """
    rows = len(columns[pca.features[0]]) if pca.features else 0
    zt = np.empty((len(pca.features), rows))
    for j, name in enumerate(pca.features):
        zt[j] = as_float(columns[name])
    zt -= pca.center[:, None]
    zt /= pca.scale[:, None]
    np.copyto(zt, 0.0, where=np.isnan(zt))  # as np.nan_to_num, without its passes for the infinities
    if np.isinf(zt).any():
        np.nan_to_num(zt, copy=False)
    return reconstruction_error(zt.T, pca.residual_components)


def reconstruction_error(z: np.ndarray, residual_components: np.ndarray) -> np.ndarray:
    """Mean squared residual per row of standardised ``z`` after projecting on the kept components.

    With an orthonormal basis split into kept and ``residual_components`` (the discarded principal
    axes), the residual's squared norm is the energy along the discarded axes: ``||z R^T||^2``.
    """
    along = residual_components @ z.T  # (axes, rows)
    return np.asarray(np.einsum("ij,ij->j", along, along) / z.shape[1])


def _calibration(predictions: np.ndarray, labels: np.ndarray) -> dict[str, list[float]]:
    """Reliability table on prediction-quantile bins: mean prediction and mean label per bin."""
    order = np.argsort(predictions, kind="stable")
    p, y = predictions[order], labels[order].astype(np.float64)
    chunks = np.array_split(np.arange(p.size), min(CALIBRATION_BINS, max(p.size, 1)))
    mean_p = [float(p[c].mean()) for c in chunks if c.size]
    mean_y = [float(y[c].mean()) for c in chunks if c.size]
    # isotonic (pool adjacent violators) so the map is monotone
    from scipy.optimize import isotonic_regression

    weights = [float(c.size) for c in chunks if c.size]
    fitted = isotonic_regression(mean_y, weights=weights).x
    return {"mean_prediction": mean_p, "mean_label": [float(v) for v in fitted]}


def _sample_labels(labels: np.ndarray | None, index: np.ndarray) -> np.ndarray | None:
    """The sampled rows' labels as float64 (NaN: none); None without labels or with labels that are not
    numbers."""
    if labels is None:
        return None
    try:
        return np.asarray(np.asarray(labels).reshape(-1)[index], dtype=np.float64)
    except (TypeError, ValueError):
        return None


def reference_sample(
    columns: Mapping[str, Column],
    schema: ModelSchema,
    *,
    predictions: np.ndarray | None = None,
    labels: np.ndarray | None = None,
    rows: int = REFERENCE_SAMPLE_ROWS,
    seed: int = REFERENCE_SAMPLE_SEED,
) -> RowSample:
    """A uniform sample of at most ``rows`` of the reference's rows (:func:`monitors.rows.uniform_positions`,
    seeded): the schema's features, the model's answers (NaN without them) and the labels where given;
    ``population`` is the number of rows it is drawn from.

    ``predictions`` and ``labels`` must belong to the same rows as ``columns``."""
    n = max((len(columns[spec.name]) for spec in schema.features), default=0)
    if predictions is not None and len(predictions) != n:
        raise ValueError(f"{len(predictions)} predictions for {n} rows of features")
    if labels is not None and len(labels) != n:
        raise ValueError(f"{len(labels)} labels for {n} rows of features")
    index = uniform_positions(n, rows, seed=seed)
    sampled: dict[str, np.ndarray] = {}
    for spec in schema.features:
        values = columns[spec.name][index]
        numeric = spec.kind is FeatureKind.NUMERIC
        sampled[spec.name] = as_float(values).astype(np.float64) if numeric else sample_texts(values)
    answers: np.ndarray = (
        np.full(index.size, np.nan)
        if predictions is None
        else np.asarray(predictions, dtype=np.float64)[index]
    )
    if answers.ndim == 2 and answers.shape[1] == 1:  # a binary model's [n, 1] answers
        answers = answers.reshape(-1)
    return RowSample(
        columns=sampled,
        kinds={spec.name: spec.kind for spec in schema.features},
        predictions=answers,
        labels=_sample_labels(labels, index),
        population=n,
    )


def _own_sample(
    cols: Mapping[str, Column],
    schema: ModelSchema,
    *,
    predictions: np.ndarray | None,
    labels: np.ndarray | None,
) -> RowSample:
    """:func:`reference_sample` of the profiled rows; the features alone (answers NaN, no labels) when the
    predictions are not of those rows and the caller gave no sample of its own."""
    n = max((len(c) for c in cols.values()), default=0)
    if predictions is not None and len(predictions) != n:
        predictions, labels = None, None
    return reference_sample(cols, schema, predictions=predictions, labels=labels)


def build_reference_profile(
    columns: Mapping[str, Column],
    schema: ModelSchema,
    *,
    predictions: np.ndarray | None = None,
    labels: np.ndarray | None = None,
    sample: RowSample | None = None,
) -> dict[str, Any]:
    """Build the JSON-serialisable reference profile of ``columns`` under ``schema``.

    Text columns may be :class:`core.tabular.CodedColumn` (counted by their codes). The features and the
    PCA are summarised on up to :data:`WORKERS` threads (numpy sorts and reductions release the GIL), each
    on its own, so the profile does not depend on how many there are.

    ``"sample"`` keeps :func:`reference_sample` of ``columns`` (with ``predictions`` and ``labels``), or
    ``sample`` when given: the caller's sample of the rows its predictions belong to (training profiles the
    training rows but predicts the held-out ones).
    """
    for spec in schema.features:
        if spec.name not in columns:
            raise ValueError(f"feature {spec.name!r} of the schema is missing from the data")
    cols = {
        spec.name: c if isinstance(c := columns[spec.name], CodedColumn) else np.asarray(c)
        for spec in schema.features
    }
    numeric = [spec.name for spec in schema.features if spec.kind is FeatureKind.NUMERIC]

    def summary(spec: FeatureSpec) -> dict[str, Any]:
        if spec.kind is not FeatureKind.NUMERIC:
            return categorical_summary(cols[spec.name], name=spec.name)
        out = numeric_summary(cols[spec.name], name=spec.name)
        out.update(
            observed_min=spec.observed_min,
            observed_max=spec.observed_max,
            allowed_min=spec.allowed_min,
            allowed_max=spec.allowed_max,
            allowed_chance=spec.allowed_chance,
        )
        return out

    with ThreadPoolExecutor(max_workers=WORKERS, thread_name_prefix="profile") as pool:
        pca = pool.submit(_pca_summary, cols, numeric)  # the longest task: first
        summaries = pool.map(summary, schema.features)
        features = {spec.name: done for spec, done in zip(schema.features, summaries, strict=True)}
        multivariate = pca.result()
    out: dict[str, Any] = {
        "format": PROFILE_FORMAT,
        "rows": max((len(c) for c in cols.values()), default=0),
        "target": schema.target,
        "task": schema.task,
        "n_quantiles": N_QUANTILES,
        "n_bins": N_BINS,
        "features": features,
        "prediction": None,
        "performance": None,
        "calibration": None,
        "multivariate": multivariate,
        "performance_spread": None,
        "sample": (sample or _own_sample(cols, schema, predictions=predictions, labels=labels)).as_dict(),
    }
    if predictions is not None and schema.kind is Task.MULTICLASS:
        out.update(_multiclass_outputs(predictions, labels, schema.classes))
    elif predictions is not None and schema.kind is Task.REGRESSION:
        out.update(_regression_outputs(cols, schema, predictions, labels))
    elif predictions is not None:
        p = np.asarray(predictions, dtype=np.float64).reshape(-1)
        out["prediction"] = numeric_summary(p, name=PREDICTION)
        if labels is not None:
            from monitors.performance import classification_metrics

            y = np.asarray(labels).reshape(-1)
            if y.shape != p.shape:
                raise ValueError(f"labels {y.shape} and predictions {p.shape} differ in length")
            ok = ~np.isnan(p)
            out["performance"] = classification_metrics(y_true=y[ok], y_prob=p[ok]).as_dict()
            out["calibration"] = _calibration(p[ok], y[ok])
            out["performance_spread"] = performance_spread(Task.BINARY, y_true=y, predictions=p)
    _add_surrogate(out, schema)
    return out


def _add_surrogate(profile: dict[str, Any], schema: ModelSchema) -> None:
    """Fit the surrogate of the model's answers on the profile's reference sample (monitors/surrogate.py),
    when it has one with predictions: ``profile["surrogate"]``."""
    from monitors.surrogate import profile_surrogate

    surrogate = profile_surrogate(profile, schema.kind)
    if surrogate is not None:
        profile["surrogate"] = surrogate


def _multiclass_outputs(
    predictions: np.ndarray, labels: np.ndarray | None, classes: tuple[str, ...]
) -> dict[str, Any]:
    """The multi-class profile keys: confidence, per-class summaries, performance and calibration."""
    from monitors.performance import fit_multiclass_calibration, metrics_for

    p = np.asarray(predictions, dtype=np.float64)
    if p.ndim != 2:
        raise ValueError(f"multi-class predictions must be [rows, classes], got shape {p.shape}")
    names = list(classes) or [str(k) for k in range(p.shape[1])]
    if len(names) != p.shape[1]:
        raise ValueError(f"predictions have {p.shape[1]} classes, the schema {len(names)}")
    ok = np.asarray(~np.isnan(p).any(axis=1))
    confidence = np.where(ok, np.max(np.where(ok[:, None], p, 0.0), axis=1), np.nan)
    predicted = np.array(names, dtype=object)[np.argmax(np.where(ok[:, None], p, 0.0), axis=1)]
    predicted[~ok] = None
    out: dict[str, Any] = {
        "prediction": numeric_summary(confidence, name=PREDICTION),
        "classes": {
            "names": names,
            "probabilities": {
                n: numeric_summary(p[:, k], name=f"{PREDICTION}[{n}]") for k, n in enumerate(names)
            },
            "predicted": categorical_summary(predicted, name="predicted_class"),
        },
    }
    if labels is not None:
        y = np.asarray(labels, dtype=np.float64).reshape(-1)
        if y.size != p.shape[0]:
            raise ValueError(f"labels ({y.size}) and predictions ({p.shape[0]}) differ in length")
        out["performance"] = metrics_for(Task.MULTICLASS, y_true=y, predictions=p, classes=names)
        out["calibration"] = fit_multiclass_calibration(p, y)
        out["performance_spread"] = performance_spread(Task.MULTICLASS, y_true=y, predictions=p)
    return out


def _regression_outputs(
    cols: Mapping[str, Column], schema: ModelSchema, predictions: np.ndarray, labels: np.ndarray | None
) -> dict[str, Any]:
    """The regression profile keys: the predicted values, and with labels performance and the loss model."""
    from monitors.performance import fit_loss_model, metrics_for

    p = np.asarray(predictions, dtype=np.float64).reshape(-1)
    out: dict[str, Any] = {"prediction": numeric_summary(p, name=PREDICTION)}
    if labels is not None:
        y = np.asarray(labels, dtype=np.float64).reshape(-1)
        out["performance"] = metrics_for(Task.REGRESSION, y_true=y, predictions=p)
        out["performance_spread"] = performance_spread(Task.REGRESSION, y_true=y, predictions=p)
        features = [(spec.name, spec.kind.value) for spec in schema.features]
        out["loss_model"] = fit_loss_model(cols, p, y, features=features)
    return out


def performance_spread(task: Task, *, y_true: np.ndarray, predictions: np.ndarray) -> dict[str, Any] | None:
    """Sample sd of each realised metric across consecutive equal chunks of the labelled reference rows.

    The labelled rows (label and prediction not NaN, in their order) are cut into ``chunks =
    min(SPREAD_MAX_CHUNKS, labelled_rows // SPREAD_CHUNK_ROWS)`` chunks of ``chunk_rows`` rows (the remainder
    dropped), each measured by :func:`monitors.performance.metrics_for`. Returns ``{"chunk_rows", "chunks",
    "labelled_rows", "sd": {metric: sd}}`` (every metric but ``rows``, less those NaN in some chunk), or None
    with fewer than :data:`SPREAD_MIN_CHUNKS` chunks or labels that are not numbers.
    """
    from monitors.performance import metrics_for

    try:
        y = np.asarray(y_true, dtype=np.float64).reshape(-1)
    except (TypeError, ValueError):
        return None
    p = np.asarray(predictions, dtype=np.float64)
    if task is not Task.MULTICLASS:
        p = p.reshape(-1)
    elif p.ndim != 2:
        p = p.reshape(y.size, -1)
    if p.shape[0] != y.size:
        raise ValueError(f"labels ({y.size}) and predictions ({p.shape[0]}) differ in length")
    ok = ~np.isnan(y) & ~(np.isnan(p).any(axis=1) if p.ndim == 2 else np.isnan(p))
    y, p = y[ok], p[ok]
    chunks = min(SPREAD_MAX_CHUNKS, y.size // SPREAD_CHUNK_ROWS)
    if chunks < SPREAD_MIN_CHUNKS:
        return None
    size = y.size // chunks
    per_chunk = [
        metrics_for(task, y_true=y[i * size : (i + 1) * size], predictions=p[i * size : (i + 1) * size])
        for i in range(chunks)
    ]
    sd: dict[str, float] = {}
    for name in per_chunk[0]:
        values = np.array([float(m.get(name, math.nan)) for m in per_chunk])
        if name != "rows" and not np.isnan(values).any():
            sd[name] = float(np.std(values, ddof=1))
    return {"chunk_rows": int(size), "chunks": int(chunks), "labelled_rows": int(y.size), "sd": sd}


def metric_sd(spread: Mapping[str, Any] | None, metric: str, *, rows: int) -> float | None:
    """Expected sd of a window's ``metric`` (``rows`` labelled rows) minus the reference value; None: unknown.

    With ``s`` the sd across reference chunks of ``chunk_rows`` rows, the window's own variance is
    ``s^2 chunk_rows / rows`` and the reference value's ``s^2 chunk_rows / labelled_rows``; the result is the
    root of their sum.
    """
    if spread is None or rows <= 0:
        return None
    sd = (spread.get("sd") or {}).get(metric)
    labelled = int(spread.get("labelled_rows") or 0)
    if sd is None or labelled <= 0:
        return None
    variance = float(sd) ** 2 * int(spread["chunk_rows"])
    return math.sqrt(variance / rows + variance / labelled)


# ---------------------------------------------------------------- reading


def _arr(values: Any) -> np.ndarray:
    return np.asarray(values if values is not None else [], dtype=np.float64)


def _numeric_from_dict(d: Mapping[str, Any]) -> NumericProfile:
    return NumericProfile(
        name=str(d["name"]),
        count=int(d["count"]),
        missing=int(d["missing"]),
        mean=float(d["mean"]),
        std=float(d["std"]),
        min=float(d["min"]) if d.get("min") is not None else float("nan"),
        max=float(d["max"]) if d.get("max") is not None else float("nan"),
        quantiles=_arr(d["quantiles"]),
        grid=_arr(d["grid"]),
        grid_counts=np.asarray(d["grid_counts"], dtype=np.int64),
        grid_sums=_arr(d.get("grid_sums")),
        bin_cuts=_arr(d["bin_cuts"]),
        bin_counts=np.asarray(d["bin_counts"], dtype=np.int64),
        observed_min=d.get("observed_min"),
        observed_max=d.get("observed_max"),
        allowed_min=d.get("allowed_min"),
        allowed_max=d.get("allowed_max"),
        allowed_chance=d.get("allowed_chance"),
    )


def _feature_from_dict(d: Mapping[str, Any]) -> FeatureProfile:
    if FeatureKind(d["kind"]) is FeatureKind.NUMERIC:
        return _numeric_from_dict(d)
    return _categorical_from_dict(d)


def _categorical_from_dict(d: Mapping[str, Any]) -> CategoricalProfile:
    return CategoricalProfile(
        name=str(d["name"]),
        count=int(d["count"]),
        missing=int(d["missing"]),
        categories={str(k): int(v) for k, v in d["categories"].items()},
    )


def profile_from_dict(data: Mapping[str, Any]) -> Profile:
    """Parse a profile dict (as built by :func:`build_reference_profile`)."""
    if data.get("format") != PROFILE_FORMAT:
        raise ValueError(f"unsupported profile format {data.get('format')!r} (expected {PROFILE_FORMAT!r})")
    mv = data.get("multivariate")
    pca = None
    if mv:
        pca = PCAProfile(
            features=tuple(mv["features"]),
            center=_arr(mv["center"]),
            scale=_arr(mv["scale"]),
            components=np.asarray(mv["components"], dtype=np.float64),
            residual_components=np.asarray(mv["residual_components"], dtype=np.float64),
            explained_variance=float(mv["explained_variance"]),
            error=_numeric_from_dict(mv["error"]),
        )
    known = {
        "format",
        "rows",
        "features",
        "prediction",
        "performance",
        "calibration",
        "multivariate",
        "performance_spread",
        "sample",
    }
    classes = data.get("classes") or {}
    predicted = classes.get("predicted")
    return Profile(
        rows=int(data["rows"]),
        features={name: _feature_from_dict(d) for name, d in data["features"].items()},
        prediction=_numeric_from_dict(data["prediction"]) if data.get("prediction") else None,
        performance=data.get("performance"),
        calibration=data.get("calibration"),
        multivariate=pca,
        extra={k: v for k, v in data.items() if k not in known},
        task=Task.parse(str(data.get("task") or Task.BINARY.value)),
        class_probabilities={
            n: _numeric_from_dict(d) for n, d in (classes.get("probabilities") or {}).items()
        },
        predicted_class=_categorical_from_dict(predicted) if predicted else None,
        loss_model=data.get("loss_model"),
        performance_spread=data.get("performance_spread"),
        sample_data=data.get("sample"),
    )


def write_profile(profile: Mapping[str, Any], path: str | Path) -> Path:
    """Write a profile dict as JSON."""
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_text(json.dumps(profile, allow_nan=False, separators=(",", ":")))
    return p


def read_profile(path: str | Path) -> Profile:
    """Read and parse a ``profile.json``."""
    return profile_from_dict(json.loads(Path(path).read_text()))
