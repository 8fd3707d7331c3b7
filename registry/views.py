"""Registry routes: versions with their history; promote, roll back, label and reject (admin). Thin.

Bad requests raise :class:`core.errors.DomainError` subclasses, answered by the app's one handler as
``{"error": ...}``: 400 for a malformed name, version or body field, 404 for an unknown model or version,
409 for a change the version's state does not allow (or a concurrent promotion, or a promotion whose
contract breaks today's clients: ``contract_changes`` lists the changes beside ``error``), 413 for a body over
:data:`MAX_BODY_BYTES`. Reading needs a token with scope 'read', a change one with 'admin'
(:func:`core.http.require_scope`).
A running server serves a promoted (or rolled back, or re-labelled) version after its next registry poll.
"""

from __future__ import annotations

import asyncio
from typing import Any

from fastapi import APIRouter, Request, Response

from core.auth import Scope
from core.errors import Invalid
from core.http import JsonBody, json_response, request_id_of, require_scope, runtime
from core.openapi import AUTH, errors, json_body
from registry.compat import ContractDiff
from registry.models import ModelVersionRead
from registry.names import MAX_VERSION, check_label, check_name, parse_version
from registry.service import (
    ContractUnreadable,
    contract_diff,
    labels_of,
    reject,
    rollback,
    rollback_target,
    serving_version,
    set_label,
    show,
)
from registry.service import promote_version as promote_checked

router = APIRouter(tags=["Model registry"])
READ, ADMIN = [require_scope(Scope.READ)], [require_scope(Scope.ADMIN)]
ACTOR = "api"
MAX_BODY_BYTES = 64 * 1024  # admin bodies are a version or a reason: read streaming, refused past this (413)


VERSION_FIELD = {
    "anyOf": [
        {"type": "integer", "minimum": 1, "maximum": MAX_VERSION},
        {"type": "string", "pattern": "^[1-9][0-9]{0,8}$", "description": "Digits, as in a URL."},
    ]
}
REASON_FIELD = {
    "type": "string",
    "minLength": 1,
    "pattern": "^[^\\u0000]*[^\\s\\u0000][^\\u0000]*$",
    "description": "Why (not blank, no NUL character).",
}


def _body_doc(field: str, schema: dict[str, Any]) -> dict[str, Any]:
    return json_body({"type": "object", "required": [field], "properties": {field: schema}})


VERSION_BODY = JsonBody(limit=MAX_BODY_BYTES, rule="admin body limit", example='{"version": 3}')
REASON_BODY = JsonBody(limit=MAX_BODY_BYTES, rule="admin body limit", example='{"reason": "why"}')


def _body_version(data: dict[str, Any]) -> int:
    value = data.get("version")
    if isinstance(value, str):
        return parse_version(value, what="body field 'version'")
    if isinstance(value, float) and value.is_integer():  # 3.0 is the integer 3 in JSON Schema
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, int):
        raise Invalid(f"body field 'version' must be a positive integer, got {value!r}")
    return parse_version(str(value), what="body field 'version'")


def _body_reason(data: dict[str, Any]) -> str:
    value = data.get("reason")
    if not isinstance(value, str) or not value.strip():
        raise Invalid(f"body field 'reason' must be a non-empty string saying why, got {value!r}")
    if "\x00" in value:
        raise Invalid("body field 'reason' holds a NUL character (\\u0000), which cannot be stored")
    return value


def _ok(request: Request, body: Any) -> Response:
    return json_response(body, request_id=request_id_of(request))


@router.get(
    "/v1/models/{name}/versions",
    summary="Registered versions, labels and state history",
    responses=errors(*AUTH, 404),
    dependencies=READ,
)
async def versions(request: Request, name: str) -> Response:
    """Every registered version of a model (newest first) with its labels, and the history of its states."""
    check_name(name)
    state = runtime(request)

    def run() -> dict[str, Any]:
        with state.db.session() as session:
            doc: dict[str, Any] = show(session=session, model_name=name).model_dump(mode="json")
            return doc

    return _ok(request, await asyncio.to_thread(run))


ACCEPT_FIELD = "accept_contract_change"
PROMOTE_BODY = JsonBody(
    limit=MAX_BODY_BYTES, rule="admin body limit", example='{"accept_contract_change": true}', optional=True
)
PROMOTE_BODY_DOC = json_body(
    {
        "type": "object",
        "additionalProperties": False,
        "properties": {
            ACCEPT_FIELD: {
                "type": "boolean",
                "default": False,
                "description": "Promote even though the version's contract breaks today's clients.",
            }
        },
    },
    required=False,
)


def _body_accept(data: dict[str, Any]) -> bool:
    unknown = sorted(set(data) - {ACCEPT_FIELD})
    if unknown:
        raise Invalid(
            f"body field {unknown[0]!r} is not known here (the body may hold only {ACCEPT_FIELD!r})"
        )
    value = data.get(ACCEPT_FIELD, False)
    if not isinstance(value, bool):
        raise Invalid(f"body field {ACCEPT_FIELD!r} must be true or false, got {value!r}")
    return value


def _changes(diff: ContractDiff | None) -> list[dict[str, Any]]:
    return diff.to_list() if diff is not None else []


@router.post(
    "/v1/models/{name}/versions/{version}:promote",
    summary="Serve this version (admin)",
    responses=errors(*AUTH, 404, 409, 413),
    dependencies=ADMIN,
    openapi_extra=PROMOTE_BODY_DOC,
)
async def promote_version(request: Request, name: str, version: str) -> Response:
    """Make the version the serving one; the one serving so far is archived. Already serving: no change.

    Its contract is compared with the serving version's (``contract_changes``): a change that breaks
    today's clients is refused (409, the changes listed) unless the body says
    ``{"accept_contract_change": true}``.
    """
    state = runtime(request)
    check_name(name)
    number = parse_version(version)
    accept = _body_accept(await PROMOTE_BODY.object(request))

    def run() -> dict[str, Any]:
        with state.db.session() as session:
            done = promote_checked(
                session=session, model_name=name, version=number, actor=ACTOR, accept_contract_change=accept
            )
            return {
                **ModelVersionRead.model_validate(done.row).model_dump(mode="json"),
                "previous_serving": done.previous,
                "changed": done.changed,
                "contract_changes": _changes(done.changes),
                "contract_not_compared": done.not_compared,
            }

    return _ok(request, await asyncio.to_thread(run))


@router.post(
    "/v1/models/{name}:rollback",
    summary="Serve the previous serving version again (admin)",
    responses=errors(*AUTH, 404, 409),
    dependencies=ADMIN,
)
async def rollback_model(request: Request, name: str) -> Response:
    """Serve the version that served before the current one; the current one is archived. Never refused for
    its contract (it served before); ``contract_changes`` says what it changes for clients."""
    state = runtime(request)
    check_name(name)

    def run() -> dict[str, Any]:
        with state.db.session() as session:
            before = serving_version(session=session, model_name=name)
            try:
                compared = contract_diff(
                    session=session, row=rollback_target(session=session, model_name=name)
                )
            except ContractUnreadable:
                compared = None
            row = rollback(session=session, model_name=name, actor=ACTOR)
            return {
                **ModelVersionRead.model_validate(row).model_dump(mode="json"),
                "previous_serving": before.version if before is not None else None,
                "contract_changes": _changes(compared[1] if compared is not None else None),
            }

    return _ok(request, await asyncio.to_thread(run))


@router.put(
    "/v1/models/{name}/labels/{label}",
    summary="Point a label at a version (admin)",
    responses=errors(*AUTH, 404, 409, 413),
    dependencies=ADMIN,
    openapi_extra=_body_doc("version", VERSION_FIELD),
)
async def put_label(request: Request, name: str, label: str) -> Response:
    """Point ``label`` at the version given as ``{"version": N}`` (a label cannot point at a rejected one)."""
    state = runtime(request)
    check_name(name)
    check_label(label)
    number = _body_version(await VERSION_BODY.object(request))

    def run() -> dict[str, Any]:
        with state.db.session() as session:
            before = labels_of(session=session, model_name=name).get(label)
            set_label(session=session, model_name=name, label=label, version=number, actor=ACTOR)
            return {"model_name": name, "label": label, "version": number, "previous_version": before}

    return _ok(request, await asyncio.to_thread(run))


@router.post(
    "/v1/models/{name}/versions/{version}:reject",
    summary="Reject this version, with a reason (admin)",
    responses=errors(*AUTH, 404, 409, 413),
    dependencies=ADMIN,
    openapi_extra=_body_doc("reason", REASON_FIELD),
)
async def reject_version(request: Request, name: str, version: str) -> Response:
    """Mark the version rejected (``{"reason": "..."}``); the serving version must be replaced first."""
    state = runtime(request)
    check_name(name)
    number = parse_version(version)
    reason = _body_reason(await REASON_BODY.object(request))

    def run() -> dict[str, Any]:
        with state.db.session() as session:
            row = reject(session=session, model_name=name, version=number, reason=reason, actor=ACTOR)
            return ModelVersionRead.model_validate(row).model_dump(mode="json")

    return _ok(request, await asyncio.to_thread(run))
