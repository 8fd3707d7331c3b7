"""Segment test data: a scheduled run's alpha, rows as a row sample, rows with a segment's income shifted."""

from __future__ import annotations

import numpy as np

from core.tabular import Columns
from monitors.horizon import run_alpha
from monitors.rows import RowSample
from registry.schema import FeatureKind, ModelSchema
from tests.monitors.helpers import true_probability
from training.cluster.datagen import TARGET

SCHEDULED = run_alpha(alpha=0.05, budget=0.5, every_s=300.0)  # a run every 5 minutes: about 8e-6


def sample(cols: Columns, schema: ModelSchema, *, labels: bool = True) -> RowSample:
    """The rows of ``cols`` as a row sample: the generator's probability as the prediction."""
    kinds = {spec.name: spec.kind for spec in schema.features}
    columns = {
        name: np.asarray(cols[name], dtype=np.float64)
        if kind is FeatureKind.NUMERIC
        else np.array([None if v is None else str(v) for v in cols[name]], dtype=object)
        for name, kind in kinds.items()
    }
    y = np.asarray(cols[TARGET], dtype=np.float64) if labels else None
    return RowSample(columns=columns, kinds=kinds, predictions=true_probability(cols), labels=y)


def shifted(cols: Columns, where: np.ndarray, *, factor: float = 0.55) -> Columns:
    """``cols`` with the income of the rows ``where`` cut by ``factor`` (and their labels drawn again from the
    generator's concept, so the model stays right)."""
    out = {k: np.array(v, copy=True) for k, v in cols.items()}
    out["income"] = np.where(where, out["income"] * factor, out["income"])
    rng = np.random.default_rng(5)
    out[TARGET] = (rng.random(where.size) < true_probability(out)).astype(np.int64)
    return out
