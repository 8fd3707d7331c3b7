"""The retraining API's test app (routes and an admin token) and a client for it."""

from __future__ import annotations

import threading
import time

import httpx
import uvicorn
from fastapi import FastAPI, Request, Response
from fastapi.exceptions import RequestValidationError

from core.config import Settings
from core.database import Database
from core.errors import DomainError
from core.http import error_response, request_id_of
from core.network import free_port
from core.runtime import Runtime
from training.retraining.views import router

TOKEN = "retrain-admin"


AUTH = {"Authorization": f"Bearer {TOKEN}"}


def build_app(settings: Settings, db: Database) -> FastAPI:
    app = FastAPI()
    app.include_router(router)

    async def domain_error(request: Request, exc: Exception) -> Response:
        assert isinstance(exc, DomainError)
        return error_response(exc.status_code, str(exc), request_id_of(request))

    async def validation_error(request: Request, exc: Exception) -> Response:
        assert isinstance(exc, RequestValidationError)
        parts = ["{}: {}".format(".".join(str(x) for x in e["loc"]), e["msg"]) for e in exc.errors()]
        return error_response(400, "; ".join(parts), request_id_of(request))

    app.add_exception_handler(DomainError, domain_error)
    app.add_exception_handler(RequestValidationError, validation_error)
    app.state.dw = Runtime(settings=settings, db=db)
    return app


class Api:
    def __init__(self, app: FastAPI) -> None:
        self.port = free_port()
        self.server = uvicorn.Server(
            uvicorn.Config(app, host="127.0.0.1", port=self.port, log_level="warning")
        )
        self.thread = threading.Thread(target=self.server.run, daemon=True)

    def __enter__(self) -> httpx.Client:
        self.thread.start()
        deadline = time.monotonic() + 30
        while not self.server.started:
            assert self.thread.is_alive() and time.monotonic() < deadline, "server did not start"
            time.sleep(0.02)
        self.client = httpx.Client(base_url=f"http://127.0.0.1:{self.port}", timeout=30, headers=AUTH)
        return self.client

    def __exit__(self, *_: object) -> None:
        self.client.close()
        self.server.should_exit = True
        self.thread.join(30)
