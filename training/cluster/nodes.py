"""Cluster specs (TF_CONFIG style) and a local launcher that runs each TF server as its own OS process.

A spec names ``host:port`` lists per role: ``{"chief": [...], "ps": [...], "worker": [...]}``. On a real
multi-machine cluster each machine runs ``driftwarden cluster node --role R --index N --cluster SPEC``;
the embedded default starts every node on free loopback ports with :class:`LocalCluster`, which waits
until each listens, relaunches lost workers when asked to, and always stops what it started, by PID.
Children also get ``PR_SET_PDEATHSIG`` so that they die with the launcher even when it is SIGKILLed.
"""

from __future__ import annotations

import ctypes
import json
import logging
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from core.network import free_ports, is_listening

log = logging.getLogger("driftwarden.cluster")

ROLES = ("chief", "ps", "worker")
PR_SET_PDEATHSIG = 1


@dataclass(frozen=True)
class ClusterSpec:
    """Addresses of every task, by role."""

    chief: tuple[str, ...] = ()
    ps: tuple[str, ...] = ()
    worker: tuple[str, ...] = ()

    def as_dict(self) -> dict[str, list[str]]:
        """The ``cluster`` part of TF_CONFIG (empty roles omitted)."""
        return {role: list(getattr(self, role)) for role in ROLES if getattr(self, role)}

    def tf_config(self, role: str, index: int) -> dict[str, Any]:
        """A full TF_CONFIG document for one task."""
        return {"cluster": self.as_dict(), "task": {"type": role, "index": index}}

    def address(self, role: str, index: int) -> str:
        return str(getattr(self, role)[index])

    def nodes(self) -> Iterator[tuple[str, int, str]]:
        """(role, index, address) of every task."""
        for role in ROLES:
            for i, addr in enumerate(getattr(self, role)):
                yield role, i, addr

    @classmethod
    def parse(cls, text: str) -> ClusterSpec:
        """From JSON text, a path to a JSON file, or a full TF_CONFIG document."""
        source = text
        path = Path(text)
        if not text.lstrip().startswith("{") and path.exists():
            source = path.read_text()
        try:
            data = json.loads(source)
        except json.JSONDecodeError as exc:
            raise ValueError(f"cluster spec is neither JSON nor a JSON file: {exc}") from exc
        return cls.from_dict(data.get("cluster", data))

    @classmethod
    def from_dict(cls, data: Mapping[str, Sequence[str]]) -> ClusterSpec:
        """From the ``cluster`` part of TF_CONFIG (role -> addresses)."""
        unknown = set(data) - set(ROLES)
        if unknown:
            raise ValueError(f"unknown roles in cluster spec: {sorted(unknown)} (known: {', '.join(ROLES)})")
        return cls(**{role: tuple(data.get(role, ())) for role in ROLES})

    @classmethod
    def local(cls, *, host: str, chief: int, ps: int, workers: int) -> ClusterSpec:
        """Free ports on ``host`` for the given counts."""
        ports = free_ports(host, chief + ps + workers)
        addrs = [f"{host}:{p}" for p in ports]
        return cls(
            chief=tuple(addrs[:chief]),
            ps=tuple(addrs[chief : chief + ps]),
            worker=tuple(addrs[chief + ps :]),
        )


def _die_with_parent() -> None:
    """preexec_fn: the kernel SIGKILLs this child when the launching thread's process dies."""
    libc = ctypes.CDLL("libc.so.6", use_errno=True)
    libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
    os.setpgrp()  # Ctrl-C reaches the launcher only; it stops the children itself


class NodeLost(RuntimeError):
    """A cluster task exited unexpectedly."""

    def __init__(self, role: str, index: int, address: str, returncode: int | None, log_path: Path):
        self.role, self.index, self.address, self.returncode = role, index, address, returncode
        self.log_path = log_path
        how = (
            f"signal {-returncode}"
            if returncode is not None and returncode < 0
            else f"exit code {returncode}"
        )
        super().__init__(f"{role}:{index} at {address} was lost ({how}); its log: {log_path}")


@dataclass
class Node:
    """One launched task."""

    role: str
    index: int
    address: str
    argv: list[str]
    env: dict[str, str]
    log_path: Path
    process: subprocess.Popen[bytes] | None = None
    restarts: int = 0
    supervised: bool = False

    @property
    def name(self) -> str:
        return f"{self.role}:{self.index}"

    @property
    def returncode(self) -> int | None:
        return self.process.poll() if self.process else None

    @property
    def pid(self) -> int | None:
        return self.process.pid if self.process else None

    def alive(self) -> bool:
        return self.process is not None and self.process.poll() is None


@dataclass
class LocalCluster:
    """Starts nodes as child processes, supervises them, and stops them all (by PID) on exit."""

    run_dir: Path
    restart_roles: frozenset[str] = frozenset()
    restart_delay_s: float = 2.0
    on_event: Callable[[str], None] = field(default=lambda msg: log.info(msg))
    nodes: list[Node] = field(default_factory=list)
    lost: list[NodeLost] = field(default_factory=list)
    _stop: threading.Event = field(default_factory=threading.Event)
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _supervisor: threading.Thread | None = None

    def add(
        self, *, role: str, index: int, address: str, argv: Sequence[str], env: Mapping[str, str]
    ) -> Node:
        """Register a node to launch (``argv`` runs it, ``env`` is added to this process's environment)."""
        self.run_dir.mkdir(parents=True, exist_ok=True)
        node = Node(role, index, address, list(argv), dict(env), self.run_dir / f"{role}-{index}.log")
        self.nodes.append(node)
        return node

    def _spawn(self, node: Node) -> None:
        env = {**os.environ, **node.env}
        with open(node.log_path, "ab") as out:
            node.process = subprocess.Popen(
                node.argv,
                env=env,
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                preexec_fn=_die_with_parent,
            )
        self.on_event(f"started {node.role}:{node.index} at {node.address} pid={node.pid}")
        self.write_pids()

    def write_pids(self) -> None:
        """``pids.json`` in the run folder: every PID this launcher ever started (for operators and tests)."""
        path = self.run_dir / "pids.json"
        known: dict[str, list[int]] = json.loads(path.read_text()) if path.exists() else {}
        for n in self.nodes:
            if n.pid is not None:
                known.setdefault(f"{n.role}:{n.index}", [])
                if n.pid not in known[f"{n.role}:{n.index}"]:
                    known[f"{n.role}:{n.index}"].append(n.pid)
        known["launcher"] = [os.getpid()]
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps(known))
        tmp.replace(path)

    def start(self, nodes: Sequence[Node], *, timeout_s: float) -> None:
        """Launch server nodes, wait until each listens, then supervise them (restart or record losses)."""
        for node in nodes:
            node.supervised = True
            self._spawn(node)
        self.wait_listening(nodes, timeout_s=timeout_s)
        if self._supervisor is None:
            self._supervisor = threading.Thread(
                target=self._supervise, name="cluster-supervisor", daemon=True
            )
            self._supervisor.start()

    def launch(self, node: Node) -> None:
        """(Re)launch a node the caller watches itself (a chief, a sync worker)."""
        if node.process is not None:
            node.restarts += 1
        self._spawn(node)

    def wait_listening(self, nodes: Sequence[Node], *, timeout_s: float) -> None:
        """Block until every node accepts connections; fail naming the first that died or never listened."""
        deadline = time.monotonic() + timeout_s
        pending = list(nodes)
        while pending:
            for node in list(pending):
                if not node.alive():
                    rc = node.process.returncode if node.process else None
                    raise NodeLost(node.role, node.index, node.address, rc, node.log_path)
                if is_listening(node.address):
                    pending.remove(node)
            if pending and time.monotonic() > deadline:
                names = ", ".join(f"{n.role}:{n.index} ({n.address})" for n in pending)
                raise TimeoutError(
                    f"cluster nodes not listening after {timeout_s:.0f}s: {names}; see {self.run_dir}"
                )
            if pending:
                time.sleep(0.1)
        self.on_event(f"{len(nodes)} node(s) listening")

    def _supervise(self) -> None:
        # Restarts happen in this thread, which lives until stop(): PDEATHSIG is tied to the spawning thread.
        while not self._stop.wait(0.2):
            for node in self.nodes:
                if not node.supervised or node.process is None or node.alive():
                    continue
                with self._lock:
                    if self._stop.is_set():
                        return
                    err = NodeLost(
                        node.role, node.index, node.address, node.process.returncode, node.log_path
                    )
                    if node.role not in self.restart_roles:
                        if not any(e.role == node.role and e.index == node.index for e in self.lost):
                            self.lost.append(err)
                            self.on_event(str(err))
                        continue
                    self.on_event(f"{err}; relaunching in {self.restart_delay_s:.0f}s on the same address")
                    if self._stop.wait(self.restart_delay_s):
                        return
                    node.restarts += 1
                    self._spawn(node)

    def first_loss(self, role: str | None = None) -> NodeLost | None:
        """The first unrecovered loss (optionally of one role)."""
        for err in self.lost:
            if role is None or err.role == role:
                return err
        return None

    def stop(self, grace_s: float = 5.0) -> None:
        """Terminate every node this launcher started, then kill the ones still alive; reap all."""
        self._stop.set()
        with self._lock:
            for node in self.nodes:
                if node.alive() and node.process is not None:
                    node.process.terminate()
            deadline = time.monotonic() + grace_s
            for node in self.nodes:
                if node.process is None:
                    continue
                try:
                    node.process.wait(timeout=max(0.0, deadline - time.monotonic()))
                except subprocess.TimeoutExpired:
                    node.process.kill()
                    node.process.wait()
        if self._supervisor is not None and self._supervisor is not threading.current_thread():
            self._supervisor.join(timeout=5)
        self.on_event("cluster stopped")

    def __enter__(self) -> LocalCluster:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def node_argv(*, role: str, index: int, spec: ClusterSpec) -> list[str]:
    """The command that runs one TF server node (what each machine of a real cluster runs)."""
    return [
        sys.executable,
        "-m",
        "service.cli",
        "cluster",
        "node",
        "--role",
        role,
        "--index",
        str(index),
        "--cluster",
        json.dumps(spec.as_dict()),
    ]


def chief_argv(job_file: Path) -> list[str]:
    """The async chief: connects to the ps/worker nodes named in the job file and trains."""
    return [sys.executable, "-m", "service.cli", "cluster", "chief", "--job", str(job_file)]


def sync_worker_argv(job_file: Path, index: int) -> list[str]:
    """One synchronous (all-reduce) worker; index 0 acts as chief."""
    return [
        sys.executable,
        "-m",
        "service.cli",
        "cluster",
        "sync-worker",
        "--job",
        str(job_file),
        "--index",
        str(index),
    ]


def child_env() -> dict[str, str]:
    """Environment for TF children: quiet logs (no start-up banner, an operator's values kept); never
    TF_NUM_INTEROP_THREADS=1 (deadlocks PS training)."""
    from core.logs import TF_QUIET_ENV

    return {**{k: os.environ.get(k, v) for k, v in TF_QUIET_ENV.items()}, "PYTHONUNBUFFERED": "1"}
