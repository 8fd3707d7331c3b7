"""The FastAPI application: wiring of settings, database, model manager, log writer and routes."""

from __future__ import annotations

import asyncio
import gc
import logging
import re
import sys
from collections.abc import AsyncIterator, Callable
from contextlib import AsyncExitStack, asynccontextmanager
from pathlib import Path

from fastapi import FastAPI, Request, Response
from fastapi.exceptions import RequestValidationError
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from access.verifier import CachedLinkKey, CachedVerifier
from alerts.flows import install as install_alerts
from alerts.flows import seed_rules
from alerts.views import router as alerts_router
from core.config import Settings, get_settings, weak_admin_token
from core.database import unavailable
from core.errors import DomainError
from core.http import error_response, request_id_of
from core.logs import setup_logging
from core.memory import fix_mmap_threshold
from monitors.views import router as monitors_router
from registry.views import router as registry_router
from service.serving import cloudevents_route, components, open_inference, operations, tf_serving
from service.serving.batcher import Runner
from service.serving.docs import mount_docs
from service.serving.flows import AppState
from service.serving.openapi import allowed_methods, document, guard_methods
from training.retraining.views import router as training_router

log = logging.getLogger("driftwarden.serving")

# How long another thread may keep the GIL from the event loop (CPython's default: 5 ms). The log writer, the
# model manager's poll and the health checks run Python in threads of their own; a request arriving while one
# of them holds the GIL could wait up to the whole default interval (a suspect of the 4-5 ms p99 of a lone
# client in issue 46; on the shared 2-core machine the measured effect stayed within its noise).
GIL_SWITCH_INTERVAL_S = 0.0005

DESCRIPTION = """
Predictions from the model registry's SavedModels over two wire protocols that existing clients speak:

* **TensorFlow Serving REST** (`/v1/models/...`): `:predict` in row (`instances`) or columnar (`inputs`)
  format.
* **Open Inference Protocol v2** (`/v2/...`, KServe/Triton): typed tensors; stock v2 clients work unmodified.

Every request is checked against the version's input contract (a violation answers **400** naming the row,
the feature and the rule), every output against the output contract, and every prediction is logged with
an id (`prediction_ids`) that ground truth can later be attached to (`POST /v1/models/{name}/feedback`).
"""


def _tf_loader(cfg: Settings) -> Callable[[Path], Runner]:
    """The SavedModel loader, with TensorFlow's thread pools sized before any model is loaded."""
    from registry.saved_model import limit_threads
    from registry.saved_model import load as tf_load

    threads = limit_threads(intra_op=cfg.model_threads)
    log.info("model calls use %s", f"{threads} thread(s)" if threads else "one thread per core")
    return tf_load


def create_app(
    settings: Settings | None = None, *, loader: Callable[[Path], Runner] | None = None
) -> FastAPI:
    """Build the app; nothing heavy happens until the server starts it (lifespan).

    Also the factory of ``uvicorn service.serving.app:create_app --factory`` (``serve --workers N``):
    without arguments it reads the settings from the environment, so every worker builds the same app.
    """
    cfg = settings or get_settings()

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        # every component on one stack: they stop in reverse order, and a failed start stops those started
        async with AsyncExitStack() as stack:
            start = stack.enter_async_context
            db = await start(components.database(cfg))
            model_loader = loader if loader is not None else _tf_loader(cfg)
            metrics = await start(components.serving_metrics(cfg))
            writer = await start(components.log_writer(cfg, metrics)) if cfg.prediction_log_enabled else None
            manager = await start(components.model_manager(cfg, db, model_loader, metrics))
            metrics.start()  # --workers N: this process's snapshots for the scrapes of the others
            # TensorFlow leaves ~10^6 long-lived Python objects; without this every full collection walks
            # them all (a stall of 100+ ms under load). New objects are still collected as usual.
            gc.collect()
            gc.freeze()
            pairing = await start(components.pairing(cfg))
            state = AppState(
                settings=cfg, db=db, manager=manager, writer=writer, metrics=metrics, pairing=pairing
            )
            app.state.dw = state
            # core.http.require_scope: the tokens table behind a cache, with a grace while the database is out
            app.state.verifier = CachedVerifier(db=db, ttl_s=cfg.token_cache_s, grace_s=cfg.token_grace_s)
            # core.http.require_scope_or_signed_link: the key of the signed report links
            app.state.link_keys = CachedLinkKey(db=db, settings=cfg, ttl_s=cfg.token_cache_s)
            install_alerts()  # the alert rules act on every monitor run, health pass and finished job
            await asyncio.to_thread(seed_rules, db=db, settings=cfg)  # DRIFTWARDEN_ALERT_RULES_FILE, if set
            # health checks, drift series, process metrics
            app.state.health = await start(components.observability(state))
            await start(components.embedded_worker(state))  # the retraining worker, when embedded
            for job in components.periodic_jobs(state):
                await start(job)
            log.info(
                "serving %s; prediction log %s",
                sorted(manager.models) or "no models yet",
                f"on ({cfg.log_durability})" if writer else "off",
            )
            if (weak := weak_admin_token(cfg)) is not None:
                log.warning(weak)
            yield

    app = FastAPI(
        title="driftwarden serving",
        description=DESCRIPTION,
        version="0.1.0",
        lifespan=lifespan,
        docs_url=None,  # mount_docs: Swagger UI from the installed package, never from a CDN
        redoc_url=None,  # ReDoc has no offline bundle installed
    )
    mount_docs(app)
    for router in (
        tf_serving.router,
        cloudevents_route.router,
        open_inference.router,
        operations.router,
        registry_router,
        monitors_router,
        alerts_router,
        training_router,
    ):
        app.include_router(router)
    guard_methods(app)
    app.openapi = lambda: document(  # type: ignore[method-assign]
        app, predict_requires_token=cfg.predict_requires_token
    )
    app.add_exception_handler(DomainError, _domain_error)  # type: ignore[arg-type]
    app.add_exception_handler(StarletteHTTPException, _http_error)  # type: ignore[arg-type]
    app.add_exception_handler(RequestValidationError, _validation_error)  # type: ignore[arg-type]
    app.add_exception_handler(Exception, _unexpected)  # what escapes AnswerUnhandled itself
    app.add_middleware(AnswerUnhandled)  # innermost of the middlewares: inside Starlette's error middleware
    return app


class AnswerUnhandled:
    """Answers an exception no route or handler caught (:func:`_unexpected`: a 503 when the database is
    unreachable, else a logged 500) without raising it further, so the client's keep-alive connection stays
    usable: Starlette's ``ServerErrorMiddleware`` answers too but re-raises, and uvicorn then closes the
    connection. An exception after the answer started cannot be answered: it goes on (the connection ends)."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = False

        async def watch(message: Message) -> None:
            nonlocal started
            started = started or message["type"] == "http.response.start"
            await send(message)

        try:
            await self.app(scope, receive, watch)
        except Exception as exc:
            if started:
                raise
            response = await _unexpected(Request(scope, receive), exc)
            await response(scope, receive, send)


def worker_app() -> FastAPI:
    """The app factory of ``driftwarden serve`` (uvicorn ``--factory``): logging, the C allocator's mmap
    threshold and the GIL's switch interval (:data:`GIL_SWITCH_INTERVAL_S`) set up in this process (a worker
    under ``--workers N`` is a fresh interpreter), then :func:`create_app` from the environment."""
    setup_logging()
    sys.setswitchinterval(GIL_SWITCH_INTERVAL_S)
    settings = get_settings()
    # before anything allocates: large freed buffers (the monitor's windows) go back to the system
    fix_mmap_threshold(settings.malloc_mmap_threshold_kb * 1024)
    return create_app(settings)


async def _domain_error(request: Request, exc: DomainError) -> Response:
    """Every domain's errors, answered in one place: their status and their one-line message."""
    details = getattr(exc, "details", {})  # fields beside "error" (e.g. a refused promotion's changes)
    response = error_response(exc.status_code, str(exc), request_id_of(request), **details)
    response.headers.update(getattr(exc, "headers", {}))  # e.g. WWW-Authenticate on a 401
    return response


VERB_PATH = re.compile(r"^/v1/models/[^/]+(?:/(?:versions|labels)/[^/]+)?:([^/:]+)$")


async def _http_error(request: Request, exc: StarletteHTTPException) -> Response:
    message = exc.detail if isinstance(exc.detail, str) else str(exc.detail)
    headers = dict(exc.headers or {})
    verb = VERB_PATH.match(request.url.path)
    posts = exc.status_code == 405 and "POST" in (allowed_methods(request.app, request.scope["path"]) or [])
    if exc.status_code == 405 and verb is not None and verb.group(1) != "predict" and not posts:
        # "credit:classify" matched the GET status route as a model name: no GET to send it with either
        return error_response(
            404,
            f"no route {request.method} {request.url.path}: ':{verb.group(1)}' is not served here; this "
            "server answers :predict (TF Serving's :classify and :regress are not supported)",
            request_id_of(request),
        )
    if exc.status_code == 404:
        message = f"no route {request.method} {request.url.path} ({message})"
    elif exc.status_code == 405:  # Allow: exactly the methods of the path's most specific route
        allowed = allowed_methods(request.app, request.scope["path"]) or headers.get("Allow", "").split(", ")
        headers["Allow"] = ", ".join(allowed)
        wanted = " or ".join(m for m in allowed if m not in ("HEAD", "OPTIONS"))
        message = (
            f"{request.method} is not allowed on {request.url.path}: send the request with {wanted} "
            "(rule: method)"
        )
    response = error_response(exc.status_code, message, request_id_of(request))
    response.headers.update(headers)
    return response


async def _validation_error(request: Request, exc: RequestValidationError) -> Response:
    parts = [
        "{}: {}".format(".".join(str(x) for x in e.get("loc", ())), e.get("msg", "")) for e in exc.errors()
    ]
    return error_response(400, "; ".join(parts) or "invalid request", request_id_of(request))


async def _unexpected(request: Request, exc: Exception) -> Response:
    """Any other exception: the database unreachable is a 503 with ``Retry-After`` (whichever route read it),
    anything else a bug, a 500 with its traceback in the log."""
    if (down := unavailable(exc)) is not None:
        log.warning("database unavailable on %s %s: %s", request.method, request.url.path, exc)
        return await _domain_error(request, down)
    log.exception("unexpected error on %s %s", request.method, request.url.path)
    return error_response(500, f"internal error ({type(exc).__name__})", request_id_of(request))
