"""A version's raw model inputs from feature columns, and its answers to them (no TensorFlow here: the caller
passes the loaded signature): what its SavedModel's signature takes, one 1-D column per feature, and its
output. Training's scoring, the validation gate, the backtest and the monitors' attribution share it."""

from __future__ import annotations

from collections.abc import Callable, Mapping

import numpy as np

from registry.schema import FeatureKind, ModelSchema, Task, is_missing

Signature = Callable[[dict[str, np.ndarray]], Mapping[str, np.ndarray]]
"""A loaded version's signature (:class:`registry.saved_model.SignatureRunner`): raw inputs -> outputs."""


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


def model_answers(
    runner: Signature, schema: ModelSchema, columns: Mapping[str, np.ndarray], *, batch: int
) -> np.ndarray:
    """The version's output (``schema.output.name``) on the rows, ``batch`` rows per call: ``[n]``, or
    ``[n, K]`` (multi-class), float64."""
    inputs = raw_inputs(columns, schema)
    n = len(next(iter(inputs.values()))) if inputs else 0
    width = schema.output.width if schema.kind is Task.MULTICLASS else 0
    out = []
    for lo in range(0, n, batch):
        answer = np.asarray(runner({k: v[lo : lo + batch] for k, v in inputs.items()})[schema.output.name])
        out.append(answer.reshape(-1, width) if width else answer.reshape(-1))
    if not out:
        return np.zeros((0, width) if width else 0)
    return np.concatenate(out).astype(np.float64)
