"""``driftwarden serve``'s HTTP protocol: a response's head and body leave the server in one write."""

from __future__ import annotations

import asyncio
import socket
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest
import uvicorn
from uvicorn.importer import import_from_string

from core.network import free_port
from service.serving.protocol import PROTOCOL, JoinedWrites, OneWriteProtocol


class Socket(asyncio.Transport):
    """The socket's transport, as far as the tests look at it: what was written, in how many writes."""

    def __init__(self) -> None:
        super().__init__()
        self.sent: list[bytes] = []
        self.closed = False
        self.aborted = False

    def write(self, data: Any) -> None:
        self.sent.append(bytes(data))

    def is_closing(self) -> bool:
        return self.closed

    def close(self) -> None:
        self.closed = True

    def abort(self) -> None:
        self.closed = self.aborted = True


def test_writes_made_in_one_round_of_the_loop_leave_as_one() -> None:
    async def main() -> tuple[list[bytes], list[bytes], list[bytes]]:
        sock = Socket()
        joined = JoinedWrites(sock, asyncio.get_running_loop())
        joined.write(b"HTTP/1.1 200 OK\r\n\r\n")
        joined.write(b"body")
        held = list(sock.sent)  # nothing on the socket yet
        await asyncio.sleep(0)  # the loop's next round sends what is held
        after_round = list(sock.sent)
        joined.write(b"more")
        joined.close()  # closing sends what is held first
        return held, after_round, sock.sent

    held, after_round, sent = asyncio.run(main())
    assert held == []
    assert after_round == [b"HTTP/1.1 200 OK\r\n\r\nbody"]
    assert sent == [b"HTTP/1.1 200 OK\r\n\r\nbody", b"more"]


def test_nothing_is_written_to_a_closed_socket_and_abort_drops_what_is_held() -> None:
    async def main() -> tuple[list[bytes], bool, int]:
        sock = Socket()
        joined = JoinedWrites(sock, asyncio.get_running_loop())
        joined.write(b"lost")
        sock.closed = True  # the peer went away
        await asyncio.sleep(0)
        joined.write(b"dropped")
        joined.abort()
        await asyncio.sleep(0)
        return sock.sent, sock.aborted, joined.writes

    assert asyncio.run(main()) == ([], True, 0)


async def _app(scope: dict[str, Any], receive: Any, send: Any) -> None:
    """``/`` answers a fixed body; ``/stream`` three chunks, the loop turning between them."""
    if scope["type"] != "http":
        return
    await receive()
    chunks = [b"one ", b"two ", b"three"] if scope["path"] == "/stream" else [b"hello"]
    headers = [(b"content-type", b"text/plain")]
    if scope["path"] != "/stream":
        headers.append((b"content-length", b"5"))
    await send({"type": "http.response.start", "status": 200, "headers": headers})
    for i, chunk in enumerate(chunks):
        await send({"type": "http.response.body", "body": chunk, "more_body": i < len(chunks) - 1})
        await asyncio.sleep(0)


@pytest.fixture
def server() -> Iterator[tuple[uvicorn.Server, list[OneWriteProtocol]]]:
    """uvicorn with the protocol ``serve`` names, in a thread; the connections it made."""
    made: list[OneWriteProtocol] = []

    class Recorded(OneWriteProtocol):
        def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
            made.append(self)
            super().connection_made(transport)

    assert import_from_string(PROTOCOL) is OneWriteProtocol
    config = uvicorn.Config(
        _app, host="127.0.0.1", port=free_port(), http=Recorded, log_level="warning", lifespan="off"
    )
    srv = uvicorn.Server(config)
    thread = threading.Thread(target=srv.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not srv.started:
        assert thread.is_alive() and time.monotonic() < deadline, "server did not start"
        time.sleep(0.02)
    yield srv, made
    srv.should_exit = True
    thread.join(30)


def _exchange(sock: socket.socket, path: str, until: bytes) -> bytes:
    sock.sendall(f"GET {path} HTTP/1.1\r\nhost: x\r\n\r\n".encode())
    got = b""
    while not got.endswith(until):
        chunk = sock.recv(65536)
        assert chunk, f"connection closed after {got!r}"
        got += chunk
    return got


def test_each_answer_leaves_in_one_write_and_keep_alive_and_streaming_still_work(
    server: tuple[uvicorn.Server, list[OneWriteProtocol]],
) -> None:
    srv, made = server
    port = srv.config.port
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        first = _exchange(sock, "/", b"hello")
        second = _exchange(sock, "/", b"hello")  # the same keep-alive connection
        streamed = _exchange(sock, "/stream", b"0\r\n\r\n")
    assert first.startswith(b"HTTP/1.1 200 OK\r\n") and first.endswith(b"\r\n\r\nhello")
    assert second.startswith(b"HTTP/1.1 200 OK\r\n") and second.endswith(b"\r\n\r\nhello")
    assert b"transfer-encoding: chunked" in streamed
    assert b"one " in streamed and b"two " in streamed and b"three" in streamed
    (protocol,) = made
    transport = protocol.transport
    assert isinstance(transport, JoinedWrites)
    # two answers of one write each; the streamed one: its head with the first chunk, then one per chunk
    assert transport.writes == 2 + 3
