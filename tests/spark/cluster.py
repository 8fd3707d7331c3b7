"""A Spark standalone cluster on loopback for the test session: a master and two workers (1 core, 1 GB each)
started with the ``spark-class`` launcher the ``pyspark`` package ships, stopped by the PIDs started."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from core.network import free_ports, is_listening

WORKERS = 2


def spark_home() -> str:
    import pyspark

    return os.path.dirname(pyspark.__file__)


def cluster_env() -> dict[str, str]:
    """The environment of the cluster's processes: loopback only, this interpreter for Python workers and
    this project on their path; no ``AWS_*`` variable (an S3 lake's reach comes from the driver's session)."""
    root = str(Path(__file__).resolve().parents[2])
    return {
        **{k: v for k, v in os.environ.items() if not k.startswith("AWS_")},
        "SPARK_HOME": spark_home(),
        "SPARK_LOCAL_IP": "127.0.0.1",
        "SPARK_LOCAL_HOSTNAME": "localhost",
        "PYSPARK_PYTHON": sys.executable,
        "PYTHONPATH": os.pathsep.join(p for p in (root, os.environ.get("PYTHONPATH", "")) if p),
    }


@dataclass
class Cluster:
    """The running cluster: its master URL, processes and log folder."""

    master: str
    logs: Path
    processes: list[subprocess.Popen[bytes]] = field(default_factory=list)

    def stop(self) -> None:
        """Stop the workers, then the master, by the PIDs started (their process groups)."""
        for proc in reversed(self.processes):
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGTERM)
        for proc in reversed(self.processes):
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(timeout=10)


def _launch(args: list[str], log: Path, env: dict[str, str]) -> subprocess.Popen[bytes]:
    out = log.open("wb")
    return subprocess.Popen(
        [f"{spark_home()}/bin/spark-class", *args],
        stdout=out,
        stderr=subprocess.STDOUT,
        env=env,
        start_new_session=True,  # a group of its own: the JVM and its children stop together
    )


def _wait(check: object, what: str, cluster: Cluster, timeout_s: float = 90.0) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if callable(check) and check():
            return
        if any(p.poll() is not None for p in cluster.processes):
            break
        time.sleep(0.5)
    cluster.stop()
    tails = "\n".join(f"--- {p.name}\n{p.read_text()[-2000:]}" for p in sorted(cluster.logs.glob("*.log")))
    raise RuntimeError(f"the Spark cluster did not start ({what}):\n{tails}")


def start_cluster(logs: Path, *, cores: int = 1, memory: str = "1g") -> Cluster:
    """Start a master and :data:`WORKERS` workers on 127.0.0.1; returns once every worker registered."""
    logs.mkdir(parents=True, exist_ok=True)
    port, web, *worker_webs = free_ports("127.0.0.1", 2 + WORKERS)
    master = f"spark://127.0.0.1:{port}"
    env = cluster_env()
    cluster = Cluster(master=master, logs=logs)
    cluster.processes.append(
        _launch(
            [
                "org.apache.spark.deploy.master.Master",
                "--host",
                "127.0.0.1",
                "--port",
                str(port),
                "--webui-port",
                str(web),
            ],
            logs / "master.log",
            env,
        )
    )
    _wait(lambda: is_listening(f"127.0.0.1:{port}"), "master", cluster)
    for i, wport in enumerate(worker_webs):
        work = logs / f"work-{i}"
        work.mkdir(exist_ok=True)
        cluster.processes.append(
            _launch(
                [
                    "org.apache.spark.deploy.worker.Worker",
                    master,
                    "--host",
                    "127.0.0.1",
                    "--cores",
                    str(cores),
                    "--memory",
                    memory,
                    "--webui-port",
                    str(wport),
                    "--work-dir",
                    str(work),
                ],
                logs / f"worker-{i}.log",
                env,
            )
        )

    def registered() -> bool:
        text = (logs / "master.log").read_text(errors="replace")
        return text.count("Registering worker") >= WORKERS

    _wait(registered, "workers registering", cluster)
    return cluster
