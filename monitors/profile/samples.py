"""The reference's row sample, kept raw for root-cause analysis."""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from core.tabular import Column, Take, as_float
from monitors.reservoir import sample_texts
from monitors.rows import RowSample, uniform_positions
from registry.schema import FeatureKind, ModelSchema

REFERENCE_SAMPLE_ROWS = (
    5_000  # rows of the reference kept raw (``profile["sample"]``) for root-cause analysis
)


REFERENCE_SAMPLE_SEED = 0


def _sample_labels(labels: np.ndarray | None, index: np.ndarray) -> np.ndarray | None:
    """The sampled rows' labels as float64 (NaN: none); None without labels or with labels that are not
    numbers."""
    if labels is None:
        return None
    try:
        return np.asarray(np.asarray(labels).reshape(-1)[index], dtype=np.float64)
    except (TypeError, ValueError):
        return None


def sample_positions(
    rows: int, *, size: int = REFERENCE_SAMPLE_ROWS, seed: int = REFERENCE_SAMPLE_SEED
) -> np.ndarray:
    """The rows of a ``rows``-row reference in its sample: ``size`` at most, drawn uniformly (seeded)."""
    return uniform_positions(rows, size, seed=seed)


def reference_sample(
    columns: Mapping[str, Column],
    schema: ModelSchema,
    *,
    predictions: np.ndarray | None = None,
    labels: np.ndarray | None = None,
    rows: int = REFERENCE_SAMPLE_ROWS,
    seed: int = REFERENCE_SAMPLE_SEED,
) -> RowSample:
    """A uniform sample of at most ``rows`` of the reference's rows (:func:`sample_positions`): the schema's
    features, the model's answers (NaN without them) and the labels where given; ``population`` is the
    number of rows it is drawn from.

    ``predictions`` and ``labels`` must belong to the same rows as ``columns``."""
    n = max((len(columns[spec.name]) for spec in schema.features), default=0)
    index = sample_positions(n, size=rows, seed=seed)
    return sample_of(
        lambda name, at: columns[name][at], n, schema, index, predictions=predictions, labels=labels
    )


def sample_of(
    take: Take,
    n: int,
    schema: ModelSchema,
    index: np.ndarray,
    *,
    predictions: np.ndarray | None,
    labels: np.ndarray | None,
) -> RowSample:
    """The rows ``index`` of an ``n``-row reference whose columns ``take(name, positions)`` gives at those
    rows, as :func:`reference_sample` keeps them."""
    if predictions is not None and len(predictions) != n:
        raise ValueError(f"{len(predictions)} predictions for {n} rows of features")
    if labels is not None and len(labels) != n:
        raise ValueError(f"{len(labels)} labels for {n} rows of features")
    sampled: dict[str, np.ndarray] = {}
    for spec in schema.features:
        values = take(spec.name, index)
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


def own_sample(
    take: Take,
    n: int,
    schema: ModelSchema,
    *,
    predictions: np.ndarray | None,
    labels: np.ndarray | None,
) -> RowSample:
    """:func:`sample_of` the ``n`` profiled rows; the features alone (answers NaN, no labels) when the
    predictions are not of those rows and the caller gave no sample of its own."""
    if predictions is not None and len(predictions) != n:
        predictions, labels = None, None
    return sample_of(take, n, schema, sample_positions(n), predictions=predictions, labels=labels)
