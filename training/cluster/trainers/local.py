"""Single-process training, no cluster: for development and quick fixtures."""

from __future__ import annotations

import numpy as np
import tensorflow as tf

from training.cluster.net import model_weights
from training.cluster.progress import Progress
from training.cluster.run_spec import PreparedData, TrainingRunSpec
from training.cluster.steps import build_net, dataset, encoded_matrix, make_optimizer, make_replica_step


def train(job: TrainingRunSpec, data: PreparedData, progress: Progress) -> list[np.ndarray]:
    """Plain loop over the planned steps; returns the model's weights (in ``net.weights`` order)."""
    x = encoded_matrix(data)
    net = build_net(job, data)
    optimizer = make_optimizer(job.learning_rate)
    step_fn = make_replica_step(net, optimizer, global_batch=job.batch_size, task=data.schema.kind)
    iterator = iter(dataset(x, data.train_y, batch=job.batch_size, seed=job.seed))

    @tf.function
    def run(n: tf.Tensor) -> tf.Tensor:
        total = tf.constant(0.0)
        for _ in tf.range(n):
            xb, yb = next(iterator)
            total += step_fn(xb, yb)
        return total / tf.cast(n, tf.float32)

    planned = data.planned_steps(job)
    progress.start(planned, 0)
    done = 0
    while done < planned:
        n = min(job.checkpoint_every, planned - done)
        loss = float(run(tf.constant(n)))
        done += n
        progress.update(done, loss=loss, examples=n * job.batch_size)
    return model_weights(net)
