"""The TensorFlow pieces every trainer shares: the encoded matrix, the loss and the replica step."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import keras
import numpy as np
import tensorflow as tf

from training.features import encode, raw_inputs
from training.jobs import PreparedData


def encoded_matrix(data: PreparedData) -> np.ndarray:
    """The training rows through the model's own preprocessing, as float32 ``[rows, width]``."""
    raw = raw_inputs(data.train_columns, data.schema)
    return encode({k: tf.constant(v) for k, v in raw.items()}, data.prep).numpy()


def make_replica_step(
    net: keras.Model, optimizer: keras.optimizers.Optimizer, *, global_batch: int
) -> Callable[[tf.Tensor, tf.Tensor], tf.Tensor]:
    """One gradient step on one replica's batch; the loss is averaged over the global batch."""

    def replica_step(x: tf.Tensor, y: tf.Tensor) -> tf.Tensor:
        with tf.GradientTape() as tape:
            logits = net(x, training=True)[:, 0]
            per_example = tf.nn.sigmoid_cross_entropy_with_logits(labels=y, logits=logits)
            loss = tf.nn.compute_average_loss(per_example, global_batch_size=global_batch)
        grads = tape.gradient(loss, net.trainable_variables)
        optimizer.apply_gradients(zip(grads, net.trainable_variables, strict=True))
        return loss

    return replica_step


def make_optimizer(learning_rate: float) -> keras.optimizers.Optimizer:
    """Adam, the same in every mode."""
    return keras.optimizers.Adam(learning_rate=learning_rate)


def dataset(x: np.ndarray, y: np.ndarray, *, batch: int, seed: int, shard: tuple[int, int] = (1, 0)) -> Any:
    """Shuffled, repeated batches of this worker's shard (``shard`` = (count, index))."""
    ds = tf.data.Dataset.from_tensor_slices((x, y))
    if shard[0] > 1:
        ds = ds.shard(shard[0], shard[1])
    return (
        ds.shuffle(min(len(y), 10_000), seed=seed + shard[1])
        .repeat()
        .batch(batch, drop_remainder=True)
        .prefetch(2)
    )
