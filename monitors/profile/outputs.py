"""The model's answers summarised by task, and the spread of its metrics across reference chunks."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import numpy as np

from core.tabular import Column
from monitors.profile.profiles import PREDICTION
from monitors.profile.summaries import categorical_summary, numeric_summary
from registry.schema import ModelSchema, Task

SPREAD_CHUNK_ROWS = 500  # labelled rows per chunk at least (fewer chunks when there are fewer rows)
SPREAD_MAX_CHUNKS = 50  # more chunks, a closer estimate of the sd (relative error ~ 1 / sqrt(2 (chunks - 1)))
SPREAD_MIN_CHUNKS = 5  # fewer chunks than this: no performance spread


def multiclass_outputs(
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


def regression_outputs(
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
