"""The network's weights as plain arrays (the network itself comes from a builder:
:mod:`training.cluster.builders`)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    import keras


def model_weights(net: keras.Model) -> list[np.ndarray]:
    """Every weight of the model in its order (``net.weights``), read back as numpy (from ps tasks if
    distributed); :func:`set_model_weights` puts them into a model built by the same builder."""
    return [np.asarray(v.numpy()) for v in net.weights]


def set_model_weights(net: keras.Model, weights: list[np.ndarray]) -> None:
    """Load :func:`model_weights` into a model of the same builder (the shapes must match, in order)."""
    variables = net.weights
    if len(variables) != len(weights):
        raise ValueError(f"the model has {len(variables)} weights, {len(weights)} were trained")
    for var, value in zip(variables, weights, strict=True):
        if tuple(var.shape) != tuple(value.shape):
            raise ValueError(
                f"weight {getattr(var, 'path', var.name)}: shape {tuple(var.shape)} "
                f"!= trained {tuple(value.shape)}"
            )
        var.assign(value)
