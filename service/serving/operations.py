"""Operations routes: serving and prediction log status, Prometheus metrics."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request, Response
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from core.http import json_response
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
            write_errors=s.write_errors,
            database_ok=s.database_ok,
            last_error=s.last_error,
        )
    return json_response(
        {"models": models, "prediction_log": log, "registry_error": state.manager.last_refresh_error}
    )


@router.get("/metrics", summary="Prometheus metrics", tags=["Operations"])
async def metrics(request: Request) -> Response:
    """Counters of requests, predictions, contract flags and violations, and the prediction log."""
    return Response(generate_latest(app_state(request).metrics.registry), media_type=CONTENT_TYPE_LATEST)
