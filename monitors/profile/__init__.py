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

The package by subject: ``profiles.py`` (the typed view), ``summaries.py`` (a column summarised),
``pca.py`` (the multivariate summary), ``samples.py`` (the reference's row sample), ``outputs.py`` (the
model's answers and the spread of its metrics), ``documents.py`` (``profile.json`` parsed, written and
read); :func:`build_reference_profile` here puts them together.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import numpy as np

from core.tabular import CodedColumn, Column, as_coded
from monitors.profile.documents import (
    categorical_from_dict,
    numeric_from_dict,
    profile_from_dict,
    profile_json,
    read_profile,
    write_profile,
)
from monitors.profile.held import HeldRows, taker
from monitors.profile.outputs import metric_sd, multiclass_outputs, performance_spread, regression_outputs
from monitors.profile.pca import pca_errors, pca_summary, reconstruction_error
from monitors.profile.profiles import (
    MISSING_CATEGORY,
    N_BINS,
    N_QUANTILES,
    OTHER_LEVELS,
    PREDICTION,
    PROFILE_FORMAT,
    PROFILE_LEVELS,
    CategoricalProfile,
    FeatureProfile,
    NumericProfile,
    PCAProfile,
    Profile,
)
from monitors.profile.samples import (
    REFERENCE_SAMPLE_ROWS,
    REFERENCE_SAMPLE_SEED,
    own_sample,
    reference_sample,
)
from monitors.profile.summaries import (
    calibration_table,
    categorical_summary,
    numeric_summary,
    quantile_positions,
)
from monitors.rows import RowSample
from registry.schema import FeatureKind, FeatureSpec, ModelSchema, Task


def _cores() -> int:
    """The cores this process may run on."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


WORKERS = min(4, _cores())
"""Threads that summarise or count columns at once (each holds a sorted copy of the column it works on)."""


def build_reference_profile(
    columns: Mapping[str, Column],
    schema: ModelSchema,
    *,
    predictions: np.ndarray | None = None,
    labels: np.ndarray | None = None,
    sample: RowSample | None = None,
    summaries: Mapping[str, dict[str, Any]] | None = None,
    held: HeldRows | None = None,
    meanwhile: Callable[[], None] | None = None,
) -> dict[str, Any]:
    """Build the JSON-serialisable reference profile of ``columns`` under ``schema``.

    Text columns may be :class:`core.tabular.CodedColumn` (counted by their codes); text held as objects is
    coded first (:func:`core.tabular.as_coded`), once for every summary that reads it. The features and the
    PCA are summarised on up to :data:`WORKERS` threads (numpy sorts and reductions release the GIL), each
    on its own, so the profile does not depend on how many there are.

    ``"sample"`` keeps :func:`reference_sample` of ``columns`` (with ``predictions`` and ``labels``), or
    ``sample`` when given: the caller's sample of the rows its predictions belong to (training profiles the
    training rows but predicts the held-out ones).

    ``summaries``: numeric features' :func:`numeric_summary` already made, by name (a caller that sorted
    the columns for something else too: each column is sorted once); the others are made here. A feature
    whose summary is given may be absent from ``columns`` when ``held`` holds it at the rows the profile
    reads (:mod:`monitors.profile.held`); a regression's loss model, which reads every row, needs it whole.

    ``meanwhile`` runs in this thread while the pool fits the PCA and summarises the features (a caller's
    imports: the pool's threads import nothing).
    """
    held_names = set() if held is None else set(held.columns)
    for spec in schema.features:
        if spec.name in held_names and spec.name not in (summaries or {}):
            raise ValueError(f"feature {spec.name!r} is held at some rows only, without its summary")
        if spec.name not in columns and spec.name not in held_names:
            raise ValueError(f"feature {spec.name!r} of the schema is missing from the data")
    cols = {
        spec.name: as_coded(c if isinstance(c := columns[spec.name], CodedColumn) else np.asarray(c))
        for spec in schema.features
        if spec.name not in held_names
    }
    numeric = [spec.name for spec in schema.features if spec.kind is FeatureKind.NUMERIC]
    rows = held.rows if held is not None else max((len(c) for c in cols.values()), default=0)
    take = taker(cols, held)

    def summary(spec: FeatureSpec) -> dict[str, Any]:
        given = (summaries or {}).get(spec.name)
        return _feature_summary(spec, cols[spec.name] if given is None else None, given=given)

    with ThreadPoolExecutor(max_workers=WORKERS, thread_name_prefix="profile") as pool:
        pca = pool.submit(pca_summary, take, rows, numeric)  # the longest task: first
        summarised = pool.map(summary, schema.features)
        if meanwhile is not None:
            meanwhile()
        features = {spec.name: done for spec, done in zip(schema.features, summarised, strict=True)}
        multivariate = pca.result()
    out: dict[str, Any] = {
        "format": PROFILE_FORMAT,
        "rows": rows,
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
        "sample": (
            sample or own_sample(take, rows, schema, predictions=predictions, labels=labels)
        ).as_dict(),
    }
    if predictions is not None and schema.kind is Task.MULTICLASS:
        out.update(multiclass_outputs(predictions, labels, schema.classes))
    elif predictions is not None and schema.kind is Task.REGRESSION:
        if held_names:
            raise ValueError("a regression's loss model reads every row: its features cannot be held in part")
        out.update(regression_outputs(cols, schema, predictions, labels))
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
            out["calibration"] = calibration_table(p[ok], y[ok])
            out["performance_spread"] = performance_spread(Task.BINARY, y_true=y, predictions=p)
    _add_surrogate(out, schema)
    return out


def _feature_summary(
    spec: FeatureSpec, values: Column | None, *, given: dict[str, Any] | None
) -> dict[str, Any]:
    """One feature's summary: its categories' counts, or its numeric summary (``given``: made already, else
    made of ``values``) with the contract's ranges."""
    if spec.kind is not FeatureKind.NUMERIC:
        assert values is not None  # a categorical feature is never held in part
        return categorical_summary(values, name=spec.name)
    if given is not None:
        out = dict(given)
    else:
        assert values is not None  # a numeric feature without its summary is whole
        out = numeric_summary(values, name=spec.name)
    out.update(
        observed_min=spec.observed_min,
        observed_max=spec.observed_max,
        allowed_min=spec.allowed_min,
        allowed_max=spec.allowed_max,
        allowed_chance=spec.allowed_chance,
    )
    return out


def _add_surrogate(profile: dict[str, Any], schema: ModelSchema) -> None:
    """Fit the surrogate of the model's answers on the profile's reference sample (monitors/surrogate.py),
    when it has one with predictions: ``profile["surrogate"]``."""
    answers = (profile.get("sample") or {}).get("predictions") or []
    if all(a is None for a in answers):  # no answer of the model in the sample: nothing to fit
        return
    from monitors.surrogate import profile_surrogate

    surrogate = profile_surrogate(profile, schema.kind)
    if surrogate is not None:
        profile["surrogate"] = surrogate


__all__ = [
    "CategoricalProfile",
    "FeatureProfile",
    "MISSING_CATEGORY",
    "N_BINS",
    "N_QUANTILES",
    "NumericProfile",
    "OTHER_LEVELS",
    "PCAProfile",
    "PREDICTION",
    "PROFILE_FORMAT",
    "PROFILE_LEVELS",
    "Profile",
    "REFERENCE_SAMPLE_ROWS",
    "REFERENCE_SAMPLE_SEED",
    "WORKERS",
    "build_reference_profile",
    "categorical_from_dict",
    "categorical_summary",
    "metric_sd",
    "numeric_from_dict",
    "numeric_summary",
    "pca_errors",
    "performance_spread",
    "profile_from_dict",
    "profile_json",
    "quantile_positions",
    "read_profile",
    "reconstruction_error",
    "reference_sample",
    "write_profile",
]
