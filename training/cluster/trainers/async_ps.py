"""Asynchronous training on parameter servers: the chief process coordinates, workers compute.

Variables live on the ps tasks; each worker pulls them, computes a gradient on its shard and the update
is applied on arrival (no waiting for other workers). Work is scheduled as *closures* of K steps. Each
closure counts its applied steps in a ps variable and skips the ones already done, so a closure that is
retried after its worker died (the coordinator re-queues it) never double-counts, and the final global
step equals the plan exactly. The chief checkpoints every ``checkpoint_every`` steps and resumes from the
latest checkpoint when rerun; lost workers are relaunched on the same address and picked up again.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import tensorflow as tf

from core.config import get_settings
from core.network import is_listening
from training.cluster.embedded_net import checkpoint_objects
from training.cluster.net import model_weights
from training.cluster.nodes import ClusterSpec
from training.cluster.progress import Progress, ProgressFile
from training.cluster.run_spec import PreparedData, TrainingRunSpec, prepare, read_job, save_weights
from training.cluster.sharding import WorkerRates, partitioner, placement_events, ps_shares, shares_event
from training.cluster.steps import build_net, encoded_matrix, make_optimizer, make_replica_step

Weights = list[np.ndarray]


def run_chief(job_path: Path) -> None:
    """The chief process: connect to the running ps/worker tasks, train, write the final weights."""
    job, cluster, files = read_job(job_path)
    data = prepare(job)
    progress = ProgressFile(files.progress)
    try:
        weights = coordinate(
            job=job,
            data=data,
            spec=ClusterSpec.from_dict(cluster),
            progress=progress,
            checkpoint_dir=files.checkpoints,
        )
        save_weights(weights, files.weights)
        progress.event("chief wrote final weights to %s", files.weights)
    finally:
        progress.close()


def unreachable_ps(spec: ClusterSpec) -> list[str]:
    """``ps:i at host:port`` for every parameter server that does not accept connections."""
    return [f"ps:{i} at {addr}" for i, addr in enumerate(spec.ps) if not is_listening(addr, timeout=2.0)]


class ParameterServerLost(RuntimeError):
    """A parameter server is gone: its variables with it; the run must restart from a checkpoint."""


def coordinate(
    *,
    job: TrainingRunSpec,
    data: PreparedData,
    spec: ClusterSpec,
    progress: Progress | ProgressFile,
    checkpoint_dir: Path,
) -> Weights:
    """The chief's loop: build variables on the ps tasks, schedule closures, checkpoint, recover."""
    strategy = _strategy(spec)
    coordinator = tf.distribute.coordinator.ClusterCoordinator(strategy)

    k = job.steps_per_closure
    planned = data.planned_steps(job)
    n_closures = planned // k
    x, y = encoded_matrix(data), data.train_y
    with strategy.scope():
        net = build_net(job, data)
        optimizer = make_optimizer(job.learning_rate)
        optimizer.build(net.trainable_variables)
        global_step = tf.Variable(0, dtype=tf.int64, name="global_step")
        closure_steps = tf.Variable(tf.zeros([n_closures], tf.int64), name="closure_steps")
        worker_steps = tf.Variable(tf.zeros([len(spec.worker)], tf.int64), name="worker_steps")
    replica_step = make_replica_step(net, optimizer, global_batch=job.batch_size, task=data.schema.kind)
    workers, batch, seed = job.workers, job.batch_size, job.seed

    def dataset_fn(_ctx: tf.distribute.InputContext) -> tf.data.Dataset:
        shard = tf.distribute.coordinator.experimental_get_current_worker_index()
        ds = tf.data.Dataset.from_tensor_slices((x, y)).shard(workers, shard)
        ds = ds.shuffle(10_000, seed=seed).repeat().batch(batch, drop_remainder=True)
        return ds.map(lambda a, b: (a, b, tf.cast(shard, tf.int64))).prefetch(2)  # + who computed it

    @tf.function
    def per_worker_dataset_fn():
        return strategy.distribute_datasets_from_function(dataset_fn)

    iterator = iter(coordinator.create_per_worker_dataset(per_worker_dataset_fn))

    @tf.function
    def closure(it, cid):
        total = tf.constant(0.0)
        count = tf.constant(0.0)
        for _ in tf.range(k):
            if closure_steps[cid] < k:
                xb, yb, wid = next(it)
                total += strategy.run(replica_step, args=(xb, yb))
                worker_steps.scatter_add(tf.IndexedSlices(tf.ones([1], tf.int64), tf.reshape(wid, [1])))
                closure_steps.scatter_add(tf.IndexedSlices(tf.ones([1], tf.int64), tf.reshape(cid, [1])))
                global_step.assign_add(1)
                count += 1.0
        return total / tf.maximum(count, 1.0)

    ckpt = tf.train.Checkpoint(
        **checkpoint_objects(net), optimizer=optimizer, global_step=global_step, closure_steps=closure_steps
    )
    manager = tf.train.CheckpointManager(ckpt, str(checkpoint_dir), max_to_keep=3)
    _restore(ckpt, manager, progress, global_step=global_step, ps=job.ps)
    _report_placement(progress, net, optimizer, spec)
    done = closure_steps.numpy()
    pending = [int(c) for c in np.flatnonzero(done < k)]
    step = int(global_step.numpy())
    progress.start(planned, step)
    _run_rounds(
        coordinator,
        closure,
        iterator,
        pending,
        per_round=max(1, job.checkpoint_every // k),
        manager=manager,
        global_step=global_step,
        progress=progress,
        batch=batch,
        spec=spec,
        rates=WorkerRates(worker_steps),
    )
    final = int(global_step.numpy())
    if final != planned:
        raise RuntimeError(f"global step {final} != planned {planned}: closure accounting is broken")
    progress.event("training done: global_step=%d planned=%d", final, planned)
    return model_weights(net)


def _strategy(spec: ClusterSpec) -> tf.distribute.ParameterServerStrategy:
    """The chief's strategy over ``spec``: large variables split over the ps tasks by the partitioner."""
    resolver = tf.distribute.cluster_resolver.SimpleClusterResolver(
        tf.train.ClusterSpec(spec.as_dict()), task_type="chief", task_id=0, rpc_layer="grpc"
    )
    return tf.distribute.ParameterServerStrategy(
        resolver, variable_partitioner=partitioner(ps=len(spec.ps), settings=get_settings())
    )


def _report_placement(progress: Progress | ProgressFile, net: Any, optimizer: Any, spec: ClusterSpec) -> None:
    """Each ps task's share of the variables (bytes) and where each sharded table lies, as events."""
    variables = [*net.weights, *getattr(net, "accumulators", []), *optimizer.variables]
    progress.event(shares_event(ps_shares(variables, ps=len(spec.ps))))
    for line in placement_events(net):
        progress.event(line)


def _restore(
    ckpt: tf.train.Checkpoint,
    manager: tf.train.CheckpointManager,
    progress: Progress | ProgressFile,
    *,
    global_step: tf.Variable,
    ps: int,
) -> None:
    """Resume from the newest checkpoint in ``manager``'s folder, if there is one."""
    if manager.latest_checkpoint:
        ckpt.restore(manager.latest_checkpoint)
        progress.event(
            "resumed from checkpoint %s at step %d", manager.latest_checkpoint, int(global_step.numpy())
        )
    else:
        progress.event("initialized variables on %d ps task(s); no checkpoint, starting at step 0", ps)


def _run_rounds(
    coordinator: tf.distribute.coordinator.ClusterCoordinator,
    closure: Any,
    iterator: Any,
    pending: list[int],
    *,
    per_round: int,
    manager: tf.train.CheckpointManager,
    global_step: tf.Variable,
    progress: Progress | ProgressFile,
    batch: int,
    spec: ClusterSpec,
    rates: WorkerRates,
) -> None:
    """Schedule the pending closures ``per_round`` at a time, checkpointing after each round; a lost ps task
    raises :class:`ParameterServerLost`."""
    step = int(global_step.numpy())
    try:
        for start in range(0, len(pending), per_round):
            results = [
                coordinator.schedule(closure, args=(iterator, tf.constant(c, tf.int64)))
                for c in pending[start : start + per_round]
            ]
            coordinator.join()
            losses = [float(r.fetch()) for r in results]
            new_step = int(global_step.numpy())
            path = manager.save(checkpoint_number=new_step)
            progress.update(new_step, loss=float(np.mean(losses)), examples=(new_step - step) * batch)
            progress.event("checkpoint step=%d path=%s", new_step, path)
            progress.event(rates.event())
            step = new_step
    except (tf.errors.OpError, ConnectionError) as exc:
        gone = unreachable_ps(spec)
        if gone:
            raise ParameterServerLost(
                f"parameter server lost: {', '.join(gone)}; its variables are gone. Restart the cluster "
                f"and rerun to resume from the last checkpoint (step {step})"
            ) from exc
        raise
