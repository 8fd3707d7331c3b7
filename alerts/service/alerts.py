"""Alerts and their history: open, find, add, list, count by severity and model."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from alerts.models import Alert, AlertEvent, AlertState
from core.errors import NotFound


def open_alert(*, session: Session, fingerprint: str) -> Alert | None:
    """The pending or firing alert of a fingerprint, or None."""
    return session.scalar(
        select(Alert).where(Alert.fingerprint == fingerprint, Alert.state != AlertState.RESOLVED.value)
    )


def open_alerts_of(*, session: Session, fingerprints: Sequence[str]) -> dict[str, Alert]:
    """The pending or firing alert of each of ``fingerprints`` that has one (one query)."""
    if not fingerprints:
        return {}
    rows = session.scalars(
        select(Alert).where(
            Alert.fingerprint.in_(sorted(set(fingerprints))), Alert.state != AlertState.RESOLVED.value
        )
    )
    return {a.fingerprint: a for a in rows}


def open_alerts(*, session: Session, model_name: str | None = None, source: str | None = None) -> list[Alert]:
    """Every pending or firing alert (of a model, of a source), oldest first."""
    stmt = select(Alert).where(Alert.state != AlertState.RESOLVED.value).order_by(Alert.id)
    if model_name is not None:
        stmt = stmt.where(Alert.model_name == model_name)
    if source is not None:
        stmt = stmt.where(Alert.source == source)
    return list(session.scalars(stmt))


def find_alert(*, session: Session, fingerprint: str, started_at: datetime) -> Alert | None:
    """An alert of ``fingerprint`` that started at ``started_at`` (resolved or not), or None."""
    return session.scalar(
        select(Alert)
        .where(Alert.fingerprint == fingerprint, Alert.started_at == started_at)
        .order_by(Alert.id.desc())
        .limit(1)
    )


def add_alert(
    *,
    session: Session,
    fingerprint: str,
    model_name: str | None,
    rule_name: str,
    source: str,
    state: str,
    severity: str,
    labels: dict[str, Any],
    annotations: dict[str, Any],
    evidence: dict[str, Any],
    value: float | None,
    now: datetime,
    started_at: datetime | None = None,
) -> Alert:
    """A new alert instance (flushed: it has an id)."""
    alert = Alert(
        fingerprint=fingerprint,
        model_name=model_name,
        rule_name=rule_name,
        source=source,
        state=state,
        severity=severity,
        labels=labels,
        annotations=annotations,
        evidence=evidence,
        value=value,
        consecutive=1,
        started_at=started_at or now,
        fired_at=(started_at or now) if state == AlertState.FIRING.value else None,
        last_evaluated_at=now,
        silenced=False,
    )
    session.add(alert)
    session.flush()
    return alert


def record_event(
    *, session: Session, alert: Alert, to_state: str, detail: str, at: datetime, from_state: str | None = None
) -> AlertEvent:
    """One entry of an alert's history."""
    event = AlertEvent(
        alert_id=alert.id, at=at, from_state=from_state, to_state=to_state, detail=detail[:4000]
    )
    session.add(event)
    return event


def list_alerts(
    *,
    session: Session,
    model_name: str | None = None,
    state: str | None = None,
    severity: str | None = None,
    limit: int = 100,
) -> list[Alert]:
    """Alerts, newest first, filtered by model, state and severity."""
    stmt = select(Alert).order_by(Alert.id.desc()).limit(limit)
    if model_name is not None:
        stmt = stmt.where(Alert.model_name == model_name)
    if state is not None:
        stmt = stmt.where(Alert.state == state)
    if severity is not None:
        stmt = stmt.where(Alert.severity == severity)
    return list(session.scalars(stmt))


def has_severity(*, session: Session, severity: str) -> bool:
    """Whether any stored alert has ``severity`` (Alertmanager's alerts bring their own)."""
    return session.scalar(select(Alert.id).where(Alert.severity == severity).limit(1)) is not None


def get_alert(*, session: Session, alert_id: int) -> Alert:
    """One alert, or NotFound."""
    alert = session.get(Alert, alert_id)
    if alert is None:
        raise NotFound(
            f"no alert {alert_id}: `GET /v1/alerts` (or `driftwarden alerts list`) shows the alerts"
        )
    return alert


def alert_history(*, session: Session, alert_id: int) -> list[AlertEvent]:
    """The history of an alert, oldest first."""
    return list(
        session.scalars(select(AlertEvent).where(AlertEvent.alert_id == alert_id).order_by(AlertEvent.id))
    )


def firing_alerts(*, session: Session, model_name: str) -> list[Alert]:
    """The firing alerts of a model, most severe first."""
    order = {"critical": 0, "warning": 1, "info": 2}
    rows = list(
        session.scalars(
            select(Alert)
            .where(Alert.model_name == model_name, Alert.state == AlertState.FIRING.value)
            .order_by(Alert.id)
        )
    )
    return sorted(rows, key=lambda a: (order.get(a.severity, 3), a.id))


@dataclass(frozen=True)
class OpenCount:
    """How many open alerts share one model, severity, state and silenced flag."""

    model_name: str | None
    severity: str
    state: str
    silenced: bool
    count: int


def open_alert_counts(*, session: Session) -> list[OpenCount]:
    """Pending and firing alerts counted by model, severity, state and silenced flag (one query)."""
    rows = session.execute(
        select(Alert.model_name, Alert.severity, Alert.state, Alert.silenced, func.count())
        .where(Alert.state != AlertState.RESOLVED.value)
        .group_by(Alert.model_name, Alert.severity, Alert.state, Alert.silenced)
    ).all()
    return [OpenCount(m, sev, st, bool(sil), int(n)) for m, sev, st, sil, n in rows]
