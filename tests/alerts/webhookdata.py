"""Webhook test builders: settings, a subscription, queued messages and the deliveries table read back."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from pydantic import SecretStr

from alerts import flows, service
from alerts.specs import WebhookSpec
from core.config import Settings
from core.database import Database


def settings_for(db: Database, **overrides: Any) -> Settings:
    values: dict[str, Any] = {
        "webhook_backoff_s": 2.0,
        "webhook_backoff_max_s": 600.0,
        "webhook_timeout_s": 5.0,
    }
    return Settings(database_url=SecretStr(db.url), **{**values, **overrides})


def subscribe(db: Database, url: str, secret: str | None = None) -> str:
    with db.session() as s:
        return flows.add_webhook(session=s, spec=WebhookSpec(url=url, secret=secret)).id


def queue_messages(db: Database, webhook_id: str, n: int, at: datetime) -> list[str]:
    ids = []
    with db.session() as s:
        for i in range(n):
            body = f'{{"type":"alert.firing","timestamp":"{at.isoformat()}","data":{{"n":{i},"text":"é ✓"}}}}'
            row = service.add_delivery(
                session=s, webhook_id=webhook_id, event_type="alert.firing", payload=body, now=at
            )
            ids.append(row.id)
    return ids


def deliveries(db: Database) -> dict[str, Any]:
    with db.session() as s:
        return {d.id: d for d in service.list_deliveries(session=s, limit=1000)}
