"""Retraining routes: queue a job (admin), list and show jobs, cancel one (admin). Thin: parse, call, shape.

``POST /v1/models/{name}/retrain`` answers 202 with the job document and ``Location: /v1/jobs/{id}``;
``created`` tells a new job from the active one (or the one of the same ``Idempotency-Key``) it answers
with. Errors are ``{"error": ...}`` naming the field or the rule: 400 a bad body, 401/403 a missing token
or one without the scope (admin to change, read to list), 404 an unknown model or job, 409 cancelling a job
that has ended.
"""

from __future__ import annotations

import asyncio
from typing import Annotated, Any

from fastapi import APIRouter, Header, Path, Query, Request, Response

from core.auth import Scope
from core.errors import Conflict
from core.events import JOB_FINISHED, publish
from core.http import JsonBody, json_response, request_id_of, require_scope, runtime
from core.openapi import AUTH, errors, model_body
from training.retraining import service
from training.retraining.models import JobState, RetrainRequest, Trigger

router = APIRouter(tags=["Retraining jobs"])
READ, ADMIN = [require_scope(Scope.READ)], [require_scope(Scope.ADMIN)]
MAX_BODY = 16 * 1024
RETRAIN_RULES = [  # service.check_params: ps only with mode async, workers not with mode local; no NUL
    {"properties": {"reason": {"pattern": "^[^\\u0000]*$"}}},
    {
        "if": {"required": ["mode"], "properties": {"mode": {"enum": ["sync", "local"]}}},
        "then": {"properties": {"ps": {"type": "null"}}},
    },
    {
        "if": {"required": ["mode"], "properties": {"mode": {"const": "local"}}},
        "then": {"properties": {"workers": {"type": "null"}}},
    },
]
JobId = Annotated[int, Path(ge=1, le=2**31 - 1)]  # a 32-bit id column: a larger id is a 400, not a 500


def _requester(request: Request) -> str:
    client = request.client.host if request.client is not None else "unknown"
    return f"api:{client}"


BODY = JsonBody(  # optional: no body is a job with the defaults
    limit=MAX_BODY,
    optional=True,
    example='{"reason": "drift on income", "epochs": 2}',
    not_json='the body is not JSON ({error}): send an object like {{"epochs": 2}} or nothing',
    not_object="the body must be a JSON object, e.g. {example}",
    nul="the job's parameters",
)


@router.post(
    "/v1/models/{name}/retrain",
    summary="Queue a retraining job (admin)",
    status_code=202,
    responses=errors(*AUTH, 404, 409, 413),
    dependencies=ADMIN,
    openapi_extra=model_body(RetrainRequest, required=False, allOf=RETRAIN_RULES),
)
async def retrain(
    request: Request,
    name: str,
    idempotency_key: Annotated[
        str | None,
        Header(
            alias="Idempotency-Key",
            min_length=1,
            max_length=255,
            pattern=r"^[\x20-\x7e]+$",  # printable ASCII: the header is Latin-1 on the wire, not UTF-8
        ),
    ] = None,
) -> Response:
    """Queue a job that retrains NAME on its labelled predictions and validates it before production.

    Body (optional): `reason`, `mode` (async | sync | local), `epochs`, `workers`, `ps`, `drill`
    (`shuffled_labels`: a fire drill the validation gate must reject). An active job of the model, or the job
    of the same `Idempotency-Key`, is answered instead of a new one (`created: false`). A model whose version
    was imported without its builder function (`--model-fn`) cannot be retrained: 409, naming the fix.
    """
    state = runtime(request)
    params = service.check_params(await BODY.object(request))

    def _enqueue() -> dict[str, Any]:
        with state.db.session() as session:
            outcome = service.enqueue(
                session=session,
                model_name=name,
                trigger=Trigger.API.value,
                requested_by=_requester(request),
                idempotency_key=idempotency_key,
                params=params,
            )
            if outcome.job_id is None:  # a cooldown: not asked for here (cooldown_s=0), kept for safety
                raise Conflict(outcome.reason)
            job = service.get_job(session=session, job_id=outcome.job_id)
            return {**service.job_document(job), "created": outcome.created, "reason": outcome.reason}

    doc = await asyncio.to_thread(_enqueue)
    response = json_response(doc, status=202, request_id=request_id_of(request))
    response.headers["Location"] = doc["links"]["self"]
    return response


@router.get("/v1/jobs", summary="Retraining jobs, newest first", responses=errors(*AUTH), dependencies=READ)
async def jobs(
    request: Request,
    model: Annotated[str | None, Query(description="Only this model's jobs.")] = None,
    state: Annotated[
        str | None,
        Query(
            description="Only jobs in this state.", json_schema_extra={"enum": [s.value for s in JobState]}
        ),
    ] = None,
    limit: Annotated[int, Query(ge=1, le=service.MAX_LIST)] = 50,
) -> Response:
    rt = runtime(request)

    def _list() -> list[dict[str, Any]]:
        with rt.db.session() as session:
            found = service.list_jobs(session=session, model_name=model, state=state, limit=limit)
            return [service.job_document(job) for job in found]

    docs = await asyncio.to_thread(_list)
    return json_response({"jobs": docs}, request_id=request_id_of(request))


@router.get(
    "/v1/jobs/{job_id}",
    summary="One retraining job: state, progress, gate checks, log tail",
    responses=errors(*AUTH, 404),
    dependencies=READ,
)
async def job(request: Request, job_id: JobId) -> Response:
    rt = runtime(request)

    def _get() -> dict[str, Any]:
        with rt.db.session() as session:
            return service.job_document(service.get_job(session=session, job_id=job_id))

    return json_response(await asyncio.to_thread(_get), request_id=request_id_of(request))


@router.post(
    "/v1/jobs/{job_id}:cancel",
    summary="Cancel a queued or running job (admin)",
    status_code=202,
    responses=errors(*AUTH, 404, 409),
    dependencies=ADMIN,
)
async def cancel(request: Request, job_id: JobId) -> Response:
    """A queued job is cancelled at once; a running one stops at its worker's next heartbeat (202)."""
    rt = runtime(request)

    def _cancel() -> dict[str, Any]:
        with rt.db.session() as session:
            doc = service.job_document(service.request_cancel(session=session, job_id=job_id))
        if doc["state"] == JobState.CANCELLED.value:  # ended at once (it was queued): announce it
            publish(JOB_FINISHED, db=rt.db, settings=rt.settings, job_id=job_id)
        return doc

    doc = await asyncio.to_thread(_cancel)
    return json_response(doc, status=202, request_id=request_id_of(request))
