"""Export trained weights as a TF Serving-loadable SavedModel and publish it into the registry.

The SavedModel holds the preprocessing (``training.cluster.features.encode``), the network (rebuilt here
from its builder, :mod:`training.cluster.builders`, with the trained weights set, and traced into the graph:
loading it needs neither the builder's file nor Keras) and the task's head as plain TF ops, with a fixed
``serving_default`` signature: one 1-D input per feature (float32 for numeric, string for categorical;
NaN / "" mean missing) and one output named by the task (``registry.schema.OUTPUT_NAMES``): binary
``probability`` (the sigmoid of the logit after its Platt scaling, ``training.cluster.calibration``),
multi-class ``probabilities`` (softmax, ``[batch, K]``), regression ``value`` (``[batch]``).
"""

from __future__ import annotations

from collections.abc import Mapping
from functools import partial
from pathlib import Path
from typing import Any, Protocol

import numpy as np
import tensorflow as tf
from sqlalchemy.orm import Session

from registry.models import ModelVersion
from registry.schema import OUTPUT_NAMES, FeatureKind, ModelSchema, Task
from registry.service import publish_version
from training.cluster.builders import build_model, output_width
from training.cluster.embedded_net import wrap
from training.cluster.features import Preprocessing, encode
from training.cluster.net import set_model_weights


class ServingModule(tf.Module):
    """Raw features -> encoded matrix -> network -> the task's output (probability, probabilities, value)."""

    def __init__(
        self,
        weights: list[np.ndarray],
        prep: Preprocessing,
        schema: ModelSchema,
        *,
        model_fn: str | None = None,
    ):
        super().__init__(name="driftwarden_model")
        self.prep = prep
        self.task = schema.kind
        self.output_name = OUTPUT_NAMES[self.task]
        self.net = wrap(
            build_model(
                model_fn,
                input_dim=prep.width,
                outputs=output_width(self.task, len(schema.classes)),
                task=self.task,
            ),
            prep,
            training=False,
        )
        set_model_weights(self.net, weights)
        # Platt scaling of the logit (training.cluster.calibration, binary only): (1, 0) until fitted
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
        out = tf.cast(self.net(x, training=False), tf.float32)
        if self.task is Task.MULTICLASS:
            value = tf.nn.softmax(out, axis=-1)
        elif self.task is Task.REGRESSION:
            value = out[:, 0]
        else:
            value = tf.sigmoid(self.calib_scale * out[:, 0] + self.calib_shift)
        return {self.output_name: value}

    def calibrate(self, *, scale: float, shift: float) -> None:
        """Set the Platt scaling of the output: ``sigmoid(scale * logit + shift)`` (binary only)."""
        self.calib_scale.assign(scale)
        self.calib_shift.assign(shift)


def predict(module: ServingModule, inputs: Mapping[str, np.ndarray], *, batch: int = 4096) -> np.ndarray:
    """Run the serving function over raw input columns in batches: ``[n]`` or ``[n, K]`` (multi-class)."""
    n = len(next(iter(inputs.values())))
    out = []
    for start in range(0, n, batch):
        part = {k: tf.constant(v[start : start + batch]) for k, v in inputs.items()}
        out.append(module.serve(part)[module.output_name].numpy())
    if out:
        return np.concatenate(out)
    return np.zeros((0, module.net.output_shape[-1]) if module.task is Task.MULTICLASS else 0, np.float32)


def predict_proba(
    module: ServingModule, inputs: Mapping[str, np.ndarray], *, batch: int = 4096
) -> np.ndarray:
    """The binary model's probabilities (:func:`predict` of a binary module)."""
    return predict(module, inputs, batch=batch)


class Servable(Protocol):
    """A tf.Module whose ``serve`` is driftwarden's serving signature (trained here, or an imported model's
    wrapper: ``training.imports``)."""

    serve: Any


def write_saved_model(module: Servable, path: Path) -> None:
    """Save with ``serving_default`` as the only signature."""
    tf.saved_model.save(module, str(path), signatures={"serving_default": module.serve})


def publish(
    *,
    session: Session,
    registry: Path,
    model_name: str,
    module: Servable,
    schema: ModelSchema,
    documents: Mapping[str, Any],
    metrics: dict[str, Any],
    lineage: dict[str, Any],
    parent_version: int | None = None,
    actor: str = "training",
) -> ModelVersion:
    """Write SavedModel + metadata to a staging folder, move it into place, record the version."""
    return publish_version(
        session=session,
        registry=registry,
        model_name=model_name,
        documents={"schema": schema.to_dict(), **documents},
        metrics=metrics,
        lineage=lineage,
        write_model=partial(write_saved_model, module),
        parent_version=parent_version,
        actor=actor,
    )
