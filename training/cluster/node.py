"""One TensorFlow server task (ps or worker) of a cluster: start, listen, join until killed."""

from __future__ import annotations

import logging
import os

from training.cluster.nodes import ClusterSpec

log = logging.getLogger("driftwarden.cluster")


def run_server(*, role: str, index: int, spec: ClusterSpec) -> None:
    """Start the gRPC server for task ``role:index`` of ``spec`` and block forever."""
    if os.environ.get("TF_NUM_INTEROP_THREADS") == "1":
        raise RuntimeError("TF_NUM_INTEROP_THREADS=1 deadlocks parameter-server training; unset it")
    import tensorflow as tf

    if role not in {"ps", "worker"}:
        raise ValueError(f"a server node is ps or worker, not {role!r} (the chief runs `driftwarden train`)")
    if index >= len(getattr(spec, role)):
        raise ValueError(f"the cluster spec has {len(getattr(spec, role))} {role} task(s), no index {index}")
    cluster = tf.train.ClusterSpec(spec.as_dict())
    server = tf.distribute.Server(cluster, job_name=role, task_index=index, protocol="grpc", start=True)
    log.info("node %s:%d listening at %s (pid %d)", role, index, spec.address(role, index), os.getpid())
    server.join()
