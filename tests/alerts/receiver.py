"""A real webhook receiver for the tests: an HTTP server in a thread that checks every signature with its
own HMAC code (not the sender's), and that can fail on purpose (500, down, hanging, slow, redirecting). It
notes when each request arrived and how many it was serving at once."""

from __future__ import annotations

import base64
import hashlib
import hmac
import select
import socket
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from core.network import free_port


def expected_signature(secret: str, msg_id: str, timestamp: str, body: bytes) -> str:
    """Standard Webhooks, computed by hand: ``v1,`` + base64(HMAC-SHA256(key, "{id}.{timestamp}.{body}"))."""
    key = base64.b64decode(secret.removeprefix("whsec_"))
    mac = hmac.new(key, f"{msg_id}.{timestamp}.".encode() + body, hashlib.sha256).digest()
    return "v1," + base64.b64encode(mac).decode()


class _Server(ThreadingHTTPServer):
    request_queue_size = 128  # many senders at once: no connection refused for want of a backlog
    daemon_threads = True


@dataclass
class Request:
    msg_id: str
    timestamp: str
    signature: str
    body: bytes
    headers: dict[str, str]
    signature_ok: bool
    arrived: float = 0.0  # time.monotonic() when its body was read


@dataclass
class Receiver:
    """Answers according to ``mode``: ``ok`` (204), ``error`` (500), ``hang`` (no answer until released or
    the sender hangs up), ``slow`` (204 after ``delay_s``), ``redirect`` (307 elsewhere). ``stop()`` takes it
    down (connection refused) and ``start()`` brings it back on the same port. ``in_flight`` counts the
    requests being served (a ``slow`` one until just before its answer is written, so a sender can never
    have seen it end), ``max_in_flight`` the most at once."""

    secret: str
    mode: str = "ok"
    delay_s: float = 0.3
    host: str = "127.0.0.1"  # any address of 127.0.0.0/8 (two receivers may share a port on two of them)
    location: str = "http://127.0.0.1:9/elsewhere"  # where ``redirect`` sends the sender
    port: int = field(default_factory=free_port)
    requests: list[Request] = field(default_factory=list)
    accepted: list[Request] = field(default_factory=list)
    release: threading.Event = field(default_factory=threading.Event)
    in_flight: int = 0
    max_in_flight: int = 0
    _server: ThreadingHTTPServer | None = None
    _lock: threading.Lock = field(default_factory=threading.Lock)

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}/hook"

    def start(self) -> Receiver:
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *_: Any) -> None:
                pass

            def do_POST(self) -> None:  # noqa: N802
                body = self.rfile.read(int(self.headers.get("content-length", "0")))
                arrived = time.monotonic()
                with receiver._lock:
                    receiver.in_flight += 1
                    receiver.max_in_flight = max(receiver.max_in_flight, receiver.in_flight)
                self.left = False
                try:
                    self._serve(body, arrived)
                finally:
                    self._leave()

            def _leave(self) -> None:  # once per request
                if not self.left:
                    self.left = True
                    with receiver._lock:
                        receiver.in_flight -= 1

            def _serve(self, body: bytes, arrived: float) -> None:
                h = {k.lower(): v for k, v in self.headers.items()}
                req = Request(
                    msg_id=h.get("webhook-id", ""),
                    timestamp=h.get("webhook-timestamp", ""),
                    signature=h.get("webhook-signature", ""),
                    body=body,
                    headers=h,
                    signature_ok=hmac.compare_digest(
                        h.get("webhook-signature", ""),
                        expected_signature(
                            receiver.secret, h.get("webhook-id", ""), h.get("webhook-timestamp", ""), body
                        ),
                    ),
                    arrived=arrived,
                )
                with receiver._lock:
                    receiver.requests.append(req)
                mode = receiver.mode
                if mode == "hang":
                    deadline = time.monotonic() + 60
                    while not receiver.release.is_set() and time.monotonic() < deadline:
                        readable, _, _ = select.select([self.connection], [], [], 0.05)
                        if readable and not self.connection.recv(1, socket.MSG_PEEK):
                            return  # the sender hung up (its timeout)
                    return
                if mode == "slow":
                    time.sleep(receiver.delay_s)
                    if req.signature_ok:
                        with receiver._lock:
                            receiver.accepted.append(req)
                    self._leave()  # before the answer: the sender cannot start another one sooner
                    self._answer(204 if req.signature_ok else 401, b"")
                    return
                if mode == "error":
                    self._answer(500, b"receiver is broken")
                elif mode == "redirect":
                    self.send_response(307)
                    self.send_header("location", receiver.location)
                    self.send_header("content-length", "0")
                    self.end_headers()
                elif not req.signature_ok:
                    self._answer(401, b"bad signature")
                else:
                    with receiver._lock:
                        receiver.accepted.append(req)
                    self._answer(204, b"")

            def _answer(self, status: int, text: bytes) -> None:
                self.send_response(status)
                self.send_header("content-length", str(len(text)))
                self.end_headers()
                self.wfile.write(text)

        server = _Server((self.host, self.port), Handler)
        threading.Thread(target=server.serve_forever, daemon=True).start()
        self._server = server
        return self

    def stop(self) -> None:
        if self._server is not None:
            self.release.set()
            self._server.shutdown()
            self._server.server_close()
            self._server = None
            time.sleep(0.05)
            self.release.clear()

    def __enter__(self) -> Receiver:
        return self.start()

    def __exit__(self, *_: object) -> None:
        self.stop()
