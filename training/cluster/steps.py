"""What every trainer shares: the encoded matrix, the network, the loss and the replica step."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import keras
import numpy as np
import tensorflow as tf

from registry.inputs import raw_inputs
from registry.schema import Task
from training.cluster.builders import build_model, output_width
from training.cluster.embedded_net import EmbeddedNet, make_embedded_step, wrap
from training.cluster.features import encode
from training.cluster.run_spec import PreparedData, TrainingRunSpec


def encoded_matrix(data: PreparedData) -> np.ndarray:
    """The training rows through the model's own preprocessing, as float32 ``[rows, width]``."""
    raw = raw_inputs(data.train_columns, data.schema)
    return encode({k: tf.constant(v) for k, v in raw.items()}, data.prep).numpy()


def build_net(job: TrainingRunSpec, data: PreparedData) -> keras.Model:
    """The job's network from its builder (``job.model_fn``, else the built-in MLP), seeded, behind its
    embedding tables when a feature is embedded (:mod:`training.cluster.embedded_net`); create it under a
    strategy's scope to distribute it."""
    task = data.schema.kind
    net = build_model(
        job.model_fn,
        input_dim=data.prep.width,
        outputs=output_width(task, len(data.schema.classes)),
        task=task,
        seed=job.seed,
    )
    return wrap(net, data.prep, seed=job.seed, learning_rate=job.learning_rate)


def per_example_loss(task: Task, y: tf.Tensor, out: tf.Tensor) -> tf.Tensor:
    """binary: sigmoid cross-entropy on ``out[:, 0]``; multi-class: sparse softmax cross-entropy on the
    ``[batch, K]`` logits with class-index labels; regression: squared error of ``out[:, 0]``."""
    out = tf.cast(out, tf.float32)
    if task is Task.MULTICLASS:
        return tf.nn.sparse_softmax_cross_entropy_with_logits(labels=tf.cast(y, tf.int32), logits=out)
    if task is Task.REGRESSION:
        return tf.square(out[:, 0] - y)
    return tf.nn.sigmoid_cross_entropy_with_logits(labels=y, logits=out[:, 0])


def make_replica_step(
    net: keras.Model,
    optimizer: keras.optimizers.Optimizer,
    *,
    global_batch: int,
    task: Task = Task.BINARY,
) -> Callable[[tf.Tensor, tf.Tensor], tf.Tensor]:
    """One gradient step on one replica's batch; the task's loss is averaged over the global batch."""
    if isinstance(net, EmbeddedNet):

        def loss_of(x: tf.Tensor, y: tf.Tensor) -> tf.Tensor:
            per_example = per_example_loss(task, y, net(x, training=True))
            return tf.nn.compute_average_loss(per_example, global_batch_size=global_batch)

        return make_embedded_step(net, optimizer, loss_of)

    def replica_step(x: tf.Tensor, y: tf.Tensor) -> tf.Tensor:
        with tf.GradientTape() as tape:
            per_example = per_example_loss(task, y, net(x, training=True))
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
