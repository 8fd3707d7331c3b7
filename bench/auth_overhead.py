"""What the scope check costs a request, in process (ASGI calls, no network, no model).

    .venv/bin/python bench/auth_overhead.py [--calls 3000] [--rounds 20]

Three routes that do nothing else: no check, the check as a FastAPI dependency (``require_scope``: what
every protected route uses) and the check inline (what ``:predict`` and ``/infer`` use, paying one setting
read when predictions are open). Each variant runs with predictions open and with them needing a token
(the bootstrap admin token sent, so no database read). Prints the median microseconds per request over
interleaved rounds.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time
from collections.abc import MutableMapping
from types import SimpleNamespace
from typing import Any

from fastapi import FastAPI, Request, Response
from pydantic import SecretStr

from core.auth import Scope
from core.config import Settings
from core.http import authorize, require_scope

TOKEN = "t" * 43


def build(required: bool) -> FastAPI:
    app = FastAPI()

    @app.post("/plain/{name}")
    async def plain(request: Request, name: str) -> Response:
        return Response(b"{}")

    @app.post("/dependency/{name}", dependencies=[require_scope(Scope.PREDICT)])
    async def dependency(request: Request, name: str) -> Response:
        return Response(b"{}")

    @app.post("/inline/{name}")
    async def inline(request: Request, name: str) -> Response:
        if request.app.state.dw.settings.predict_requires_token:
            await authorize(request, Scope.PREDICT)
        return Response(b"{}")

    settings = Settings(predict_requires_token=required, admin_token=SecretStr(TOKEN))
    app.state.dw = SimpleNamespace(settings=settings)
    return app


async def call(app: FastAPI, path: str) -> None:
    scope: dict[str, Any] = {
        "type": "http",
        "method": "POST",
        "path": path,
        "raw_path": path.encode(),
        "query_string": b"",
        "headers": [(b"authorization", f"Bearer {TOKEN}".encode())],
        "http_version": "1.1",
        "scheme": "http",
        "server": ("bench", 80),
        "client": ("bench", 1),
        "root_path": "",
    }
    sent: list[MutableMapping[str, Any]] = []

    async def receive() -> dict[str, Any]:
        return {"type": "http.request", "body": b"", "more_body": False}

    async def send(message: MutableMapping[str, Any]) -> None:
        sent.append(message)

    await app(scope, receive, send)
    if sent[0]["status"] != 200:
        raise RuntimeError(f"{path}: {sent}")


async def main(calls: int, rounds: int) -> None:
    paths = ("/plain/m", "/dependency/m", "/inline/m")
    for required in (False, True):
        app = build(required)
        for path in paths:
            for _ in range(calls):
                await call(app, path)
        times: dict[str, list[float]] = {p: [] for p in paths}
        for r in range(rounds):
            for path in paths if r % 2 else paths[::-1]:
                t0 = time.perf_counter()
                for _ in range(calls):
                    await call(app, path)
                times[path].append((time.perf_counter() - t0) / calls * 1e6)
        us = {p: statistics.median(v) for p, v in times.items()}
        print(
            f"predict_requires_token={str(required).lower():5}  no check {us['/plain/m']:6.1f} us  "
            f"dependency {us['/dependency/m']:6.1f} us  inline {us['/inline/m']:6.1f} us (median/request)"
        )


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=3000)
    parser.add_argument("--rounds", type=int, default=20)
    args = parser.parse_args()
    asyncio.run(main(args.calls, args.rounds))
