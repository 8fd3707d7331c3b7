"""Webhook subscriptions: add, list, get, remove."""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import Any

from sqlalchemy import delete, select
from sqlalchemy.orm import Session

from alerts.models import WebhookDelivery, WebhookSubscription
from core.errors import NotFound


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
