"""The HTTP protocol of ``driftwarden serve``: uvicorn's httptools protocol, each answer sent in one write.

uvicorn writes a response's head (status line and headers) to the socket when the app starts the response and
its body in a second write: two system calls and, on the TCP_NODELAY socket, two segments, so that the client
wakes for the head, finds no body and waits again. py-spy on a lone client (wrk -c1) put 19 % of the event
loop's GIL samples in those two writes, most of it in the first. Here a connection's writes are held until the
response is complete (``on_response_complete``) and leave as one write; a write not followed by the end of a
response (a streamed body's chunk, ``100 Continue``, an error page uvicorn writes itself) leaves at the latest
in the event loop's next round.
"""

from __future__ import annotations

import asyncio
from typing import Any

from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

PROTOCOL = "service.serving.protocol:OneWriteProtocol"  # uvicorn's ``http=`` (importable in every worker)


class JoinedWrites(asyncio.Transport):
    """A transport whose writes are held until :meth:`flush` (or the loop's next round) and leave as one."""

    def __init__(self, transport: asyncio.Transport, loop: asyncio.AbstractEventLoop) -> None:
        super().__init__()
        self.transport = transport
        self.loop = loop
        self.held: list[bytes | bytearray | memoryview] = []
        self.writes = 0  # writes made on the socket's transport

    def write(self, data: bytes | bytearray | memoryview) -> None:
        if not self.held:
            self.loop.call_soon(self.flush)
        self.held.append(data)

    def writelines(self, list_of_data: Any) -> None:
        for data in list_of_data:
            self.write(data)

    def flush(self) -> None:
        """Send what is held, in one write."""
        if not self.held:
            return
        held, self.held = self.held, []
        if not self.transport.is_closing():
            self.writes += 1
            self.transport.write(held[0] if len(held) == 1 else b"".join(held))

    def close(self) -> None:
        self.flush()
        self.transport.close()

    def abort(self) -> None:
        self.held = []
        self.transport.abort()

    def write_eof(self) -> None:
        self.flush()
        self.transport.write_eof()

    def can_write_eof(self) -> bool:
        return self.transport.can_write_eof()

    def is_closing(self) -> bool:
        return self.transport.is_closing()

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return self.transport.get_extra_info(name, default)

    def set_protocol(self, protocol: asyncio.BaseProtocol) -> None:
        self.transport.set_protocol(protocol)

    def get_protocol(self) -> asyncio.BaseProtocol:
        return self.transport.get_protocol()

    def is_reading(self) -> bool:
        return self.transport.is_reading()

    def pause_reading(self) -> None:
        self.transport.pause_reading()

    def resume_reading(self) -> None:
        self.transport.resume_reading()

    def set_write_buffer_limits(self, high: int | None = None, low: int | None = None) -> None:
        self.transport.set_write_buffer_limits(high, low)

    def get_write_buffer_size(self) -> int:
        return self.transport.get_write_buffer_size() + sum(len(data) for data in self.held)

    def get_write_buffer_limits(self) -> tuple[int, int]:
        return self.transport.get_write_buffer_limits()


class OneWriteProtocol(HttpToolsProtocol):
    """uvicorn's httptools protocol over :class:`JoinedWrites`: a response's head and body in one write."""

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(JoinedWrites(transport, self.loop))

    def on_response_complete(self) -> None:
        transport = self.transport
        if isinstance(transport, JoinedWrites):
            transport.flush()
        super().on_response_complete()
