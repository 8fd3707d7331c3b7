"""The classifier network (Keras 3 layers) and its weights as plain arrays."""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    import keras

HIDDEN = (64, 32)


def build_net(width: int, *, seed: int = 0) -> keras.Model:
    """An MLP from the encoded matrix to one logit; create it under a strategy's scope to distribute it."""
    import keras

    keras.utils.set_random_seed(seed)
    inputs = keras.Input(shape=(width,), dtype="float32", name="encoded")
    x = inputs
    for i, units in enumerate(HIDDEN):
        x = keras.layers.Dense(units, activation="relu", name=f"hidden_{i}")(x)
    logit = keras.layers.Dense(1, name="logit")(x)
    return keras.Model(inputs, logit, name="driftwarden_mlp")


def dense_weights(net: keras.Model) -> list[tuple[np.ndarray, np.ndarray]]:
    """(kernel, bias) of each Dense layer in order, read back as numpy (from ps tasks if distributed)."""
    pairs = []
    for layer in net.layers:
        if hasattr(layer, "kernel"):
            pairs.append((np.asarray(layer.kernel.numpy()), np.asarray(layer.bias.numpy())))
    return pairs
