"""The API process's components, each under the start contract of :mod:`core.lifecycle`: an async context
manager that starts the component on entry and stops it on exit. The app's lifespan
(:func:`service.serving.app.create_app`) enters them on one ``AsyncExitStack``."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path

from sqlalchemy import Engine

from alerts.scheduled import start_outbox_retention, start_sender
from core.config import Settings
from core.database import Database, open_database
from core.lifecycle import Component, periodic
from core.runtime import Runtime
from monitors.scheduled import start_in_app as start_monitors
from predictions.lake.setup import open_sink
from predictions.scheduled import start_retention
from predictions.service.pairing import pairing_engine
from predictions.spool import Spool, spool_dir
from predictions.writer import LogWriter, writer_engine
from service.serving.batcher import Runner
from service.serving.cloudevents import start_sweeps
from service.serving.flows import AppState
from service.serving.health import Observability, start_observability
from service.serving.manager import ModelManager
from service.serving.metrics import Metrics, NullMetrics
from training.retraining.scheduled import start_in_app as start_worker
from training.retraining.worker import Worker

log = logging.getLogger("driftwarden.serving")


@asynccontextmanager
async def database(cfg: Settings) -> AsyncIterator[Database]:
    """The database, opened (and its schema checked) in a worker thread; disposed of on exit."""
    db = await asyncio.to_thread(open_database, cfg.database_url.get_secret_value(), settings=cfg)
    try:
        yield db
    finally:
        db.dispose()


@asynccontextmanager
async def serving_metrics(cfg: Settings) -> AsyncIterator[Metrics]:
    """The app's metrics; other domains' collectors join every scrape through ``metrics.register``.

    Entered before the log writer and the model manager, so that its exit (the last snapshot of
    ``--workers N``) comes after theirs and carries their last counts.
    """
    metrics: Metrics = (
        Metrics(max_features=cfg.metrics_max_features, snapshot_dir=cfg.metrics_dir)
        if cfg.metrics_enabled
        else NullMetrics()
    )
    try:
        yield metrics
    finally:
        metrics.close()


@asynccontextmanager
async def log_writer(cfg: Settings, metrics: Metrics) -> AsyncIterator[LogWriter]:
    """The prediction log's writer thread, watched by ``metrics``; on exit it writes what is queued (within
    ``shutdown_timeout_s``) and reports its counts."""
    url = cfg.database_url.get_secret_value()
    # the lake (lake_mode also/only): a bad lake_url stops the start; an unwritable lake is a failing check
    lake = await asyncio.to_thread(open_sink, cfg, strict=False)
    engine = writer_engine(url)
    try:
        writer = LogWriter(
            engine=engine,
            # one spool slot per process (--workers N)
            spool=Spool.claim(spool_dir(cfg.spool_path, url), max_bytes=cfg.spool_max_bytes),
            durability=cfg.log_durability,
            queue_max_rows=cfg.log_queue_max_rows,
            batch_max_rows=cfg.log_batch_max_rows,
            flush_interval_s=cfg.log_flush_interval_ms / 1000.0,
            commit_timeout_s=cfg.log_commit_timeout_s,
            retry_interval_s=cfg.log_retry_interval_s,
            lake=lake,
            database=cfg.lake_mode != "only",
        )
    except BaseException:
        engine.dispose()
        if lake is not None:
            lake.wal.close()
        raise
    try:
        writer.start()
        metrics.watch_writer(writer)
        yield writer
    finally:
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
        engine.dispose()


@asynccontextmanager
async def pairing(cfg: Settings) -> AsyncIterator[Engine]:
    """The CloudEvents pairing's engine (``predictions.service.pairing``), disposed on exit."""
    url = cfg.database_url.get_secret_value()
    engine = pairing_engine(url, wait_for_disk=cfg.log_durability == "durable")
    try:
        yield engine
    finally:
        engine.dispose()


@asynccontextmanager
async def model_manager(
    cfg: Settings, db: Database, loader: Callable[[Path], Runner], metrics: Metrics
) -> AsyncIterator[ModelManager]:
    """The served models, loaded from the registry and followed; on exit every version finishes its queued
    requests."""
    manager = ModelManager(
        db=db,
        loader=loader,
        only=cfg.serve_models,
        poll_interval_s=cfg.model_poll_interval_s,
        batch_max_rows=cfg.batch_max_rows,
        batch_max_wait_s=cfg.batch_max_wait_ms / 1000.0,
        batch_inline_rows=cfg.batch_inline_rows,
        metrics=metrics,
    )
    try:
        await manager.start()
        yield manager
    finally:
        await manager.close()


@asynccontextmanager
async def observability(state: AppState) -> AsyncIterator[Observability]:
    """The health checks and the series read from the database (:func:`start_observability`)."""
    health = start_observability(state)
    try:
        yield health
    finally:
        health.close()


@asynccontextmanager
async def embedded_worker(runtime: Runtime) -> AsyncIterator[Worker | None]:
    """The retraining worker inside the API process, or None; on exit its running job goes back to the queue
    (its lease is released)."""
    worker = await asyncio.to_thread(start_worker, runtime)
    try:
        yield worker
    finally:
        if worker is not None:
            await asyncio.to_thread(worker.stop, runtime.settings.shutdown_timeout_s)


def periodic_jobs(state: AppState) -> list[Component[asyncio.Task[None] | None]]:
    """Every domain's periodic jobs in the API process: each starts when entered (its handle None when
    switched off) and is cancelled on exit."""
    return [
        periodic(start_retention, state),  # the prediction log's retention
        periodic(start_monitors, state),  # the drift scheduler
        periodic(start_sender, state),  # the webhook outbox
        periodic(start_outbox_retention, state),  # delivered/dead messages after N days
        periodic(start_sweeps, state),  # CloudEvent pairs whose wait is over, halves spooled
    ]
