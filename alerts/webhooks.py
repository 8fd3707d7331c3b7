"""Outgoing webhook messages: their JSON body, their links back into the API, and their signature.

The ``report`` link is signed (:mod:`core.auth`, with the link key of ``access/``) so that a reader opens
the HTML report from a chat message in a browser, without a token, for ``report_link_ttl_s`` (7 days) after
the message; every other link is a plain API link that needs a token.

Messages follow Standard Webhooks (standardwebhooks.com): headers ``webhook-id`` (the delivery id, the same
on every retry), ``webhook-timestamp`` (Unix seconds of this attempt) and ``webhook-signature``
(``v1,<base64 HMAC-SHA256(secret, "{id}.{timestamp}.{body}")>``, made by the ``standardwebhooks``
package). The body is built once, stored in the outbox and sent byte for byte on every attempt.
"""

from __future__ import annotations

import base64
import binascii
import secrets
from collections.abc import Iterable, Mapping
from datetime import datetime, timedelta
from typing import Any

import orjson
from standardwebhooks import Webhook

from alerts.models import Alert
from core.auth import signed_path
from core.config import Settings
from core.config import base_url as base_url
from core.errors import Invalid
from core.times import iso_or_none
from monitors.findings import MAX_CAUSES, harm_summary, top_causes
from monitors.links import report_path

SECRET_PREFIX = "whsec_"
SECRET_BYTES = 32
USER_AGENT = "driftwarden-webhooks/1"


def new_secret() -> str:
    """A fresh signing secret: ``whsec_`` and 32 random bytes in base64."""
    return SECRET_PREFIX + base64.b64encode(secrets.token_bytes(SECRET_BYTES)).decode()


def normalize_secret(secret: str | None) -> str:
    """A caller's secret as ``whsec_<base64>`` (16 to 64 bytes), a new one when None; else Invalid."""
    if secret is None:
        return new_secret()
    raw = secret.removeprefix(SECRET_PREFIX)
    try:
        key = base64.b64decode(raw, validate=True)
    except (binascii.Error, ValueError):
        key = b""
    if not 16 <= len(key) <= 64:
        raise Invalid(
            "secret: must be 'whsec_' followed by 16 to 64 bytes in base64 (Standard Webhooks); leave it out "
            "to get a generated one"
        )
    return SECRET_PREFIX + base64.b64encode(key).decode()


def timestamp_of(now: datetime) -> str:
    """Unix seconds, as the ``webhook-timestamp`` header carries them."""
    return str(int(now.timestamp()))


def sign(*, secret: str, msg_id: str, at: datetime, body: str) -> str:
    """The ``webhook-signature`` header of ``body`` sent as ``msg_id`` at ``at``."""
    return Webhook(secret).sign(msg_id, at, body)


def headers(*, secret: str, msg_id: str, at: datetime, body: str) -> dict[str, str]:
    """Every header of one attempt."""
    return {
        "content-type": "application/json",
        "user-agent": USER_AGENT,
        "webhook-id": msg_id,
        "webhook-timestamp": timestamp_of(at),
        "webhook-signature": sign(secret=secret, msg_id=msg_id, at=at, body=body),
    }


def links(
    *,
    settings: Settings,
    model_name: str | None,
    link_key: bytes,
    at: datetime,
    alert_id: int | None = None,
) -> dict[str, Any]:
    """Where a reader of a message goes next: the report (a signed link, opened without a token until
    ``at`` + ``report_link_ttl_s``), the drift JSON, retrain, silence, the alert."""
    base = base_url(settings)
    out: dict[str, Any] = {}
    if model_name:
        expires = int((at + timedelta(seconds=settings.report_link_ttl_s)).timestamp())
        out.update(
            report=base + signed_path(key=link_key, path=report_path(model_name), expires=expires),
            drift=f"{base}/v1/models/{model_name}/drift",
            retrain={"method": "POST", "url": f"{base}/v1/models/{model_name}/retrain"},
            silence={
                "method": "POST",
                "url": f"{base}/v1/silences",
                "body": {
                    "matchers": [{"name": "model", "value": model_name, "is_regex": False, "is_equal": True}],
                    "duration": "2h",
                    "comment": "investigating",
                    "created_by": "you",
                },
            },
        )
    if alert_id is not None:
        out["alert"] = f"{base}/v1/alerts/{alert_id}"
    out["alerts"] = f"{base}/v1/alerts" + (f"?model={model_name}" if model_name else "")
    return out


def alert_item(alert: Alert, *, settings: Settings) -> dict[str, Any]:
    """One alert as a message shows it."""
    return {
        "id": alert.id,
        "fingerprint": alert.fingerprint,
        "name": alert.rule_name,
        "source": alert.source,
        "state": alert.state,
        "severity": alert.severity,
        "labels": dict(alert.labels or {}),
        "annotations": dict(alert.annotations or {}),
        "value": alert.value,
        "started_at": iso_or_none(alert.started_at),
        "fired_at": iso_or_none(alert.fired_at),
        "resolved_at": iso_or_none(alert.resolved_at),
        "silenced": alert.silenced,
        "evidence": dict(alert.evidence or {}),
        "url": f"{base_url(settings)}/v1/alerts/{alert.id}",
    }


def drift_evidence(
    report: Mapping[str, Any], *, run_id: int | None, model_version: int | None
) -> dict[str, Any]:
    """The drift part of a message: the run, the dataset verdict, each drifted feature's numbers, and why it
    matters when the report says (harm, causes, flagged segments)."""
    dataset = report.get("dataset") or {}
    features = []
    for f in report.get("features") or []:
        if not f.get("drifted"):
            continue
        r = f.get("result") or {}
        features.append(
            {
                "name": f.get("name"),
                "test": r.get("test"),
                "statistic": r.get("statistic"),
                "p_value": r.get("p_value"),
                "adjusted_p_value": r.get("adjusted_p_value"),
                "effect": r.get("effect"),
                "effect_name": r.get("effect_name"),
            }
        )
    prediction = report.get("prediction") or {}
    return {
        "run_id": run_id,
        "model_version": model_version,
        "rows": report.get("rows"),
        "dataset": {
            "drifted": dataset.get("drifted"),
            "share": dataset.get("share"),
            "n_drifted": dataset.get("n_drifted"),
            "n_features": dataset.get("n_features"),
            "drift_share": dataset.get("drift_share"),
        },
        "features": features,
        "prediction_drifted": prediction.get("drifted") if prediction else None,
        **_explained(report),
    }


def _explained(report: Mapping[str, Any]) -> dict[str, Any]:
    """Why the drift matters, when the report says: the harm verdict (``harm``), the top causes by impact
    (``causes``: on a report with an attribution) and the flagged segments (``segments``: their names)."""
    out: dict[str, Any] = {}
    if report.get("harm"):
        out["harm"] = harm_summary(report["harm"])
    if report.get("attribution"):
        out["causes"] = top_causes(report["attribution"])
    flagged = [str(s.get("segment")) for s in report.get("segments") or [] if s.get("flagged")]
    if flagged:
        out["segments"] = flagged[:MAX_CAUSES]
    return out


def message(*, event_type: str, at: datetime, data: dict[str, Any]) -> str:
    """The JSON body of a message (stored once, sent unchanged on every attempt)."""
    return orjson.dumps({"type": event_type, "timestamp": at.isoformat(), "data": data}).decode()


def alert_message(
    *,
    settings: Settings,
    model_name: str,
    alerts: Iterable[tuple[Alert, str]],
    evidence: dict[str, Any],
    at: datetime,
    link_key: bytes,
) -> tuple[str, str]:
    """``(event type, body)`` of one model's grouped alert message: ``alert.firing`` when any alert in it
    fires, else ``alert.resolved``. ``alerts`` pairs each alert with why it is in the message (``firing``:
    it started firing or its silence ended; ``repeat``: still firing after the repeat interval;
    ``resolved``). ``link_key`` signs the report link."""
    items = [{**alert_item(a, settings=settings), "notification": why} for a, why in alerts]
    event_type = "alert.firing" if any(i["state"] == "firing" for i in items) else "alert.resolved"
    only = items[0]["id"] if len(items) == 1 else None
    data = {
        "model": model_name,
        "group_key": f'{{}}:{{model="{model_name}"}}',
        "alerts": items,
        "evidence": evidence,
        "links": links(settings=settings, model_name=model_name, link_key=link_key, at=at, alert_id=only),
    }
    return event_type, message(event_type=event_type, at=at, data=data)


def job_message(
    *,
    settings: Settings,
    event_type: str,
    model_name: str,
    job: dict[str, Any],
    alerts: Iterable[Alert],
    at: datetime,
    link_key: bytes,
) -> str:
    """The body of a ``job.finished`` / ``job.rejected`` message (with the gate's alerts of a rejection);
    ``link_key`` signs the report link."""
    data = {
        "model": model_name,
        "group_key": f'{{}}:{{model="{model_name}"}}',
        "job": job,
        "alerts": [alert_item(a, settings=settings) for a in alerts],
        "links": links(settings=settings, model_name=model_name, link_key=link_key, at=at),
    }
    return message(event_type=event_type, at=at, data=data)


def retrain_message(
    *,
    settings: Settings,
    model_name: str,
    version: int,
    alert: Alert,
    why: str,
    window: Mapping[str, Any] | None,
    at: datetime,
    link_key: bytes,
) -> str:
    """The body of a ``retrain.requested`` message: an alert's ``retrain`` action on a version driftwarden
    cannot retrain (``why``), with the monitor run's window (``None`` when the alert came from elsewhere):
    its time range (the oldest and newest prediction's time) and its predictions and labelled rows."""
    win = window or {}
    data = {
        "model": model_name,
        "version": version,
        "reason": why,
        "alert": {
            "id": alert.id,
            "rule": alert.rule_name,
            "fingerprint": alert.fingerprint,
            "severity": alert.severity,
            "fired_at": iso_or_none(alert.fired_at),
            "url": f"{base_url(settings)}/v1/alerts/{alert.id}",
        },
        "window": None
        if window is None
        else {
            "start": win.get("start"),
            "end": win.get("end"),
            "predictions": win.get("rows"),
            "labelled": win.get("labelled"),
            "model_version": (win.get("spec") or {}).get("version"),
        },
        "links": links(settings=settings, model_name=model_name, link_key=link_key, at=at, alert_id=alert.id),
    }
    return message(event_type="retrain.requested", at=at, data=data)


def parse_body(body: str | bytes) -> dict[str, Any]:
    """A stored body back as a dict (tests, the CLI)."""
    data: dict[str, Any] = orjson.loads(body)
    return data
