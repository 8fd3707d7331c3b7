"""The Prometheus Alertmanager webhook (``webhook_config``, payload version "4"): its model, the receiver's
answer and its auth.

Alertmanager sends credentials from its receiver's ``http_config``: a bearer token
(``authorization: {credentials_file: ...}``) compared with ``DRIFTWARDEN_ALERTMANAGER_TOKEN``, or basic
auth compared with ``DRIFTWARDEN_ALERTMANAGER_BASIC_AUTH`` (``user:password``), both in constant time.
With neither set, a token with scope ``admin`` (or the admin token) is needed.
"""

from __future__ import annotations

import base64
import binascii
import json
from dataclasses import asdict, dataclass, field
from datetime import datetime, timedelta
from typing import Annotated, Any, Literal

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, ValidationError
from starlette.requests import Request
from starlette.responses import Response

from alerts.lifecycle import RetrainOutcome
from alerts.specs import errors_at
from core.auth import Scope, same_secret
from core.config import Settings
from core.errors import Invalid
from core.http import authorize, error_response, holds_nul, request_id_of
from core.times import ClientTime

VERSION = "4"
# One notification is recorded in one transaction, ~4 ms per new alert on PostgreSQL (1000 distinct alerts:
# 3.7 s); 10 000 alerts took 34 s (found by schemathesis). Alertmanager's webhook_config `max_alerts` keeps
# its messages under this.
MAX_ALERTS = 1000


def _rfc3339_text(value: Any) -> Any:
    if not isinstance(
        value, str
    ):  # pydantic would also take a number as a Unix time; Alertmanager never sends one
        raise ValueError("must be an RFC 3339 date-time string, e.g. 2026-01-01T10:00:00Z")
    return value


def _count(value: Any) -> Any:
    if isinstance(value, bool):
        raise ValueError("must be an integer, not a boolean")
    return value


def _ends_text(value: Any) -> Any:
    """``endsAt``: Alertmanager's "no end yet" (Go's zero time, ``0001-01-01T00:00:00Z``) is None; any other
    value is a time as ``startsAt`` is."""
    if isinstance(value, str):
        try:
            moment = datetime.fromisoformat(value)
        except ValueError:
            return value  # worded by the time's own validation
        if moment.utcoffset() == timedelta(0) and moment.replace(tzinfo=None) == datetime.min:
            return None
    return _rfc3339_text(value)


Timestamp = Annotated[ClientTime, BeforeValidator(_rfc3339_text)]
EndTimestamp = Annotated[ClientTime | None, BeforeValidator(_ends_text)]
Count = Annotated[int, BeforeValidator(_count)]


class AlertmanagerAlert(BaseModel):
    """One alert of a notification."""

    model_config = ConfigDict(extra="ignore")

    status: Literal["firing", "resolved"]
    labels: dict[str, str]
    annotations: dict[str, str] = Field(default_factory=dict)
    startsAt: Timestamp  # noqa: N815 (the wire format's names)
    endsAt: EndTimestamp = None  # noqa: N815
    generatorURL: str = ""  # noqa: N815
    fingerprint: str = Field(default="", max_length=64)

    def ends(self) -> datetime | None:
        """``endsAt``, None while firing (Alertmanager sends 0001-01-01T00:00:00Z then)."""
        return self.endsAt


class AlertmanagerPayload(BaseModel):
    """A webhook notification: a group of alerts (version "4")."""

    model_config = ConfigDict(extra="ignore")

    version: Literal["4"]
    groupKey: str = ""  # noqa: N815
    truncatedAlerts: Count = 0  # noqa: N815
    status: Literal["firing", "resolved"]
    receiver: str = ""
    groupLabels: dict[str, str] = Field(default_factory=dict)  # noqa: N815
    commonLabels: dict[str, str] = Field(default_factory=dict)  # noqa: N815
    commonAnnotations: dict[str, str] = Field(default_factory=dict)  # noqa: N815
    externalURL: str = ""  # noqa: N815
    alerts: list[AlertmanagerAlert] = Field(max_length=MAX_ALERTS)


@dataclass(frozen=True)
class Received:
    """What the receiver did with one alert of a notification."""

    fingerprint: str
    alertname: str
    model: str | None
    status: Literal["firing", "resolved"]
    id: int | None  # the alert's row (None: a duplicate of a resolved alert already recorded)
    outcome: Literal["recorded", "updated", "resolved", "duplicate"]
    actionable: bool  # its model is in the registry


@dataclass(frozen=True)
class RetrainRequested:
    """The retraining job an alert asked for (label ``action="retrain"``): enqueued, found, or refused."""

    alertname: str
    retrain: RetrainOutcome

    def as_dict(self) -> dict[str, Any]:
        """As the receiver answers it."""
        r = self.retrain
        return {
            "fingerprint": r.fingerprint,
            "alertname": self.alertname,
            "alert_id": r.alert_id,
            **r.evidence(),
        }


@dataclass(frozen=True)
class Ignored:
    """An alert whose actions did not run, and why."""

    fingerprint: str
    alertname: str
    reason: str


@dataclass(frozen=True)
class Receipt:
    """The receiver's answer to a notification."""

    received: int
    alerts: list[Received] = field(default_factory=list)
    jobs: list[RetrainRequested] = field(default_factory=list)
    ignored: list[Ignored] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        """The JSON answer: ``{"received": n, "alerts": [...], "jobs": [...], "ignored": [...]}``."""
        return {
            "received": self.received,
            "alerts": [asdict(a) for a in self.alerts],
            "jobs": [j.as_dict() for j in self.jobs],
            "ignored": [asdict(i) for i in self.ignored],
        }


def _json_value(value: Any) -> str:
    """``value`` as the JSON body held it: ``the number 4``, ``the boolean true``, ``null``, ``[4]``."""
    text = json.dumps(value)[:40]
    if isinstance(value, bool):
        return f"the boolean {text}"
    return f"the number {text}" if isinstance(value, int | float) else text


def parse_payload(data: Any) -> AlertmanagerPayload:
    """The notification, or Invalid naming the field (``version`` first: only "4" is understood)."""
    if not isinstance(data, dict):
        raise Invalid(
            f"the body must be an Alertmanager webhook payload (a JSON object), got {type(data).__name__}"
        )
    if "version" in data and not isinstance(data["version"], str):  # e.g. 4: the right version, wrong type
        given = _json_value(data["version"])
        raise Invalid(f'version: must be the string "{VERSION}", as Alertmanager sends it, not {given}')
    if "version" in data and data["version"] != VERSION:
        raise Invalid(
            f"version: Alertmanager webhook payload version {json.dumps(data['version'])} is not supported; "
            f'this receiver understands version "{VERSION}" (Alertmanager webhook_config)'
        )
    try:
        payload = AlertmanagerPayload.model_validate(data)
    except ValidationError as exc:
        raise Invalid("; ".join(errors_at(exc))) from None
    if holds_nul(payload.model_dump(mode="json")):  # the fields kept (others are ignored) are stored as text
        raise Invalid("a label, annotation or field holds a NUL character (\\u0000), which cannot be stored")
    return payload


async def auth_denied(request: Request, settings: Settings) -> Response | None:
    """None when the caller sent the configured Alertmanager credentials; else the 401 (or admin) answer."""
    token, basic = settings.alertmanager_token, settings.alertmanager_basic_auth
    if token is None and basic is None:
        await authorize(request, Scope.ADMIN)  # raises the 401/403 answer
        return None
    scheme, _, given = request.headers.get("authorization", "").partition(" ")
    given = given.strip()
    if token is not None and scheme.lower() == "bearer" and same_secret(given, token.get_secret_value()):
        return None
    if basic is not None and scheme.lower() == "basic":
        try:
            decoded = base64.b64decode(given, validate=True).decode()
        except (binascii.Error, ValueError, UnicodeDecodeError):
            decoded = ""
        if same_secret(decoded, basic.get_secret_value()):
            return None
    wanted = " or ".join(
        w
        for w, on in (
            ("'Authorization: Bearer <DRIFTWARDEN_ALERTMANAGER_TOKEN>'", token is not None),
            ("basic auth <DRIFTWARDEN_ALERTMANAGER_BASIC_AUTH>", basic is not None),
        )
        if on
    )
    response = error_response(
        401,
        f"the Alertmanager receiver needs {wanted} (missing or wrong credentials)",
        request_id_of(request),
    )
    response.headers["www-authenticate"] = (
        'Bearer realm="driftwarden"' if token is not None else ('Basic realm="driftwarden"')
    )
    return response
