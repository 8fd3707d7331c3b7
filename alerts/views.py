"""Alert routes: rules per model, alerts and their history, silences, webhook subscriptions and their
deliveries, and the Alertmanager receiver. Thin: parse, call a flow or a service function, shape.

Every bad input is a 4xx ``{"error": ...}`` naming the field and the rule (a :class:`core.errors.Invalid`
answered by the app's one handler). Reading routes need a token with scope 'read'; changing routes and
every webhook route need 'admin' (webhook URLs and deliveries are configuration); the Alertmanager receiver
takes its own credentials (:mod:`alerts.alertmanager`).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Annotated, Any, Literal, TypeVar

from fastapi import APIRouter, Path, Query, Request, Response
from pydantic import ValidationError
from sqlalchemy.orm import Session

from alerts import flows, service
from alerts.alertmanager import AlertmanagerPayload, auth_denied, parse_payload
from alerts.models import AlertRead, DeliveryRead, WebhookRead
from alerts.specs import RULE_SEVERITIES, RuleSpec, SilenceSpec, WebhookSpec, errors_at
from alerts.urls import AddressRule, check_url, system_resolver
from core.auth import Scope
from core.database import utcnow
from core.errors import Invalid
from core.http import JsonBody, json_response, request_id_of, require_scope, runtime
from core.openapi import AUTH, errors, json_body, model_body, model_schema
from registry.names import check_name

router = APIRouter(tags=["Alerts and webhooks"])
READ, ADMIN = [require_scope(Scope.READ)], [require_scope(Scope.ADMIN)]
MAX_BODY_BYTES = 256 * 1024  # rules, silences and subscriptions are small documents
MAX_ID = 2**31 - 1  # ids are 32-bit integer columns: a larger one is a 400, not a database error
RULE_ITEM = model_schema(RuleSpec)
RULE_ITEM["properties"]["for"] = RULE_ITEM["properties"]["for_runs"]  # the rules files' spelling, also taken
RULES_BODY = json_body(
    {
        "type": "object",
        "required": ["rules"],
        "properties": {
            "rules": {
                "type": "array",
                "items": RULE_ITEM,
                "description": "A rule's `params` depend on its `kind` (docs/alerts.md); [] = the defaults.",
            }
        },
        "additionalProperties": False,
    }
)
T = TypeVar("T")


def _described(exc: ValidationError) -> str:
    return "; ".join(errors_at(exc))


BODY = JsonBody(limit=MAX_BODY_BYTES, rule="alerts body limit", nul="text fields", describe=_described)
# up to max_body_bytes (a notification of many alerts); any JSON value: parse_payload checks it
ALERTMANAGER_BODY = JsonBody()


async def _in_session(request: Request, fn: Callable[[Session], T]) -> T:
    state = runtime(request)

    def run() -> T:
        with state.db.session() as session:
            return fn(session)

    return await asyncio.to_thread(run)


def _ok(request: Request, body: Any, status: int = 200) -> Response:
    return json_response(body, status, request_id_of(request))


# --- rules --------------------------------------------------------------------------------------------------


@router.get(
    "/v1/models/{name}/alert-rules",
    summary="The alert rules of a model (its own or the defaults)",
    responses=errors(*AUTH, 400, 404),
    dependencies=READ,
)
async def get_rules(request: Request, name: str) -> Response:
    check_name(name)
    doc = await _in_session(request, lambda s: flows.rules_document(session=s, model_name=name))
    return _ok(request, doc)


@router.put(
    "/v1/models/{name}/alert-rules",
    summary="Replace the alert rules of a model (admin)",
    responses=errors(*AUTH, 404, 413),
    dependencies=ADMIN,
    openapi_extra=RULES_BODY,
)
async def put_rules(request: Request, name: str) -> Response:
    check_name(name)
    data = await BODY.object(request)
    if set(data) != {"rules"}:
        raise Invalid(
            f'the body must be {{"rules": [...]}} (an empty list: back to the defaults); found fields '
            f"{sorted(data)}"
        )
    doc = await _in_session(
        request, lambda s: flows.put_model_rules(session=s, model_name=name, rules_in=data["rules"])
    )
    return _ok(request, doc)


# --- alerts -------------------------------------------------------------------------------------------------


@router.get("/v1/alerts", summary="Alerts, newest first", responses=errors(*AUTH, 400), dependencies=READ)
async def list_alerts(
    request: Request,
    model: Annotated[str | None, Query(description="Only this model's alerts.")] = None,
    state: Annotated[Literal["pending", "firing", "resolved"] | None, Query()] = None,
    severity: Annotated[
        str | None,
        Query(
            max_length=16,
            pattern=r"^[\x21-\x7e]+$",
            description="info, warning or critical (the rules' severities), or a severity that an alert "
            "received from Alertmanager carries; any other is a 400.",
            json_schema_extra={"enum": list(RULE_SEVERITIES)},
        ),
    ] = None,
    limit: Annotated[int, Query(ge=1, le=1000)] = 100,
) -> Response:
    if model is not None:
        check_name(model, given_as="model")

    def run(s: Session) -> list[dict[str, Any]]:
        known = severity is None or severity in RULE_SEVERITIES
        if not known and not service.has_severity(session=s, severity=str(severity)):
            raise Invalid(
                f"severity: {severity!r} is none of {', '.join(RULE_SEVERITIES)} and no alert received "
                "from Alertmanager has it"
            )
        rows = service.list_alerts(session=s, model_name=model, state=state, severity=severity, limit=limit)
        return [AlertRead.model_validate(a).model_dump(mode="json") for a in rows]

    return _ok(request, {"alerts": await _in_session(request, run)})


@router.get(
    "/v1/alerts/{alert_id}",
    summary="One alert with its history",
    responses=errors(*AUTH, 404),
    dependencies=READ,
)
async def get_alert(request: Request, alert_id: Annotated[int, Path(ge=1, le=MAX_ID)]) -> Response:
    doc = await _in_session(
        request, lambda s: flows.alert_detail(session=s, alert_id=alert_id).model_dump(mode="json")
    )
    return _ok(request, doc)


@router.post(
    "/v1/alerts/alertmanager",
    summary="Receive Prometheus Alertmanager notifications (webhook v4)",
    responses=errors(*AUTH, 413),
    openapi_extra=model_body(AlertmanagerPayload),
)
async def alertmanager(request: Request) -> Response:
    state = runtime(request)
    if (denied := await auth_denied(request, state.settings)) is not None:
        return denied
    payload = parse_payload(await ALERTMANAGER_BODY.value(request))
    doc = await _in_session(
        request, lambda s: flows.receive_alertmanager(session=s, settings=state.settings, payload=payload)
    )
    return _ok(request, doc.as_dict())


# --- silences -----------------------------------------------------------------------------------------------


@router.post(
    "/v1/silences",
    summary="Silence the alerts matching a set of label matchers (admin)",
    status_code=201,
    responses=errors(*AUTH, 413),
    dependencies=ADMIN,
    openapi_extra=model_body(SilenceSpec),
)
async def create_silence(request: Request) -> Response:
    spec = await BODY.model(request, SilenceSpec)
    read = await _in_session(request, lambda s: flows.create_silence(session=s, spec=spec))
    return _ok(request, read.model_dump(mode="json"), 201)


@router.get("/v1/silences", summary="Silences, newest first", responses=errors(*AUTH), dependencies=READ)
async def list_silences(request: Request) -> Response:
    def run(s: Session) -> list[dict[str, Any]]:
        now = utcnow()
        return [
            flows.silence_read(x, now=now).model_dump(mode="json") for x in service.list_silences(session=s)
        ]

    return _ok(request, {"silences": await _in_session(request, run)})


@router.delete(
    "/v1/silences/{silence_id}",
    summary="Expire a silence now (admin)",
    responses=errors(*AUTH, 404),
    dependencies=ADMIN,
)
async def delete_silence(request: Request, silence_id: str) -> Response:
    read = await _in_session(request, lambda s: flows.expire_silence(session=s, silence_id=silence_id))
    return _ok(request, read.model_dump(mode="json"))


# --- webhooks -----------------------------------------------------------------------------------------------


@router.post(
    "/v1/webhooks",
    summary="Subscribe a URL to signed webhook messages (admin)",
    status_code=201,
    responses=errors(*AUTH, 409, 413),
    openapi_extra=model_body(WebhookSpec),
    dependencies=ADMIN,
)
async def create_webhook(request: Request) -> Response:
    spec = await BODY.model(request, WebhookSpec)
    rule = AddressRule.of(runtime(request).settings)
    # its host name looked up off the event loop (a slow DNS server must not stall the other requests)
    await asyncio.to_thread(check_url, spec.url, rule=rule, resolver=system_resolver)
    created = await _in_session(request, lambda s: flows.add_webhook(session=s, spec=spec))
    return _ok(request, created.model_dump(mode="json"), 201)


@router.get(
    "/v1/webhooks",
    summary="Webhook subscriptions (admin; secrets are never shown)",
    responses=errors(*AUTH),
    dependencies=ADMIN,
)
async def list_webhooks(request: Request) -> Response:

    def run(s: Session) -> list[dict[str, Any]]:
        return [
            WebhookRead.model_validate(w).model_dump(mode="json")
            for w in service.list_subscriptions(session=s)
        ]

    return _ok(request, {"webhooks": await _in_session(request, run)})


@router.get(
    "/v1/webhooks/{webhook_id}",
    summary="One webhook subscription (admin)",
    responses=errors(*AUTH, 404),
    dependencies=ADMIN,
)
async def get_webhook(request: Request, webhook_id: str) -> Response:
    doc = await _in_session(
        request,
        lambda s: WebhookRead.model_validate(
            service.get_subscription(session=s, webhook_id=webhook_id)
        ).model_dump(mode="json"),
    )
    return _ok(request, doc)


@router.delete(
    "/v1/webhooks/{webhook_id}",
    summary="Remove a webhook subscription and its outbox (admin)",
    responses=errors(*AUTH, 404),
    dependencies=ADMIN,
)
async def delete_webhook(request: Request, webhook_id: str) -> Response:
    await _in_session(request, lambda s: service.remove_subscription(session=s, webhook_id=webhook_id))
    return _ok(request, {"deleted": webhook_id})


@router.get(
    "/v1/webhooks/{webhook_id}/deliveries",
    summary="Messages to one subscription, newest first (admin)",
    responses=errors(*AUTH, 404),
    dependencies=ADMIN,
)
async def list_deliveries(
    request: Request,
    webhook_id: str,
    state: Annotated[Literal["pending", "delivered", "dead"] | None, Query()] = None,
    limit: Annotated[int, Query(ge=1, le=1000)] = 100,
) -> Response:

    def run(s: Session) -> list[dict[str, Any]]:
        service.get_subscription(session=s, webhook_id=webhook_id)
        rows = service.list_deliveries(session=s, webhook_id=webhook_id, state=state, limit=limit)
        return [DeliveryRead.model_validate(d).model_dump(mode="json") for d in rows]

    return _ok(request, {"deliveries": await _in_session(request, run)})


@router.post(
    "/v1/webhooks/deliveries/{delivery_id}:redeliver",
    summary="Send a delivery again, due now, same webhook-id and body (admin)",
    responses=errors(*AUTH, 404, 409),
    dependencies=ADMIN,
)
async def redeliver(request: Request, delivery_id: str) -> Response:
    doc = await _in_session(
        request,
        lambda s: DeliveryRead.model_validate(
            service.redeliver(session=s, delivery_id=delivery_id, now=utcnow())
        ).model_dump(mode="json"),
    )
    return _ok(request, doc)
