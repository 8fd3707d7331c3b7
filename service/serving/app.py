"""The FastAPI application: wiring of settings, database, model manager, log writer and routes."""

from __future__ import annotations

import asyncio
import gc
import hashlib
import logging
import re
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path

from fastapi import FastAPI, Request, Response
from fastapi.exceptions import RequestValidationError
from starlette.exceptions import HTTPException as StarletteHTTPException

from access.verifier import CachedLinkKey, CachedVerifier
from alerts.flows import install as install_alerts
from alerts.flows import seed_rules
from alerts.scheduled import start_outbox_retention, start_sender
from alerts.views import router as alerts_router
from core.config import Settings, get_settings, weak_admin_token
from core.database import open_database
from core.errors import DomainError
from core.http import error_response, request_id_of
from core.logs import setup_logging
from core.memory import fix_mmap_threshold
from monitors.scheduled import start_in_app as start_monitors
from monitors.views import router as monitors_router
from predictions.scheduled import start_retention
from predictions.spool import Spool
from predictions.writer import LogWriter, writer_engine
from registry.views import router as registry_router
from service.serving import open_inference, operations, tf_serving
from service.serving.batcher import Runner
from service.serving.docs import mount_docs
from service.serving.flows import AppState
from service.serving.health import start_observability
from service.serving.manager import ModelManager
from service.serving.metrics import Metrics, NullMetrics
from service.serving.openapi import allowed_methods, document, guard_methods
from training.scheduled import start_in_app as start_worker
from training.views import router as training_router

log = logging.getLogger("driftwarden.serving")

DESCRIPTION = """
Predictions from the model registry's SavedModels over two wire protocols that existing clients speak:

* **TensorFlow Serving REST** (`/v1/models/...`): `:predict` in row (`instances`) or columnar (`inputs`)
  format.
* **Open Inference Protocol v2** (`/v2/...`, KServe/Triton): typed tensors; stock v2 clients work unmodified.

Every request is checked against the version's input contract (a violation answers **400** naming the row,
the feature and the rule), every output against the output contract, and every prediction is logged with
an id (`prediction_ids`) that ground truth can later be attached to (`POST /v1/models/{name}/feedback`).
"""


def spool_dir(settings: Settings, url: str) -> Path:
    """One spool folder per database, so that replays never cross databases."""
    return settings.spool_path / hashlib.sha256(url.encode()).hexdigest()[:12]


def _metrics(cfg: Settings) -> Metrics:
    """The app's metrics; other domains' collectors join every scrape through ``metrics.register``."""
    if not cfg.metrics_enabled:
        return NullMetrics()
    return Metrics(max_features=cfg.metrics_max_features, snapshot_dir=cfg.metrics_dir)


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
        url = cfg.database_url.get_secret_value()
        db = await asyncio.to_thread(open_database, url, settings=cfg)
        if loader is None:
            from registry.saved_model import limit_threads
            from registry.saved_model import load as tf_load

            threads = limit_threads(intra_op=cfg.model_threads)  # before any model is loaded
            log.info("model calls use %s", f"{threads} thread(s)" if threads else "one thread per core")
            model_loader: Callable[[Path], Runner] = tf_load
        else:
            model_loader = loader
        metrics = _metrics(cfg)
        writer = None
        if cfg.prediction_log_enabled:
            writer = LogWriter(
                engine=writer_engine(url),
                # one spool slot per process (--workers N)
                spool=Spool.claim(spool_dir(cfg, url), max_bytes=cfg.spool_max_bytes),
                durability=cfg.log_durability,
                queue_max_rows=cfg.log_queue_max_rows,
                batch_max_rows=cfg.log_batch_max_rows,
                flush_interval_s=cfg.log_flush_interval_ms / 1000.0,
                commit_timeout_s=cfg.log_commit_timeout_s,
                retry_interval_s=cfg.log_retry_interval_s,
            )
            writer.start()
            metrics.watch_writer(writer)
        manager = ModelManager(
            db=db,
            loader=model_loader,
            only=cfg.serve_models,
            poll_interval_s=cfg.model_poll_interval_s,
            batch_max_rows=cfg.batch_max_rows,
            batch_max_wait_s=cfg.batch_max_wait_ms / 1000.0,
            batch_inline_rows=cfg.batch_inline_rows,
            metrics=metrics,
        )
        await manager.start()
        metrics.start()  # --workers N: this process's snapshots for the scrapes of the others
        # TensorFlow leaves ~10^6 long-lived Python objects; without this every full collection walks them
        # all (a stall of 100+ ms under load). New objects are still collected as usual.
        gc.collect()
        gc.freeze()
        app.state.dw = AppState(settings=cfg, db=db, manager=manager, writer=writer, metrics=metrics)
        app.state.verifier = CachedVerifier(db=db, ttl_s=cfg.token_cache_s)  # core.http.require_scope
        # core.http.require_scope_or_signed_link: the key of the signed report links
        app.state.link_keys = CachedLinkKey(db=db, settings=cfg, ttl_s=cfg.token_cache_s)
        install_alerts()  # the alert rules act on every monitor run, health pass and finished job
        await asyncio.to_thread(seed_rules, db=db, settings=cfg)  # DRIFTWARDEN_ALERT_RULES_FILE, if set
        retention = start_retention(app.state.dw)
        monitors = start_monitors(app.state.dw)  # drift scheduler; None when monitor_enabled is off
        app.state.health = start_observability(app.state.dw)  # health checks, drift series, process metrics
        sender = start_sender(app.state.dw)  # the webhook outbox; None when webhook_sender_enabled is off
        outbox_retention = start_outbox_retention(app.state.dw)  # delivered/dead messages after N days
        worker = await asyncio.to_thread(start_worker, app.state.dw)  # embedded retraining worker, or None
        log.info(
            "serving %s; prediction log %s",
            sorted(manager.models) or "no models yet",
            f"on ({cfg.log_durability})" if writer else "off",
        )
        if (weak := weak_admin_token(cfg)) is not None:
            log.warning(weak)
        try:
            yield
        finally:
            if retention is not None:
                retention.cancel()
            if monitors is not None:
                monitors.cancel()
            for task in (sender, outbox_retention):
                if task is not None:
                    task.cancel()
            if worker is not None:  # a running job goes back to the queue (its lease is released)
                await asyncio.to_thread(worker.stop, cfg.shutdown_timeout_s)
            app.state.health.close()
            await manager.close()
            if writer is not None:
                await asyncio.to_thread(writer.close, cfg.shutdown_timeout_s)
                s = writer.stats
                log.info(
                    "prediction log closed: written=%d replayed=%d spooled=%d left_in_spool=%d dropped=%d"
                    " rejected=%d",
                    s.rows_written,
                    s.rows_replayed,
                    s.rows_spooled,
                    writer.spool.pending_rows,
                    s.rows_dropped,
                    s.rows_rejected,
                )
                writer.engine.dispose()
            metrics.close()
            db.dispose()

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
    app.add_exception_handler(Exception, _unexpected)
    return app


def worker_app() -> FastAPI:
    """The app factory of ``driftwarden serve`` (uvicorn ``--factory``): logging and the C allocator's mmap
    threshold set up in this process (a worker under ``--workers N`` is a fresh interpreter), then
    :func:`create_app` from the environment."""
    setup_logging()
    settings = get_settings()
    # before anything allocates: large freed buffers (the monitor's windows) go back to the system
    fix_mmap_threshold(settings.malloc_mmap_threshold_kb * 1024)
    return create_app(settings)


async def _domain_error(request: Request, exc: DomainError) -> Response:
    """Every domain's errors, answered in one place: their status and their one-line message."""
    response = error_response(exc.status_code, str(exc), request_id_of(request))
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
    log.exception("unexpected error on %s %s", request.method, request.url.path)
    return error_response(500, f"internal error ({type(exc).__name__})", request_id_of(request))
