"""A version's raw model inputs from feature columns (pure, no TensorFlow): what its SavedModel's signature
takes, one 1-D column per feature (training's scoring, the gate and the monitors' attribution share it)."""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from registry.schema import FeatureKind, ModelSchema, is_missing


def raw_inputs(columns: Mapping[str, np.ndarray], schema: ModelSchema) -> dict[str, np.ndarray]:
    """Columns as the model's raw inputs: float32 with NaN for numbers, str with "" for missing categories."""
    out: dict[str, np.ndarray] = {}
    for spec in schema.features:
        col = columns[spec.name]
        if spec.kind is FeatureKind.NUMERIC:
            out[spec.name] = col.astype(np.float32)
        else:
            missing = is_missing(col)
            out[spec.name] = np.where(missing, "", col.astype(str)).astype(object)
    return out
