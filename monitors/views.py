"""Drift routes: latest report (JSON, HTML), history, evaluate now (admin). Thin: parse, call a flow, shape.

Every error is a 4xx ``{"error": ...}`` naming what is wrong (unknown model, no serving version, no
profile, too few predictions in the window, no run yet, a missing token or one without the route's scope):
the flows raise a :class:`monitors.flows.MonitorError` (a ``DomainError``), answered with its status.
"""

from __future__ import annotations

import asyncio
from datetime import datetime
from typing import Annotated

from fastapi import APIRouter, Query, Request, Response
from fastapi.responses import HTMLResponse

from core.auth import Scope
from core.durations import require_duration
from core.http import (
    JsonBody,
    json_response,
    request_id_of,
    require_scope,
    require_scope_or_signed_link,
    runtime,
)
from core.openapi import AUTH, errors, json_body
from core.times import RANGE, parse_time
from monitors import flows
from monitors.config import settings_schema
from monitors.findings import finding_from_dict, headline
from monitors.links import REPORT_PATH
from registry.names import check_name

router = APIRouter(tags=["Drift monitors"])
READ, ADMIN = [require_scope(Scope.READ)], [require_scope(Scope.ADMIN)]
READ_OR_LINK = [require_scope_or_signed_link(Scope.READ)]  # the HTML report: a browser follows a link
# the page's URL may hold a signed link (a credential): no shared cache keeps it, no Referer sends it on
PAGE_HEADERS = {"Cache-Control": "private, no-store", "Referrer-Policy": "no-referrer"}


SETTINGS_BODY = JsonBody(
    limit=256 * 1024,
    rule="monitor settings body limit",
    example='{"window_minutes": 60, "false_alarms_per_30d": 0.5}',
)

NO_REPORT = errors(
    *AUTH, 404, 409, e404="Unknown model", e409="No monitor run yet (or no serving version, no profile)"
)


@router.get(
    "/v1/models/{name}/drift",
    summary="Latest drift report (JSON)",
    description=(
        "The newest run: `report` as stored (with `harm`, `attribution`, `segments` and `weak_slices` when "
        "the run explained its drift) and its `headline`: `ok`, `text`, `findings`, and the summary: "
        "`features` (every feature's verdict, effect and impact, by impact then drift), `harm` (the harm "
        "verdict, null without one) and `causes` (the top three features by impact, with bounds). See "
        'docs/monitoring.md, "Reading a report".'
    ),
    responses=NO_REPORT,
    dependencies=READ,
)
async def latest(request: Request, name: str) -> Response:
    state = runtime(request)
    extra = await asyncio.to_thread(state.extra_findings, name)
    doc = await asyncio.to_thread(flows.latest_document, db=state.db, model_name=name, extra=extra)
    return json_response(doc, request_id=request_id_of(request))


@router.get(
    "/v1/models/{name}/drift/history",
    summary="Monitor runs, newest first, a page at a time",
    responses=errors(*AUTH, 400, 404, e400="A bad since, until, cursor or limit (the error names it)"),
    dependencies=READ,
)
async def run_history(
    request: Request,
    name: str,
    limit: Annotated[int, Query(ge=1, le=1000, description="Runs per page.")] = 50,
    since: Annotated[
        str | None,
        Query(description=f"Only runs stored at or after this time: RFC 3339 with its zone, from {RANGE}."),
    ] = None,
    until: Annotated[
        str | None,
        Query(description=f"Only runs stored before this time: RFC 3339 with its zone, from {RANGE}."),
    ] = None,
    cursor: Annotated[
        str | None,
        Query(
            max_length=512,
            description="The `next_cursor` of the previous page (opaque), with the same since and until.",
        ),
    ] = None,
) -> Response:
    state = runtime(request)
    doc = await asyncio.to_thread(
        flows.history,
        db=state.db,
        model_name=name,
        limit=limit,
        since=_instant(since, field="since"),
        until=_instant(until, field="until"),
        cursor=cursor,
    )
    return json_response(doc, request_id=request_id_of(request))


def _instant(value: str | None, *, field: str) -> datetime | None:
    """An RFC 3339 time of a query parameter, or ``Invalid`` naming ``field`` and the rule."""
    return None if value is None else parse_time(value, field=field)


@router.post(
    "/v1/models/{name}/monitors:run",
    summary="Evaluate drift now (admin)",
    status_code=201,
    responses=errors(*AUTH, 404, 409, e409="No serving version, no profile or too few predictions"),
    dependencies=ADMIN,
)
async def run_now(request: Request, name: str) -> Response:
    state = runtime(request)
    # predictions answered moments ago may still be on their way to the table
    await asyncio.to_thread(state.flush_predictions, 5.0)
    outcome = await asyncio.to_thread(
        flows.run_monitor, db=state.db, settings=state.settings, model_name=name
    )
    extra = await asyncio.to_thread(state.extra_findings, name)  # after the run: its alerts are evaluated
    return json_response(
        {
            **outcome.summary(),
            "headline": headline(outcome.report, extra=[finding_from_dict(f) for f in extra]).as_dict(),
            "report": outcome.report.as_dict(),
            "window": outcome.window.as_dict(),
        },
        status=201,
        request_id=request_id_of(request),
    )


@router.get(
    REPORT_PATH,
    summary="Latest drift report (HTML)",
    description=(
        "The latest run's report as a page, with the history of the model's stored runs (scheduled and "
        "backfilled: `?since=7d` limits the period; a bad duration is a 400 naming `since`). "
        "Opens with a bearer token of scope `read`, or without one "
        "through a signed link (`expires` and `signature`, made by `driftwarden reports link MODEL` and "
        "carried by every webhook message): a link opens this model's report until it expires, and a "
        "changed model, path or expiry, an expired link or one signed with another key answers 401."
    ),
    response_class=HTMLResponse,
    responses=errors(
        *AUTH,
        404,
        409,
        400,
        e400="A bad since (the error names it)",
        e401="No bearer token or signed link, or one that is not accepted (the error names why)",
        e404="Unknown model",
        e409="No monitor run yet (or no serving version, no profile)",
    ),
    dependencies=READ_OR_LINK,
)
async def html_report(
    request: Request,
    name: str,
    since: Annotated[
        str | None,
        Query(
            max_length=32,
            description="The period whose runs the page reports and charts: 30m, 12h, 7d, 2w (default: the "
            "newest runs ever stored); its newest run is the report.",
        ),
    ] = None,
) -> Response:
    period = None if since is None else require_duration(since, where="since")
    state = runtime(request)
    extra = await asyncio.to_thread(state.extra_findings, name)
    page = await asyncio.to_thread(
        flows.report_html,
        db=state.db,
        model_name=name,
        settings=state.settings,
        since=period,
        extra=extra,
    )
    return HTMLResponse(page, headers=PAGE_HEADERS)


@router.get(
    "/v1/models/{name}/monitor",
    summary="A model's monitor settings: what it stores, what is in effect, its window (admin)",
    responses=errors(*AUTH, 400, 404, 409, e409="Its monitor.json is invalid"),
    dependencies=ADMIN,
)
async def get_monitor_settings(request: Request, name: str) -> Response:
    check_name(name)
    state = runtime(request)
    doc = await asyncio.to_thread(
        flows.settings_document, db=state.db, settings=state.settings, model_name=name
    )
    return json_response(doc, request_id=request_id_of(request))


@router.put(
    "/v1/models/{name}/monitor",
    summary="Replace a model's monitor settings (admin)",
    description=(
        "The body is the whole of the model's `monitor.json` (`{}`: back to the defaults): `window_rows` "
        "and/or `window_minutes` (neither: the server's window), `interval_s`, `false_alarms_per_30d`, "
        '`alpha`, `drift_share`, `features` (e.g. `{"customer_id": {"enabled": false}}`), ... '
        "(docs/monitoring.md). A value that breaks a rule, an unknown setting or a feature the model does "
        "not have is a 400 naming the field and the rule, and nothing is stored."
    ),
    responses=errors(*AUTH, 400, 404, 413),
    dependencies=ADMIN,
    openapi_extra=json_body(settings_schema(), examples={"the last hour": {"window_minutes": 60}}),
)
async def put_monitor_settings(request: Request, name: str) -> Response:
    check_name(name)
    data = await SETTINGS_BODY.object(request)
    state = runtime(request)
    doc = await asyncio.to_thread(
        flows.put_settings, db=state.db, settings=state.settings, model_name=name, data=data
    )
    return json_response(doc, request_id=request_id_of(request))
