"""The training cluster's health check: every node of the configured cluster spec accepts connections."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

from core.health import HealthCheck, Status
from core.network import is_listening
from training.cluster.nodes import ClusterSpec

CONNECT_TIMEOUT_S = 1.0


def cluster_checks(spec_text: str | None) -> list[HealthCheck]:
    """``cluster``: one check when a cluster spec is configured (``DRIFTWARDEN_CLUSTER_SPEC``), else none."""
    if not spec_text:
        return []
    text = spec_text

    def check() -> Status:
        spec = ClusterSpec.parse(text)  # re-read each time: the file may change; a bad spec fails the check
        nodes = list(spec.nodes())
        if not nodes:
            return Status(False, "the cluster spec names no node")
        with ThreadPoolExecutor(max_workers=min(len(nodes), 8)) as pool:
            up = list(pool.map(lambda n: is_listening(n[2], timeout=CONNECT_TIMEOUT_S), nodes))
        down = [
            f"{role}:{index} at {addr}" for (role, index, addr), ok in zip(nodes, up, strict=True) if not ok
        ]
        if down:
            return Status(False, f"{len(down)} of {len(nodes)} nodes unreachable: " + ", ".join(down))
        return Status(True, f"{len(nodes)} nodes reachable", float(len(nodes)))

    return [HealthCheck("cluster", check)]
