"""The network with embedding tables in front of it: the encoded matrix in, the builder's model behind.

:func:`training.cluster.features.encode` ends its matrix with one hash-bucket column per embedded feature; the
wrapper looks each bucket up in its feature's ``[buckets, dim]`` table and hands the builder's model the
dense columns followed by the embedding vectors (``Preprocessing.width`` columns). The tables are plain
``tf.Variable``s: created under ``ParameterServerStrategy`` with a ``variable_partitioner`` they are
``ShardedVariable``s, split over the parameter servers (:mod:`training.cluster.sharding`).

The builder's model trains with the job's optimizer (Adam); the tables with sparse Adagrad (only the rows a
batch touches change, on the ps that holds them), learning rate ``EMBED_LR_SCALE`` times the job's.
Checkpoints keep each table shard under its own key (``embedding_shards/<feature>_part_<i>``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import keras
import numpy as np
import tensorflow as tf

from training.cluster.features import Preprocessing

EMBED_LR_SCALE = 10.0
ADAGRAD_INITIAL = 0.1
INIT_STDDEV = 0.05


def table_parts(table: tf.Variable) -> list[tf.Variable]:
    """The shards of a table (a ShardedVariable's ``variables``), or the table itself when whole."""
    parts = getattr(table, "variables", None)
    return list(parts) if isinstance(parts, list | tuple) and parts else [table]


class EmbeddedNet(tf.Module):
    """The builder's Keras model behind one embedding table per embedded feature."""

    def __init__(
        self,
        net: keras.Model,
        prep: Preprocessing,
        *,
        seed: int = 0,
        learning_rate: float = 0.003,
        training: bool = True,
    ):
        super().__init__(name="embedded_net")
        self.net = net
        self.dense_width = prep.dense_width
        self.names = tuple(e.name for e in prep.embedded)
        self.learning_rate = float(learning_rate) * EMBED_LR_SCALE
        self.tables = [
            tf.Variable(
                tf.random.stateless_normal([e.buckets, e.dim], seed=[seed, i], stddev=INIT_STDDEV),
                name=f"{e.name}_embedding",
            )
            for i, e in enumerate(prep.embedded)
        ]
        self.accumulators = [
            tf.Variable(
                tf.fill([e.buckets, e.dim], ADAGRAD_INITIAL), trainable=False, name=f"{e.name}_adagrad"
            )
            for e in prep.embedded
            if training  # an exported model has no use for them (nor the export's size)
        ]

    @tf.autograph.experimental.do_not_convert  # plain Python over the tables: nothing to convert
    def __call__(self, x: tf.Tensor, training: bool = False) -> tf.Tensor:
        dense = x[:, : self.dense_width]
        vectors = [
            tf.nn.embedding_lookup(table, tf.cast(x[:, self.dense_width + j], tf.int64))
            for j, table in enumerate(self.tables)
        ]
        return self.net(tf.concat([dense, *vectors], axis=1), training=training)

    @property
    def trainable_variables(self) -> Any:  # the optimizer's share: the builder's model
        return self.net.trainable_variables

    @property
    def weights(self) -> list[Any]:
        """The builder's weights, then each whole table (what :func:`training.cluster.net.model_weights`
        reads)."""
        return [*self.net.weights, *self.tables]

    @property
    def output_shape(self) -> Any:
        return self.net.output_shape

    def checkpoint_objects(self) -> dict[str, Any]:
        """What a ``tf.train.Checkpoint`` keeps: the model, and every table and accumulator shard by name."""
        shards = tf.Module(name="embedding_shards")
        for name, table, acc in zip(self.names, self.tables, self.accumulators, strict=True):
            for i, (part, acc_part) in enumerate(zip(table_parts(table), table_parts(acc), strict=True)):
                setattr(shards, f"{name}_part_{i}", part)
                setattr(shards, f"{name}_adagrad_part_{i}", acc_part)
        return {"model": self.net, "embedding_shards": shards}

    def sparse_update(self, grads: list[Any]) -> None:
        """Sparse Adagrad on the table shards; ``grads`` in :meth:`shard_variables` order."""
        parts = [
            (part, acc)
            for table, accumulator in zip(self.tables, self.accumulators, strict=True)
            for part, acc in zip(table_parts(table), table_parts(accumulator), strict=True)
        ]
        for (part, acc), grad in zip(parts, grads, strict=True):
            if grad is None:
                continue
            if not isinstance(grad, tf.IndexedSlices):
                grad = tf.IndexedSlices(grad, tf.range(tf.shape(grad)[0], dtype=tf.int64))
            acc.scatter_add(tf.IndexedSlices(tf.square(grad.values), grad.indices))
            step = self.learning_rate * grad.values / tf.sqrt(tf.gather(acc, grad.indices))
            part.scatter_sub(tf.IndexedSlices(step, grad.indices))

    def shard_variables(self) -> list[tf.Variable]:
        """Every table shard, table by table."""
        return [part for table in self.tables for part in table_parts(table)]


def wrap(
    net: keras.Model,
    prep: Preprocessing,
    *,
    seed: int = 0,
    learning_rate: float = 0.003,
    training: bool = True,
) -> Any:
    """``net`` behind its embedding tables when ``prep`` embeds a feature, else ``net`` itself; ``training``
    False (the export): without the optimizer's accumulators."""
    if not prep.embedded:
        return net
    return EmbeddedNet(net, prep, seed=seed, learning_rate=learning_rate, training=training)


def checkpoint_objects(net: Any) -> dict[str, Any]:
    """The ``tf.train.Checkpoint`` keywords of a network (``model=net`` for a plain Keras model)."""
    return net.checkpoint_objects() if isinstance(net, EmbeddedNet) else {"model": net}


def make_embedded_step(
    net: EmbeddedNet,
    optimizer: keras.optimizers.Optimizer,
    loss_of: Callable[[tf.Tensor, tf.Tensor], tf.Tensor],
) -> Callable[[tf.Tensor, tf.Tensor], tf.Tensor]:
    """One step: Adam on the builder's model, sparse Adagrad on the table rows the batch looked up."""

    def replica_step(x: tf.Tensor, y: tf.Tensor) -> tf.Tensor:
        dense_vars = list(net.net.trainable_variables)
        shard_vars = net.shard_variables()
        with tf.GradientTape() as tape:
            loss = loss_of(x, y)
        grads = tape.gradient(loss, [*dense_vars, *shard_vars])
        optimizer.apply_gradients(zip(grads[: len(dense_vars)], dense_vars, strict=True))
        net.sparse_update(grads[len(dense_vars) :])
        return loss

    return replica_step


def table_arrays(net: Any) -> dict[str, np.ndarray]:
    """Each embedded feature's whole table as numpy (empty for a plain model)."""
    if not isinstance(net, EmbeddedNet):
        return {}
    return {name: np.asarray(t.numpy()) for name, t in zip(net.names, net.tables, strict=True)}
