"""Operations routes: serving and prediction log status, Prometheus metrics, liveness and readiness."""

from __future__ import annotations

import asyncio
from typing import Any

from fastapi import APIRouter, Request, Response
from fastapi.responses import PlainTextResponse
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from core.health import readiness
from core.http import json_response, request_id_of
from core.openapi import errors
from service.serving.routing import app_state

router = APIRouter()


@router.get("/status", summary="Serving and prediction log status", tags=["Operations"])
async def status(request: Request) -> Response:
    """Loaded versions per model, and the log writer's counters (queue depth, spool size, rows written,
    rows dropped, which must stay 0)."""
    state = app_state(request)
    models = {
        name: {
            "serving": m.serving,
            "labels": m.labels,
            "loaded": sorted(m.versions),
            "loading": sorted(m.loading),
            "failed": m.failed,
            "batches": {
                str(v): {"calls": lv.batcher.calls, "rows": lv.batcher.rows} for v, lv in m.versions.items()
            },
        }
        for name, m in state.manager.models.items()
    }
    log: dict[str, Any] = {"enabled": state.writer is not None}
    if state.writer is not None:
        w = state.writer
        s = w.stats
        log.update(
            durability=w.durability,
            queue_rows=w.queued_rows,
            spool_rows=w.spool.pending_rows,
            spool_bytes=w.spool.pending_bytes,
            rows_written=s.rows_written,
            rows_replayed=s.rows_replayed,
            rows_spooled=s.rows_spooled,
            rows_dropped=s.rows_dropped,
            rows_rejected=s.rows_rejected,
            write_errors=s.write_errors,
            database_ok=s.database_ok,
            last_error=s.last_error,
        )
        if w.lake is not None:  # lake_mode also/only (predictions.lake.sink)
            k = w.lake.stats
            log["lake"] = {
                "url": w.lake.target.url,
                "database": w.database,
                "ok": k.lake_ok,
                "spool_rows": w.lake.wal.pending_rows,
                "rows_committed": k.rows_committed,
                "labels_committed": k.labels_committed,
                "files_committed": k.files_committed,
                "last_error": k.last_error,
            }
    return json_response(
        {"models": models, "prediction_log": log, "registry_error": state.manager.last_refresh_error}
    )


@router.get(
    "/metrics",
    summary="Prometheus metrics",
    tags=["Operations"],
    responses={200: {"content": {CONTENT_TYPE_LATEST.split(";")[0]: {"schema": {"type": "string"}}}}},
    response_class=PlainTextResponse,
)
async def metrics(request: Request) -> Response:
    """Serving and prediction log metrics (summed over every worker process under `serve --workers N`),
    and every registered collector's series (drift, health, process)."""
    registry = app_state(request).metrics.registry
    # off the event loop: a scrape under --workers N waits for the other workers' fresh snapshots
    return Response(await asyncio.to_thread(generate_latest, registry), media_type=CONTENT_TYPE_LATEST)


@router.get("/healthz", summary="Liveness", tags=["Operations"])
async def healthz() -> Response:
    """200 while the process answers (no database or model access; restart the process when it fails)."""
    return json_response({"status": "alive"})


@router.get(
    "/readyz",
    summary="Readiness, with every health check",
    tags=["Operations"],
    responses=errors(503, e503="A health check fails; `error` names the failing checks"),
)
async def readyz(request: Request) -> Response:
    """200 when every health check passes (database, registry, disks, each served model, the cluster when
    configured); 503 with ``error`` naming the failing checks. Results at most one health interval old."""
    health = request.app.state.health
    results = await asyncio.to_thread(health.monitor.results, max_age_s=health.max_age_s)
    ready, body = readiness(results)
    return json_response(body, 200 if ready else 503, request_id_of(request))
