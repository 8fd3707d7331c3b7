"""What the serving routes of both protocols share: the app state, path versions, and the predict route's
core (decode -> check -> batched model -> check output -> log -> shape)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Any

from fastapi import Request, Response

from core.auth import Scope
from core.http import (
    BodyRefused,
    authorize,
    caller_request_id,
    error_response,
    json_response,
    read_body,
    request_id_of,
)
from predictions.writer import LogUnavailable
from registry.contracts import ContractViolation
from registry.names import InvalidVersion, parse_version
from registry.schema import ModelSchema
from registry.signature import SourceSignature
from service.serving.codecs import BadRequest, parse_json, split_binary
from service.serving.flows import AppState, OutputContractError, Prediction, predict
from service.serving.manager import NotServed


def app_state(request: Request) -> AppState:
    state: AppState = request.app.state.dw
    return state


def path_version(value: str | None) -> int | None:
    """The version segment of a route (None when the route names none); 400 when it is not one."""
    return None if value is None else parse_version(value)


async def predict_route(
    request: Request,
    name: str,
    version: str | None,
    label: str | None,
    protocol: str,
    shape: Callable[[Prediction, Any], dict[str, Any]],
    decode: Callable[[Any, bytes], Callable[[ModelSchema, SourceSignature | None], Any]],
) -> Response:
    started = time.perf_counter()
    state = app_state(request)
    if state.settings.predict_requires_token:  # inline, not a route dependency: nothing to pay when off
        await authorize(request, Scope.PREDICT)
    metrics = state.metrics
    logged_rid = caller_request_id(request)  # the log keeps the caller's id only
    rid = logged_rid or request_id_of(request)
    model = name if name in state.manager.models else ""  # label values come from the registry only
    answered = ""  # the version that answered
    code = 500  # until proven otherwise (an unexpected error is answered 500 by the app's handler)
    metrics.request_started(protocol)
    traffic = state.manager.traffic
    traffic.in_flight += 1
    try:
        try:
            raw = await read_body(request, state.settings.max_body_bytes)
            header, binary = split_binary(raw, request.headers.get("inference-header-content-length"))
            payload = parse_json(header)
            result = await predict(
                state=state,
                model_name=name,
                version=path_version(version),
                label=label,
                parse=decode(payload, binary),
                request_id=logged_rid,
                protocol=protocol,
                started=started,
            )
        except ContractViolation as exc:
            code = 400
            metrics.violation(model, [(v.feature, v.rule) for v in exc.violations])
            return error_response(400, str(exc), rid, violations=[v.to_dict() for v in exc.violations])
        except (BadRequest, BodyRefused) as exc:  # too large (413), compressed (415), malformed
            code = exc.status_code
            metrics.violation(model, [(None, exc.rule)])
            return error_response(exc.status_code, str(exc), rid)
        except InvalidVersion as exc:
            code = 400
            return error_response(400, str(exc), rid)
        except NotServed as exc:
            code = 404
            return error_response(404, str(exc), rid)
        except OutputContractError as exc:
            code, answered = 500, str(exc.version)
            return error_response(500, str(exc), rid, violations=[v.to_dict() for v in exc.violations])
        except LogUnavailable as exc:
            code = 503
            return error_response(503, f"prediction log unavailable: {exc}", rid)
        code, answered = 200, str(result.version)
        return json_response(shape(result, payload), 200, rid)
    except asyncio.CancelledError:
        code = 499  # the client went away before the answer (nginx's "client closed request")
        raise
    finally:
        traffic.in_flight -= 1
        metrics.request_done(model, answered, protocol, code, time.perf_counter() - started)
