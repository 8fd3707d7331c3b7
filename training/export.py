"""Export trained weights as a TF Serving-loadable SavedModel and publish it into the registry.

The SavedModel holds the preprocessing (``training.features.encode``), the MLP and the Platt scaling of
its logit (``training.calibration``) as plain TF ops with a fixed ``serving_default`` signature: one 1-D
input per feature (float32 for numeric, string for categorical; NaN / "" mean missing) and one output
``probability``.
"""

from __future__ import annotations

import json
import shutil
import uuid
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
import tensorflow as tf
from sqlalchemy.orm import Session

from registry.models import ModelVersion
from registry.schema import FeatureKind, ModelSchema
from registry.service import META_DIR, next_version, publish_files, register_version
from training.features import Preprocessing, encode


class ServingModule(tf.Module):
    """Raw features -> encoded matrix -> MLP -> probability of the positive class."""

    def __init__(
        self, weights: list[tuple[np.ndarray, np.ndarray]], prep: Preprocessing, schema: ModelSchema
    ):
        super().__init__(name="driftwarden_model")
        self.prep = prep
        self.kernels = [
            tf.Variable(k.astype(np.float32), trainable=False, name=f"kernel_{i}")
            for i, (k, _) in enumerate(weights)
        ]
        self.biases = [
            tf.Variable(b.astype(np.float32), trainable=False, name=f"bias_{i}")
            for i, (_, b) in enumerate(weights)
        ]
        # Platt scaling of the logit (training.calibration), fitted after training: (1, 0) until then
        self.calib_scale = tf.Variable(1.0, trainable=False, name="calibration_scale")
        self.calib_shift = tf.Variable(0.0, trainable=False, name="calibration_shift")
        spec = {
            f.name: tf.TensorSpec(
                [None], tf.float32 if f.kind is FeatureKind.NUMERIC else tf.string, name=f.name
            )
            for f in schema.features
        }
        self.serve = tf.function(self._serve, input_signature=[spec])

    def _serve(self, features: dict[str, tf.Tensor]) -> dict[str, tf.Tensor]:
        x = encode(features, self.prep)
        last = len(self.kernels) - 1
        for i, (k, b) in enumerate(zip(self.kernels, self.biases, strict=True)):
            x = tf.matmul(x, k) + b
            if i < last:
                x = tf.nn.relu(x)
        return {"probability": tf.sigmoid(self.calib_scale * x[:, 0] + self.calib_shift)}

    def calibrate(self, *, scale: float, shift: float) -> None:
        """Set the Platt scaling of the output: ``sigmoid(scale * logit + shift)``."""
        self.calib_scale.assign(scale)
        self.calib_shift.assign(shift)


def predict_proba(
    module: ServingModule, inputs: Mapping[str, np.ndarray], *, batch: int = 4096
) -> np.ndarray:
    """Run the serving function over raw input columns in batches."""
    n = len(next(iter(inputs.values())))
    out = []
    for start in range(0, n, batch):
        part = {k: tf.constant(v[start : start + batch]) for k, v in inputs.items()}
        out.append(module.serve(part)["probability"].numpy())
    return np.concatenate(out) if out else np.zeros(0, dtype=np.float32)


def write_saved_model(module: ServingModule, path: Path) -> None:
    """Save with ``serving_default`` as the only signature."""
    tf.saved_model.save(module, str(path), signatures={"serving_default": module.serve})


def publish(
    *,
    session: Session,
    registry: Path,
    model_name: str,
    module: ServingModule,
    schema: ModelSchema,
    documents: Mapping[str, Any],
    metrics: dict[str, Any],
    lineage: dict[str, Any],
    parent_version: int | None = None,
) -> ModelVersion:
    """Write SavedModel + metadata to a staging folder, move it into place, record the version."""
    registry.mkdir(parents=True, exist_ok=True)
    staging = registry / model_name / f".staging-{uuid.uuid4().hex}"
    version = next_version(session=session, registry=registry, model_name=model_name)
    lineage = {**lineage, "model": model_name, "version": version}
    try:
        write_saved_model(module, staging)
        meta = staging / META_DIR
        meta.mkdir()
        docs = {"schema": schema.to_dict(), "metrics": metrics, "lineage": lineage, **documents}
        for name, doc in docs.items():
            (meta / f"{name}.json").write_text(json.dumps(doc, indent=2, default=_json_default))
        path = publish_files(staging=staging, registry=registry, model_name=model_name, version=version)
    finally:
        if staging.exists():
            shutil.rmtree(staging, ignore_errors=True)
    return register_version(
        session=session,
        model_name=model_name,
        version=version,
        path=path,
        metrics=metrics,
        lineage=lineage,
        parent_version=parent_version,
    )


def _json_default(value: Any) -> Any:
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, np.ndarray):
        return value.tolist()
    raise TypeError(f"not JSON serializable: {type(value)!r}")
