"""Alert tables through one door: rules, alerts and their history, silences, subscriptions and the outbox.

Plain functions over a ``Session`` (keyword-only arguments); the caller's transaction holds every change,
so an alert's state change and the outbox rows announcing it commit together or not at all.
"""

from __future__ import annotations

import secrets
import uuid
import zlib
from collections.abc import Collection, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import delete, func, or_, select, text, update
from sqlalchemy.orm import Session

from alerts.labels import Matcher, matches_all
from alerts.models import (
    Alert,
    AlertEvent,
    AlertRule,
    AlertState,
    DeliveryState,
    Silence,
    WebhookDelivery,
    WebhookSubscription,
)
from alerts.rules import DEFAULT_RULES
from alerts.specs import Kind, RuleSpec
from core.database import begin_sqlite, utcnow
from core.errors import NotFound

WILDCARD = "*"  # the model name of the rules every model without rules of its own follows


def write_lock(*, session: Session, key: str) -> None:
    """Serialize writers of ``key`` until the transaction ends (PostgreSQL: advisory lock; SQLite: the
    database's write lock taken at once, so a read-then-write never fails halfway)."""
    connection = session.connection()
    if connection.dialect.name == "postgresql":
        lock_id = zlib.crc32(f"driftwarden.alerts:{key}".encode())
        connection.execute(text("SELECT pg_advisory_xact_lock(:k)"), {"k": lock_id})
    else:
        begin_sqlite(session, immediate=True)


# --- rules --------------------------------------------------------------------------------------------------


def _spec(row: AlertRule) -> RuleSpec:
    return RuleSpec(
        name=row.name,
        kind=Kind(row.kind),
        params=dict(row.params or {}),
        severity=row.severity,  # type: ignore[arg-type]
        for_runs=row.for_runs,
        labels=dict(row.labels or {}),
        annotations=dict(row.annotations or {}),
        actions=list(row.actions or []),
        enabled=row.enabled,
    )


def stored_rules(*, session: Session, model_name: str) -> list[AlertRule]:
    """The rules stored for ``model_name`` (or ``*``), in the order they were given."""
    return list(
        session.scalars(select(AlertRule).where(AlertRule.model_name == model_name).order_by(AlertRule.id))
    )


def replace_rules(
    *, session: Session, model_name: str, rules: Sequence[RuleSpec], source: str
) -> list[AlertRule]:
    """Replace the stored rules of ``model_name`` (an empty list: back to the defaults)."""
    session.execute(delete(AlertRule).where(AlertRule.model_name == model_name))
    now = utcnow()
    rows = [
        AlertRule(
            model_name=model_name,
            name=r.name,
            kind=r.kind.value,
            params=dict(r.params),
            severity=r.severity,
            for_runs=r.for_runs,
            labels=dict(r.labels),
            annotations=dict(r.annotations),
            actions=list(r.actions),
            enabled=r.enabled,
            source=source,
            updated_at=now,
        )
        for r in rules
    ]
    session.add_all(rows)
    session.flush()
    return rows


def rule_models(*, session: Session) -> list[str]:
    """Model names (and ``*``) that have stored rules."""
    return sorted(session.scalars(select(AlertRule.model_name).distinct()))


@dataclass(frozen=True)
class RuleSet:
    """The rules a model follows and where they come from: ``model``, ``wildcard`` (``*``) or ``default``."""

    origin: str
    source: str  # how they were stored: file | api | default
    rules: list[RuleSpec]


def effective_rules(*, session: Session, model_name: str) -> RuleSet:
    """The model's own stored rules, else the ``*`` rules, else the defaults."""
    for origin, name in (("model", model_name), ("wildcard", WILDCARD)):
        rows = stored_rules(session=session, model_name=name)
        if rows:
            return RuleSet(origin=origin, source=rows[0].source, rules=[_spec(r) for r in rows])
    return RuleSet(origin="default", source="default", rules=list(DEFAULT_RULES))


# --- alerts -------------------------------------------------------------------------------------------------


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


# --- silences -----------------------------------------------------------------------------------------------


def add_silence(
    *,
    session: Session,
    matchers: Sequence[Matcher],
    starts_at: datetime,
    ends_at: datetime,
    created_by: str,
    comment: str,
    now: datetime,
) -> Silence:
    """A new silence."""
    row = Silence(
        id=str(uuid.uuid4()),
        matchers=[m.as_dict() for m in matchers],
        starts_at=starts_at,
        ends_at=ends_at,
        created_by=created_by,
        comment=comment,
        created_at=now,
    )
    session.add(row)
    session.flush()
    return row


def get_silence(*, session: Session, silence_id: str) -> Silence:
    """One silence, or NotFound."""
    row = session.get(Silence, silence_id)
    if row is None:
        raise NotFound(f"no silence {silence_id!r}: `GET /v1/silences` shows the silences")
    return row


def list_silences(*, session: Session, limit: int = 200) -> list[Silence]:
    """Silences, newest first."""
    return list(session.scalars(select(Silence).order_by(Silence.created_at.desc()).limit(limit)))


def is_active(silence: Silence, now: datetime) -> bool:
    """Whether a silence mutes alerts at ``now``."""
    return silence.expired_at is None and silence.starts_at <= now < silence.ends_at


def active_silences(*, session: Session, now: datetime) -> list[Silence]:
    """The silences muting alerts at ``now``."""
    rows = session.scalars(select(Silence).where(Silence.expired_at.is_(None), Silence.ends_at > now))
    return [s for s in rows if is_active(s, now)]


def silencing(silences: Sequence[Silence], labels: dict[str, Any]) -> Silence | None:
    """The first silence whose matchers all match ``labels``, or None."""
    for s in silences:
        if matches_all((Matcher.from_dict(m) for m in s.matchers), labels):
            return s
    return None


def expire_silence(*, session: Session, silence_id: str, now: datetime) -> Silence:
    """End a silence now (it stays listed, with ``expired_at``)."""
    row = get_silence(session=session, silence_id=silence_id)
    if row.expired_at is None:
        row.expired_at = now
        session.flush()
    return row


# --- webhook subscriptions ----------------------------------------------------------------------------------


def add_subscription(
    *,
    session: Session,
    url: str,
    secret: str,
    filter: dict[str, Any],
    description: str,
    enabled: bool,
    now: datetime,
) -> WebhookSubscription:
    """A new subscription."""
    row = WebhookSubscription(
        id=str(uuid.uuid4()),
        url=url,
        secret=secret,
        filter=filter,
        description=description,
        enabled=enabled,
        created_at=now,
    )
    session.add(row)
    session.flush()
    return row


def list_subscriptions(*, session: Session, enabled_only: bool = False) -> list[WebhookSubscription]:
    """Subscriptions, oldest first."""
    stmt = select(WebhookSubscription).order_by(WebhookSubscription.created_at, WebhookSubscription.id)
    if enabled_only:
        stmt = stmt.where(WebhookSubscription.enabled.is_(True))
    return list(session.scalars(stmt))


def get_subscription(*, session: Session, webhook_id: str) -> WebhookSubscription:
    """One subscription, or NotFound."""
    row = session.get(WebhookSubscription, webhook_id)
    if row is None:
        raise NotFound(
            f"no webhook {webhook_id!r}: `GET /v1/webhooks` (or `driftwarden webhooks list`) shows them"
        )
    return row


def remove_subscription(*, session: Session, webhook_id: str) -> None:
    """Delete a subscription and its outbox rows."""
    get_subscription(session=session, webhook_id=webhook_id)
    session.execute(delete(WebhookDelivery).where(WebhookDelivery.webhook_id == webhook_id))
    session.execute(delete(WebhookSubscription).where(WebhookSubscription.id == webhook_id))


# --- the outbox ---------------------------------------------------------------------------------------------


def new_delivery_id() -> str:
    """A webhook-id: ``msg_`` and 32 random hex digits."""
    return f"msg_{secrets.token_hex(16)}"


def add_delivery(
    *, session: Session, webhook_id: str, event_type: str, payload: str, now: datetime
) -> WebhookDelivery:
    """One outgoing message, due now."""
    row = WebhookDelivery(
        id=new_delivery_id(),
        webhook_id=webhook_id,
        event_type=event_type,
        payload=payload,
        state=DeliveryState.PENDING.value,
        attempts=0,
        next_attempt_at=now,
        created_at=now,
    )
    session.add(row)
    return row


def get_delivery(*, session: Session, delivery_id: str) -> WebhookDelivery:
    """One delivery, or NotFound."""
    row = session.get(WebhookDelivery, delivery_id)
    if row is None:
        raise NotFound(
            f"no webhook delivery {delivery_id!r}: `GET /v1/webhooks/{{id}}/deliveries` lists them"
        )
    return row


def list_deliveries(
    *, session: Session, webhook_id: str | None = None, state: str | None = None, limit: int = 100
) -> list[WebhookDelivery]:
    """Deliveries, newest first (of one subscription, in one state)."""
    stmt = (
        select(WebhookDelivery).order_by(WebhookDelivery.created_at.desc(), WebhookDelivery.id).limit(limit)
    )
    if webhook_id is not None:
        stmt = stmt.where(WebhookDelivery.webhook_id == webhook_id)
    if state is not None:
        stmt = stmt.where(WebhookDelivery.state == state)
    return list(session.scalars(stmt))


def count_deliveries(*, session: Session, state: str | None = None) -> int:
    """How many deliveries (in one state) the outbox holds."""
    stmt = select(func.count()).select_from(WebhookDelivery)
    if state is not None:
        stmt = stmt.where(WebhookDelivery.state == state)
    return int(session.scalar(stmt) or 0)


def delivery_counts(*, session: Session) -> dict[str, int]:
    """Outbox rows by state (states without rows are left out; one query)."""
    rows = session.execute(select(WebhookDelivery.state, func.count()).group_by(WebhookDelivery.state)).all()
    return {str(state): int(n) for state, n in rows}


def oldest_pending_delivery(*, session: Session) -> datetime | None:
    """When the oldest pending delivery was created (UTC), or None when none is pending."""
    oldest = session.scalar(
        select(func.min(WebhookDelivery.created_at)).where(
            WebhookDelivery.state == DeliveryState.PENDING.value
        )
    )
    return oldest


def purge_deliveries(*, session: Session, before: datetime, chunk: int = 5000) -> int:
    """Delete at most ``chunk`` delivered or dead messages created before ``before``; pending ones stay."""
    ids = select(WebhookDelivery.id).where(
        WebhookDelivery.state.in_((DeliveryState.DELIVERED.value, DeliveryState.DEAD.value)),
        WebhookDelivery.created_at < before,
    )
    doomed = list(session.scalars(ids.limit(chunk)))
    if doomed:
        session.execute(delete(WebhookDelivery).where(WebhookDelivery.id.in_(doomed)))
    return len(doomed)


def redeliver(*, session: Session, delivery_id: str, now: datetime) -> WebhookDelivery:
    """Put a delivery back in the outbox, due now, attempts reset (same id, same body)."""
    row = get_delivery(session=session, delivery_id=delivery_id)
    row.state = DeliveryState.PENDING.value
    row.attempts = 0
    row.next_attempt_at = now
    row.delivered_at = None
    session.flush()
    return row


@dataclass(frozen=True)
class Claim:
    """A delivery taken by one sender for one attempt (``attempt`` is its number, from 1)."""

    id: str
    attempt: int
    event_type: str
    payload: str
    url: str
    secret: str


@dataclass(frozen=True)
class Candidate:
    """A due delivery that a sender may claim (``attempts`` so far; ``url`` of its subscription)."""

    id: str
    attempts: int
    webhook_id: str
    url: str


def due_candidates(
    *,
    session: Session,
    due_by: datetime,
    limit: int,
    per_webhook: int | None = None,
    skip_webhooks: Collection[str] = (),
) -> list[Candidate]:
    """Up to ``limit`` deliveries due by ``due_by`` of enabled subscriptions (none of ``skip_webhooks``).

    With ``per_webhook``, at most that many of each subscription, the first of every subscription before
    the second of any (a subscription with many due messages cannot crowd out the others). PostgreSQL: the
    rows are locked ``FOR UPDATE SKIP LOCKED`` until the transaction ends; SQLite: the transaction takes
    the database's write lock first. Nothing changes: :func:`claim` takes the ones the caller wants.
    """
    dialect = session.connection().dialect.name
    if dialect == "sqlite":
        write_lock(session=session, key="outbox")
    due = [
        WebhookDelivery.state == DeliveryState.PENDING.value,
        WebhookDelivery.next_attempt_at <= due_by,
        WebhookSubscription.enabled.is_(True),
    ]
    if skip_webhooks:
        due.append(WebhookDelivery.webhook_id.not_in(list(skip_webhooks)))
    if per_webhook is None:
        stmt = (
            select(
                WebhookDelivery.id, WebhookDelivery.attempts, WebhookSubscription.id, WebhookSubscription.url
            )
            .join(WebhookSubscription, WebhookSubscription.id == WebhookDelivery.webhook_id)
            .where(*due)
            .order_by(WebhookDelivery.next_attempt_at, WebhookDelivery.id)
        )
    else:
        rank = func.row_number().over(
            partition_by=WebhookDelivery.webhook_id,
            order_by=(WebhookDelivery.next_attempt_at, WebhookDelivery.id),
        )
        ranked = (
            select(WebhookDelivery.id.label("id"), rank.label("rank"))
            .join(WebhookSubscription, WebhookSubscription.id == WebhookDelivery.webhook_id)
            .where(*due)
            .subquery()
        )
        stmt = (  # the window function in a subquery: PostgreSQL refuses FOR UPDATE beside one
            select(
                WebhookDelivery.id, WebhookDelivery.attempts, WebhookSubscription.id, WebhookSubscription.url
            )
            .join(ranked, ranked.c.id == WebhookDelivery.id)
            .join(WebhookSubscription, WebhookSubscription.id == WebhookDelivery.webhook_id)
            .where(ranked.c.rank <= per_webhook)
            .order_by(ranked.c.rank, WebhookDelivery.next_attempt_at, WebhookDelivery.id)
        )
    stmt = stmt.limit(limit)
    if dialect == "postgresql":
        stmt = stmt.with_for_update(of=WebhookDelivery, skip_locked=True)
    return [Candidate(id=i, attempts=a, webhook_id=w, url=u) for i, a, w, u in session.execute(stmt).all()]


def claim(
    *,
    session: Session,
    candidates: Sequence[Candidate],
    now: datetime,
    lease_s: float,
    due_by: datetime | None = None,
) -> list[Claim]:
    """Take ``candidates`` (from :func:`due_candidates`, same transaction, due by ``due_by``, default
    ``now``) for one attempt each.

    Each claimed row gets ``attempts + 1`` and is hidden until ``now + lease_s`` (a sender that dies
    mid-send leaves it to be retried then); each claim is a compare-and-set on ``attempts`` and on the row
    still being pending and due, so a row another sender took meanwhile is left out. The due check matters
    on PostgreSQL: a candidate locked just after another sender committed its claim comes back as that
    claimed version (``attempts`` already raised, its lease in the future; ``FOR UPDATE`` re-reads a row
    changed since the statement began), and without it the second sender would send the message again.
    Commit before sending.
    """
    due = due_by if due_by is not None else now
    taken: dict[str, int] = {}
    for candidate in candidates:
        result = session.execute(
            update(WebhookDelivery)
            .where(
                WebhookDelivery.id == candidate.id,
                WebhookDelivery.attempts == candidate.attempts,
                WebhookDelivery.state == DeliveryState.PENDING.value,
                WebhookDelivery.next_attempt_at <= due,
            )
            .values(attempts=candidate.attempts + 1, next_attempt_at=now + timedelta(seconds=lease_s))
            .execution_options(synchronize_session=False)
        )
        if result.rowcount == 1:  # type: ignore[attr-defined]
            taken[candidate.id] = candidate.attempts + 1
    if not taken:
        return []
    rows = session.execute(
        select(
            WebhookDelivery.id,
            WebhookDelivery.event_type,
            WebhookDelivery.payload,
            WebhookSubscription,
        )
        .join(WebhookSubscription, WebhookSubscription.id == WebhookDelivery.webhook_id)
        .where(WebhookDelivery.id.in_(list(taken)))
    ).all()
    order = {c.id: k for k, c in enumerate(candidates)}
    claims = [
        Claim(id=i, attempt=taken[i], event_type=e, payload=p, url=s.url, secret=s.secret)
        for i, e, p, s in rows
    ]
    return sorted(claims, key=lambda c: order[c.id])


def claim_due(*, session: Session, now: datetime, limit: int, lease_s: float) -> list[Claim]:
    """Take up to ``limit`` due deliveries for one attempt each, oldest due first (commit before sending).

    :func:`due_candidates` then :func:`claim`: PostgreSQL locks the candidates ``FOR UPDATE SKIP LOCKED``,
    so replicas never claim the same row; SQLite: one writer at a time, each claim a compare-and-set.
    """
    candidates = due_candidates(session=session, due_by=now, limit=limit)
    return claim(session=session, candidates=candidates, now=now, lease_s=lease_s)


def finish_attempt(
    *,
    session: Session,
    claim: Claim,
    now: datetime,
    delivered: bool,
    status_code: int | None,
    error: str | None,
    retry_at: datetime | None,
) -> bool:
    """Record the result of a claimed attempt: delivered, due again at ``retry_at``, or dead (``retry_at``
    None). False when another sender took the row over meanwhile (nothing changed)."""
    values: dict[str, Any] = {"last_status_code": status_code, "last_error": error}
    if delivered:
        values.update(state=DeliveryState.DELIVERED.value, delivered_at=now, last_error=None)
    elif retry_at is None:
        values.update(state=DeliveryState.DEAD.value)
    else:
        values.update(next_attempt_at=retry_at)
    result = session.execute(
        update(WebhookDelivery)
        .where(
            WebhookDelivery.id == claim.id,
            WebhookDelivery.attempts == claim.attempt,
            WebhookDelivery.state == DeliveryState.PENDING.value,
        )
        .values(**values)
        .execution_options(synchronize_session=False)
    )
    return bool(result.rowcount == 1)  # type: ignore[attr-defined]


def due_count(*, session: Session, now: datetime) -> int:
    """How many pending deliveries are due at ``now``."""
    return int(
        session.scalar(
            select(func.count())
            .select_from(WebhookDelivery)
            .where(
                WebhookDelivery.state == DeliveryState.PENDING.value,
                or_(WebhookDelivery.next_attempt_at <= now),
            )
        )
        or 0
    )
