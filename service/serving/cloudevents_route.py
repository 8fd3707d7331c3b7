"""``POST /v1/cloudevents``: the target of KServe's inference logger (thin: read, call the flow, answer)."""

from __future__ import annotations

from fastapi import APIRouter, Request, Response

from core.auth import Scope
from core.http import authorize, error_response, json_response, read_body, request_id_of
from service.serving import docs
from service.serving.cloudevents import receive
from service.serving.codecs import BadRequest
from service.serving.ingest import LogOff
from service.serving.manager import NotServed
from service.serving.routing import app_state

router = APIRouter()
TOKEN_PARAM = "token"


@router.post(
    "/v1/cloudevents",
    summary="KServe inference logger events",
    openapi_extra=docs.CLOUDEVENTS,
    responses=docs.CLOUDEVENTS_RESPONSES,
    tags=["Ingest"],
)
async def cloudevents(request: Request, model: str | None = None, token: str | None = None) -> Response:
    """Point an `InferenceService`'s `logger.url` here: each request and response CloudEvent (binary or
    structured mode, sharing one `ce-id`) is kept until its other half arrives, then the pair is logged as
    predictions of source `cloudevents` at the response's `ce-time`. Needs an `ingest` token, in the
    `Authorization` header or (KServe's logger sends no header of its own) as `?token=` in the URL.
    `?model=` names the model when the event's `inferenceservicename` does not."""
    del token  # read by authorize: a query the server's logs never show
    rid = request_id_of(request)
    await authorize(request, Scope.INGEST, token_param=TOKEN_PARAM, alternative=", or ?token=<token>")
    state = app_state(request)
    try:
        body = await read_body(request, state.settings.max_body_bytes)
        receipt = await receive(state=state, headers=request.headers, body=body, model=model)
    except BadRequest as exc:
        return error_response(exc.status_code, str(exc), rid)
    except NotServed as exc:
        return error_response(404, str(exc), rid)
    except LogOff as exc:
        return error_response(503, f"prediction log unavailable: {exc}", rid)
    return json_response(receipt.as_dict(), 200, rid)
