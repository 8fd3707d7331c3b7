"""Synchronous training with all-reduce: every worker runs this program; worker 0 is the chief.

Each step, every worker computes gradients on its shard of the global batch, the gradients are summed
across workers (``MultiWorkerMirroredStrategy``, ring all-reduce over gRPC) and one identical update is
applied everywhere, so all workers hold bit-identical weights. Every worker writes checkpoints (worker 0
into the run's checkpoint folder, the others into private scratch folders, as the strategy requires);
after a lost worker the launcher relaunches all of them and they restore worker 0's latest checkpoint.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import tensorflow as tf

from training.cluster.net import model_weights
from training.cluster.nodes import ClusterSpec
from training.cluster.progress import ProgressFile
from training.cluster.run_spec import prepare, read_job, save_weights
from training.cluster.steps import build_net, encoded_matrix, make_optimizer, make_replica_step


def run_worker(job_path: Path, index: int) -> None:
    """Join the all-reduce group as worker ``index`` and train to the planned step."""
    job, cluster, files = read_job(job_path)
    os.environ["TF_CONFIG"] = json.dumps(ClusterSpec.from_dict(cluster).tf_config("worker", index))
    n_workers = len(cluster["worker"])
    is_chief = index == 0
    options = tf.distribute.experimental.CommunicationOptions(
        implementation=tf.distribute.experimental.CommunicationImplementation.RING
    )
    # the strategy must exist before any TF op runs (collectives are configured at program start)
    strategy = tf.distribute.MultiWorkerMirroredStrategy(communication_options=options)
    data = prepare(job)
    x, y = encoded_matrix(data), data.train_y
    global_batch = max(n_workers, job.batch_size // n_workers * n_workers)
    with strategy.scope():
        net = build_net(job, data)
        optimizer = make_optimizer(job.learning_rate)
        optimizer.build(net.trainable_variables)
        global_step = tf.Variable(0, dtype=tf.int64, name="global_step")
    replica_step = make_replica_step(net, optimizer, global_batch=global_batch, task=data.schema.kind)
    seed = job.seed

    def dataset_fn(ctx: tf.distribute.InputContext) -> tf.data.Dataset:
        ds = tf.data.Dataset.from_tensor_slices((x, y)).shard(ctx.num_input_pipelines, ctx.input_pipeline_id)
        per_replica = ctx.get_per_replica_batch_size(global_batch)
        return ds.shuffle(10_000, seed=seed).repeat().batch(per_replica, drop_remainder=True).prefetch(2)

    iterator = iter(strategy.distribute_datasets_from_function(dataset_fn))

    @tf.function
    def train_step(it):
        losses = strategy.run(replica_step, args=next(it))
        global_step.assign_add(1)
        return strategy.reduce(tf.distribute.ReduceOp.SUM, losses, axis=None)

    ckpt = tf.train.Checkpoint(model=net, optimizer=optimizer, global_step=global_step)
    own_dir = files.checkpoints if is_chief else files.root / f"scratch-worker-{index}"
    manager = tf.train.CheckpointManager(ckpt, str(own_dir), max_to_keep=3)
    progress = ProgressFile(files.progress) if is_chief else None
    latest = tf.train.latest_checkpoint(str(files.checkpoints))
    if latest:
        ckpt.restore(latest)
        if progress:
            progress.event("resumed from checkpoint %s at step %d", latest, int(global_step.numpy()))
    elif progress:
        progress.event("initialized variables on %d worker(s); no checkpoint, starting at step 0", n_workers)
    planned = data.planned_steps(job)
    step = int(global_step.numpy())
    if progress:
        progress.start(planned, step)
    last, total, count = step, 0.0, 0
    while step < planned:
        total += float(train_step(iterator))
        count += 1
        step += 1
        if step % job.checkpoint_every == 0 or step == planned:
            path = manager.save(checkpoint_number=step)
            if progress:
                progress.update(step, loss=total / count, examples=(step - last) * global_batch)
                progress.event("checkpoint step=%d path=%s", step, path)
            last, total, count = step, 0.0, 0
    if not is_chief:
        shutil.rmtree(own_dir, ignore_errors=True)
        return
    assert progress is not None
    progress.event("training done: global_step=%d planned=%d", int(global_step.numpy()), planned)
    save_weights(model_weights(net), files.weights)
    progress.event("chief wrote final weights to %s", files.weights)
    progress.close()
