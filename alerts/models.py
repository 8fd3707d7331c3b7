"""Alert tables (rules, alert instances and their history, silences, webhook subscriptions and the outbox)
and the pydantic schemas the API and the CLI show them with."""

from __future__ import annotations

import enum
from datetime import datetime
from typing import Any

from pydantic import BaseModel, ConfigDict, field_validator
from sqlalchemy import (
    Boolean,
    Float,
    ForeignKey,
    Index,
    Integer,
    String,
    Text,
    UniqueConstraint,
    text,
)
from sqlalchemy.orm import Mapped, mapped_column

from core.config import mask_url
from core.database import Base, UTCDateTime, utcnow


class AlertState(enum.StrEnum):
    """Lifecycle of one alert instance."""

    PENDING = "pending"  # active, for fewer consecutive evaluations than its rule's ``for_runs``
    FIRING = "firing"  # active long enough: notified and acted on (unless silenced)
    RESOLVED = "resolved"  # no longer active (a pending alert resolves silently)


class AlertSource(enum.StrEnum):
    """Who raised an alert."""

    RULE = "rule"  # a driftwarden rule on a monitor run or a health pass
    ALERTMANAGER = "alertmanager"  # received from Prometheus Alertmanager
    GATE = "gate"  # the validation gate rejected a retrained candidate


class DeliveryState(enum.StrEnum):
    """Lifecycle of one outgoing webhook message."""

    PENDING = "pending"  # due at ``next_attempt_at``
    DELIVERED = "delivered"  # a 2xx answer acknowledged it
    DEAD = "dead"  # no 2xx after ``webhook_max_attempts`` attempts (redeliver puts it back)


OPEN_WHERE = "state <> 'resolved'"  # the rows of the partial unique index: one open alert per fingerprint


class AlertRule(Base):
    """One rule of a model (or of ``*``: every model without rules of its own)."""

    __tablename__ = "alert_rules"
    __table_args__ = (UniqueConstraint("model_name", "name", name="uq_alert_rules_model_name_name"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    model_name: Mapped[str] = mapped_column(String(128))
    name: Mapped[str] = mapped_column(String(64))
    kind: Mapped[str] = mapped_column(String(32))
    params: Mapped[dict[str, Any]] = mapped_column(default=dict)
    severity: Mapped[str] = mapped_column(String(16))
    for_runs: Mapped[int] = mapped_column(Integer, default=1)
    labels: Mapped[dict[str, Any]] = mapped_column(default=dict)
    annotations: Mapped[dict[str, Any]] = mapped_column(default=dict)
    actions: Mapped[list[Any]] = mapped_column(default=list)
    enabled: Mapped[bool] = mapped_column(Boolean, default=True)
    source: Mapped[str] = mapped_column(String(16))  # default | file | api
    updated_at: Mapped[datetime] = mapped_column(UTCDateTime(), default=utcnow)


class Alert(Base):
    """One alert instance: a rule (or an Alertmanager alert) active for one label set, from start to end."""

    __tablename__ = "alerts"
    __table_args__ = (
        Index(
            "uq_alerts_open_fingerprint",
            "fingerprint",
            unique=True,
            sqlite_where=text(OPEN_WHERE),
            postgresql_where=text(OPEN_WHERE),
        ),
        Index("ix_alerts_model_name_state", "model_name", "state"),
    )

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    fingerprint: Mapped[str] = mapped_column(String(64))
    model_name: Mapped[str | None] = mapped_column(String(128), nullable=True)
    rule_name: Mapped[str] = mapped_column(String(128))
    source: Mapped[str] = mapped_column(String(16))
    state: Mapped[str] = mapped_column(String(16))
    severity: Mapped[str] = mapped_column(String(16))
    labels: Mapped[dict[str, Any]] = mapped_column(default=dict)
    annotations: Mapped[dict[str, Any]] = mapped_column(default=dict)
    evidence: Mapped[dict[str, Any]] = mapped_column(default=dict)
    value: Mapped[float | None] = mapped_column(Float, nullable=True)
    consecutive: Mapped[int] = mapped_column(Integer, default=0)
    started_at: Mapped[datetime] = mapped_column(UTCDateTime(), default=utcnow)
    fired_at: Mapped[datetime | None] = mapped_column(UTCDateTime(), nullable=True)
    resolved_at: Mapped[datetime | None] = mapped_column(UTCDateTime(), nullable=True)
    last_evaluated_at: Mapped[datetime] = mapped_column(UTCDateTime(), default=utcnow)
    last_notified_at: Mapped[datetime | None] = mapped_column(UTCDateTime(), nullable=True)
    silenced: Mapped[bool] = mapped_column(Boolean, default=False)


class AlertEvent(Base):
    """One entry of an alert's history: a state change, a silence, a notification or an action."""

    __tablename__ = "alert_events"
    __table_args__ = (Index("ix_alert_events_alert_id", "alert_id"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    alert_id: Mapped[int] = mapped_column(ForeignKey("alerts.id", ondelete="CASCADE"))
    at: Mapped[datetime] = mapped_column(UTCDateTime(), default=utcnow)
    from_state: Mapped[str | None] = mapped_column(String(16), nullable=True)
    to_state: Mapped[str] = mapped_column(String(16))
    detail: Mapped[str] = mapped_column(Text, default="")


class Silence(Base):
    """Mutes notifications and actions of the alerts its matchers select, from starts_at to ends_at."""

    __tablename__ = "silences"

    id: Mapped[str] = mapped_column(String(36), primary_key=True)
    matchers: Mapped[list[Any]] = mapped_column()
    starts_at: Mapped[datetime] = mapped_column(UTCDateTime())
    ends_at: Mapped[datetime] = mapped_column(UTCDateTime())
    created_by: Mapped[str] = mapped_column(String(128))
    comment: Mapped[str] = mapped_column(Text, default="")
    created_at: Mapped[datetime] = mapped_column(UTCDateTime(), default=utcnow)
    expired_at: Mapped[datetime | None] = mapped_column(UTCDateTime(), nullable=True)


class WebhookSubscription(Base):
    """A receiver of signed webhook messages (Standard Webhooks) and the events it wants."""

    __tablename__ = "webhook_subscriptions"

    id: Mapped[str] = mapped_column(String(36), primary_key=True)
    url: Mapped[str] = mapped_column(Text)
    secret: Mapped[str] = mapped_column(String(128))
    filter: Mapped[dict[str, Any]] = mapped_column(default=dict)
    description: Mapped[str] = mapped_column(Text, default="")
    enabled: Mapped[bool] = mapped_column(Boolean, default=True)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime(), default=utcnow)


class WebhookDelivery(Base):
    """The outbox: one message to one subscription, its exact body, and where its delivery stands."""

    __tablename__ = "webhook_deliveries"
    __table_args__ = (
        Index("ix_webhook_deliveries_state_next_attempt_at", "state", "next_attempt_at"),
        Index("ix_webhook_deliveries_webhook_id", "webhook_id"),
    )

    id: Mapped[str] = mapped_column(String(40), primary_key=True)  # the webhook-id header: msg_<hex>
    webhook_id: Mapped[str] = mapped_column(ForeignKey("webhook_subscriptions.id", ondelete="CASCADE"))
    event_type: Mapped[str] = mapped_column(String(32))
    payload: Mapped[str] = mapped_column(Text)  # the exact JSON body, sent unchanged on every attempt
    state: Mapped[str] = mapped_column(String(16), default=DeliveryState.PENDING.value)
    attempts: Mapped[int] = mapped_column(Integer, default=0)
    next_attempt_at: Mapped[datetime] = mapped_column(UTCDateTime(), default=utcnow)
    last_status_code: Mapped[int | None] = mapped_column(Integer, nullable=True)
    last_error: Mapped[str | None] = mapped_column(Text, nullable=True)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime(), default=utcnow)
    delivered_at: Mapped[datetime | None] = mapped_column(UTCDateTime(), nullable=True)


# --- what the API and the CLI show -------------------------------------------------------------------------


class _Read(BaseModel):
    model_config = ConfigDict(from_attributes=True)  # the times come from UTCDateTime columns: aware UTC


class AlertEventRead(_Read):
    """One entry of an alert's history."""

    at: datetime
    from_state: str | None
    to_state: str
    detail: str


class AlertRead(_Read):
    """An alert instance."""

    id: int
    fingerprint: str
    model_name: str | None
    rule_name: str
    source: str
    state: str
    severity: str
    labels: dict[str, Any]
    annotations: dict[str, Any]
    evidence: dict[str, Any]
    value: float | None
    consecutive: int
    started_at: datetime
    fired_at: datetime | None
    resolved_at: datetime | None
    last_evaluated_at: datetime
    last_notified_at: datetime | None
    silenced: bool


class AlertDetail(AlertRead):
    """An alert instance with its history (oldest first)."""

    history: list[AlertEventRead]


class SilenceRead(_Read):
    """A silence; ``active`` says whether it mutes alerts now."""

    id: str
    matchers: list[dict[str, Any]]
    starts_at: datetime
    ends_at: datetime
    created_by: str
    comment: str
    created_at: datetime
    expired_at: datetime | None
    active: bool = False


class WebhookRead(_Read):
    """A webhook subscription (its secret is shown only once, when it is created; a password or token in
    its URL never: ``http://user:***@host/``)."""

    id: str
    url: str
    filter: dict[str, Any]
    description: str
    enabled: bool
    created_at: datetime

    @field_validator("url")
    @classmethod
    def _masked(cls, url: str) -> str:
        return mask_url(url)


class WebhookCreated(WebhookRead):
    """The answer to creating a subscription: the one time its secret is shown."""

    secret: str


class DeliveryRead(_Read):
    """One outgoing message and where its delivery stands."""

    id: str
    webhook_id: str
    event_type: str
    state: str
    attempts: int
    next_attempt_at: datetime
    last_status_code: int | None
    last_error: str | None
    created_at: datetime
    delivered_at: datetime | None
