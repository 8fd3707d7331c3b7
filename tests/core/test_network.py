"""Loopback helpers: distinct free ports, and a listening check that tells open from closed."""

from __future__ import annotations

import socket

from core.network import free_port, free_ports, is_listening


def test_free_ports_are_distinct_and_bindable() -> None:
    ports = free_ports("127.0.0.1", 5)
    assert len(set(ports)) == 5
    for port in ports:
        with socket.socket() as s:
            s.bind(("127.0.0.1", port))


def test_is_listening_tells_open_from_closed() -> None:
    port = free_port()
    assert not is_listening(f"127.0.0.1:{port}")
    with socket.socket() as s:
        s.bind(("127.0.0.1", port))
        s.listen()
        assert is_listening(f"127.0.0.1:{port}")
