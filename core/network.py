"""Loopback networking helpers: free ports and listening checks (one copy for the whole project)."""

from __future__ import annotations

import socket
from contextlib import closing


def free_port(host: str = "127.0.0.1") -> int:
    """A port the OS reports free on ``host`` right now."""
    return free_ports(host, 1)[0]


def free_ports(host: str, count: int) -> list[int]:
    """``count`` distinct ports the OS reports free right now."""
    socks, ports = [], []
    try:
        for _ in range(count):
            s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            s.bind((host, 0))
            socks.append(s)
            ports.append(s.getsockname()[1])
    finally:
        for s in socks:
            s.close()
    return ports


def is_listening(address: str, timeout: float = 0.5) -> bool:
    """True when something accepts TCP connections at ``host:port``."""
    host, port = address.rsplit(":", 1)
    with closing(socket.socket(socket.AF_INET, socket.SOCK_STREAM)) as s:
        s.settimeout(timeout)
        return s.connect_ex((host, int(port))) == 0
