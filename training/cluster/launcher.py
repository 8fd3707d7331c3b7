"""Run a training job on a local cluster of OS processes, and supervise it to the end.

async: ps and worker servers start first; then the chief process connects and trains. A lost worker is
relaunched on its address (the chief re-queues its work); a lost chief is relaunched and resumes from the
latest checkpoint; a lost parameter server ends the run with an error naming it.
sync: N worker processes run the all-reduce program; any loss stops them all and they are relaunched
together, restoring the latest checkpoint (up to ``max_restarts`` times).
Every process started here is stopped here, by PID, whatever happens (and dies with this process).
"""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np

from core.config import Settings
from training.cluster.nodes import (
    ClusterSpec,
    LocalCluster,
    Node,
    NodeLost,
    chief_argv,
    child_env,
    is_listening,
    node_argv,
    sync_worker_argv,
)
from training.cluster.progress import Progress, follow
from training.cluster.run_spec import Mode, RunFiles, TrainingRunSpec, load_weights, write_job

Weights = list[np.ndarray]  # the model's weights in ``net.weights`` order
POLL_S = 0.2
PS_LOST_EXIT = 3  # the chief's exit code when a parameter server is gone


def train_on_cluster(
    *,
    job: TrainingRunSpec,
    files: RunFiles,
    progress: Progress,
    settings: Settings,
    external: ClusterSpec | None = None,
) -> tuple[Weights, dict[str, int]]:
    """Train ``job`` on a local cluster (or, async only, on the running ``external`` one)."""
    files.root.mkdir(parents=True, exist_ok=True)
    files.weights.unlink(missing_ok=True)
    if external is not None and job.mode is not Mode.ASYNC:
        raise ValueError("--cluster (an external, already running cluster) is supported in async mode only")
    if job.mode is Mode.ASYNC:
        _run_async(job=job, files=files, progress=progress, settings=settings, external=external)
        spec = external
        shape = (
            {"chief": 1, "ps": len(spec.ps), "worker": len(spec.worker)}
            if spec
            else {"chief": 1, "ps": job.ps, "worker": job.workers}
        )
    elif job.mode is Mode.SYNC:
        _run_sync(job=job, files=files, progress=progress, settings=settings)
        shape = {"worker": job.workers}
    else:
        raise ValueError(f"mode {job.mode.value} does not use a cluster")
    return load_weights(files.weights), shape


def _last_error(path: Path) -> str:
    """The chief's last 'parameter server lost' line (or its log's tail)."""
    lines = path.read_text(errors="replace").splitlines() if path.exists() else []
    for line in reversed(lines):
        if "parameter server lost" in line:
            return line[line.index("parameter server lost") :]
    return _tail(path)


def _offset(path: Path) -> int:
    return path.stat().st_size if path.exists() else 0


def _tail(path: Path, lines: int = 15) -> str:
    if not path.exists():
        return ""
    text = path.read_text(errors="replace").splitlines()
    return "\n".join(text[-lines:])


def wait_for_nodes(spec: ClusterSpec, *, timeout_s: float) -> None:
    """Block until every ps and worker of an external cluster accepts connections."""
    deadline = time.monotonic() + timeout_s
    while True:
        down = [f"{r}:{i} ({a})" for r, i, a in spec.nodes() if r != "chief" and not is_listening(a)]
        if not down:
            return
        if time.monotonic() > deadline:
            raise TimeoutError(
                f"cluster nodes not reachable after {timeout_s:.0f}s: {', '.join(down)}; "
                "start them with `driftwarden cluster node` (see docs/training.md)"
            )
        time.sleep(0.5)


def _run_async(
    *,
    job: TrainingRunSpec,
    files: RunFiles,
    progress: Progress,
    settings: Settings,
    external: ClusterSpec | None,
) -> None:
    if external is not None and not external.chief:
        raise ValueError('the cluster spec needs a "chief" address (this machine) for the coordinator')
    spec = external or ClusterSpec.local(host=settings.cluster_host, chief=1, ps=job.ps, workers=job.workers)
    write_job(job, cluster=spec.as_dict(), files=files)
    cluster = LocalCluster(
        run_dir=files.nodes,
        restart_roles=frozenset({"worker"}),
        restart_delay_s=settings.worker_restart_delay_s,
        on_event=lambda msg: progress.event("%s", msg),
    )
    servers = [
        cluster.add(
            role=role, index=i, address=addr, argv=node_argv(role=role, index=i, spec=spec), env=child_env()
        )
        for role, i, addr in spec.nodes()
        if role != "chief" and external is None
    ]
    chief = cluster.add(
        role="chief", index=0, address=spec.chief[0], argv=chief_argv(files.job), env=child_env()
    )
    offset = _offset(files.progress)
    with cluster:
        t0 = time.monotonic()
        if external is None:
            cluster.start(servers, timeout_s=settings.cluster_start_timeout_s)
        else:
            wait_for_nodes(external, timeout_s=settings.cluster_start_timeout_s)
        progress.event("cluster up in %.1fs: %s", time.monotonic() - t0, spec.as_dict())
        cluster.launch(chief)
        ps_restarts = 0
        while True:
            offset = follow(files.progress, progress, offset)
            ps_lost = cluster.first_loss("ps")
            rc = chief.returncode
            if ps_lost is not None:
                # give the chief a moment to checkpoint-free exit with its own message, then stop everything
                deadline = time.monotonic() + 10
                while chief.alive() and time.monotonic() < deadline:
                    time.sleep(POLL_S)
                offset = follow(files.progress, progress, offset)
                if external is None and ps_restarts < settings.ps_max_restarts:  # a local ps comes back
                    ps_restarts += 1
                    restart_ps(cluster, lost=ps_lost, chief=chief, progress=progress, settings=settings)
                    continue
                raise NodeLost(
                    ps_lost.role, ps_lost.index, ps_lost.address, ps_lost.returncode, ps_lost.log_path
                )
            if rc is None:
                time.sleep(POLL_S)
                continue
            if rc == 0:
                break
            if rc == PS_LOST_EXIT:
                time.sleep(1.0)  # let the supervisor thread register the exit of a local ps
                lost = cluster.first_loss("ps")
                if lost is not None:
                    continue  # handled above: restarted (local) or raised
                raise RuntimeError(f"the chief stopped: {_last_error(chief.log_path)}")
            if chief.restarts >= settings.max_restarts:
                raise RuntimeError(
                    f"chief failed {chief.restarts + 1} times (last exit {rc}); "
                    f"last log lines of {chief.log_path}:\n{_tail(chief.log_path)}"
                )
            err = NodeLost(chief.role, 0, chief.address, rc, chief.log_path)
            progress.event("%s; relaunching the chief: it resumes from the latest checkpoint", err)
            cluster.launch(chief)
        follow(files.progress, progress, offset)
    if not files.weights.exists():
        raise RuntimeError(f"chief exited without writing {files.weights}; see {chief.log_path}")


def restart_ps(
    cluster: LocalCluster, *, lost: NodeLost, chief: Node, progress: Progress, settings: Settings
) -> None:
    """A local parameter server died, its variables with it: stop the chief, relaunch the ps on its address,
    then relaunch the chief, which restores every variable (shards included) from the latest checkpoint."""
    if chief.alive() and chief.process is not None:
        chief.process.kill()
        chief.process.wait()
    node = next(n for n in cluster.nodes if n.role == lost.role and n.index == lost.index)
    progress.event("%s; relaunching it and the chief: training resumes from the latest checkpoint", lost)
    cluster.launch(node)
    cluster.wait_listening([node], timeout_s=settings.cluster_start_timeout_s)
    cluster.lost.remove(lost)
    cluster.launch(chief)


def _run_sync(*, job: TrainingRunSpec, files: RunFiles, progress: Progress, settings: Settings) -> None:
    offset = _offset(files.progress)
    attempt = 0
    while True:
        spec = ClusterSpec.local(host=settings.cluster_host, chief=0, ps=0, workers=job.workers)
        write_job(job, cluster=spec.as_dict(), files=files)
        cluster = LocalCluster(run_dir=files.nodes, on_event=lambda msg: progress.event("%s", msg))
        nodes = [
            cluster.add(
                role="worker", index=i, address=addr, argv=sync_worker_argv(files.job, i), env=child_env()
            )
            for i, addr in enumerate(spec.worker)
        ]
        with cluster:
            for node in nodes:
                cluster.launch(node)
            failed, offset = _wait_all(nodes, files=files, progress=progress, offset=offset)
        offset = follow(files.progress, progress, offset)  # what the workers wrote while being stopped
        if failed is None:
            return
        attempt += 1
        if attempt > settings.max_restarts:
            raise RuntimeError(
                f"{failed}; gave up after {settings.max_restarts} relaunch(es). Last log lines:\n"
                + _tail(failed.log_path)
            )
        progress.event(
            "%s; stopping all workers and relaunching %d (attempt %d/%d): they restore the latest checkpoint",
            failed,
            job.workers,
            attempt,
            settings.max_restarts,
        )


def _wait_all(
    nodes: list[Node], *, files: RunFiles, progress: Progress, offset: int
) -> tuple[NodeLost | None, int]:
    """Follow progress until every worker exits 0 (no loss) or one fails; returns (loss, offset)."""
    while True:
        offset = follow(files.progress, progress, offset)
        codes = [n.returncode for n in nodes]
        for node, rc in zip(nodes, codes, strict=True):
            if rc is not None and rc != 0:
                return NodeLost(node.role, node.index, node.address, rc, node.log_path), offset
        if all(rc == 0 for rc in codes):
            return None, follow(files.progress, progress, offset)
        time.sleep(POLL_S)
