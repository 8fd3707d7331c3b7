"""The webhook outbox: deliveries added with the state change they announce, claimed, retried, purged."""

from __future__ import annotations

import secrets
from collections.abc import Collection, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import delete, func, or_, select, update
from sqlalchemy.orm import Session

from alerts.models import DeliveryState, WebhookDelivery, WebhookSubscription
from alerts.service.locks import write_lock
from core.errors import NotFound


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
