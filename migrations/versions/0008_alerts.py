"""Alerts: alert_rules, alerts (+ alert_events), silences, webhook_subscriptions, webhook_deliveries (outbox).

A partial unique index allows one open (pending or firing) alert per fingerprint, so two evaluations at
once cannot raise the same alert twice; the outbox is read by (state, next_attempt_at).

Revision ID: 0008_alerts
Revises: 0007_training_jobs
Create Date: 2027-01-06
"""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision = "0008_alerts"
down_revision = "0007_training_jobs"
branch_labels = None
depends_on = None

OPEN = "uq_alerts_open_fingerprint"
OPEN_WHERE = "state <> 'resolved'"
JSONType = sa.JSON().with_variant(postgresql.JSONB(), "postgresql")


def _when(name: str, nullable: bool = False) -> sa.Column[Any]:
    return sa.Column(name, sa.DateTime(timezone=True), nullable=nullable)


def upgrade() -> None:
    op.create_table(
        "alert_rules",
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("model_name", sa.String(128), nullable=False),
        sa.Column("name", sa.String(64), nullable=False),
        sa.Column("kind", sa.String(32), nullable=False),
        sa.Column("params", JSONType, nullable=False),
        sa.Column("severity", sa.String(16), nullable=False),
        sa.Column("for_runs", sa.Integer(), nullable=False),
        sa.Column("labels", JSONType, nullable=False),
        sa.Column("annotations", JSONType, nullable=False),
        sa.Column("actions", JSONType, nullable=False),
        sa.Column("enabled", sa.Boolean(), nullable=False),
        sa.Column("source", sa.String(16), nullable=False),
        _when("updated_at"),
        sa.PrimaryKeyConstraint("id", name="pk_alert_rules"),
        sa.UniqueConstraint("model_name", "name", name="uq_alert_rules_model_name_name"),
    )
    op.create_table(
        "alerts",
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("fingerprint", sa.String(64), nullable=False),
        sa.Column("model_name", sa.String(128), nullable=True),
        sa.Column("rule_name", sa.String(128), nullable=False),
        sa.Column("source", sa.String(16), nullable=False),
        sa.Column("state", sa.String(16), nullable=False),
        sa.Column("severity", sa.String(16), nullable=False),
        sa.Column("labels", JSONType, nullable=False),
        sa.Column("annotations", JSONType, nullable=False),
        sa.Column("evidence", JSONType, nullable=False),
        sa.Column("value", sa.Float(), nullable=True),
        sa.Column("consecutive", sa.Integer(), nullable=False),
        _when("started_at"),
        _when("fired_at", nullable=True),
        _when("resolved_at", nullable=True),
        _when("last_evaluated_at"),
        _when("last_notified_at", nullable=True),
        sa.Column("silenced", sa.Boolean(), nullable=False),
        sa.PrimaryKeyConstraint("id", name="pk_alerts"),
    )
    op.create_index(
        OPEN,
        "alerts",
        ["fingerprint"],
        unique=True,
        sqlite_where=sa.text(OPEN_WHERE),
        postgresql_where=sa.text(OPEN_WHERE),
    )
    op.create_index("ix_alerts_model_name_state", "alerts", ["model_name", "state"])
    op.create_table(
        "alert_events",
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("alert_id", sa.Integer(), nullable=False),
        _when("at"),
        sa.Column("from_state", sa.String(16), nullable=True),
        sa.Column("to_state", sa.String(16), nullable=False),
        sa.Column("detail", sa.Text(), nullable=False),
        sa.ForeignKeyConstraint(
            ["alert_id"], ["alerts.id"], name="fk_alert_events_alert_id_alerts", ondelete="CASCADE"
        ),
        sa.PrimaryKeyConstraint("id", name="pk_alert_events"),
    )
    op.create_index("ix_alert_events_alert_id", "alert_events", ["alert_id"])
    op.create_table(
        "silences",
        sa.Column("id", sa.String(36), nullable=False),
        sa.Column("matchers", JSONType, nullable=False),
        _when("starts_at"),
        _when("ends_at"),
        sa.Column("created_by", sa.String(128), nullable=False),
        sa.Column("comment", sa.Text(), nullable=False),
        _when("created_at"),
        _when("expired_at", nullable=True),
        sa.PrimaryKeyConstraint("id", name="pk_silences"),
    )
    op.create_table(
        "webhook_subscriptions",
        sa.Column("id", sa.String(36), nullable=False),
        sa.Column("url", sa.Text(), nullable=False),
        sa.Column("secret", sa.String(128), nullable=False),
        sa.Column("filter", JSONType, nullable=False),
        sa.Column("description", sa.Text(), nullable=False),
        sa.Column("enabled", sa.Boolean(), nullable=False),
        _when("created_at"),
        sa.PrimaryKeyConstraint("id", name="pk_webhook_subscriptions"),
    )
    op.create_table(
        "webhook_deliveries",
        sa.Column("id", sa.String(40), nullable=False),
        sa.Column("webhook_id", sa.String(36), nullable=False),
        sa.Column("event_type", sa.String(32), nullable=False),
        sa.Column("payload", sa.Text(), nullable=False),
        sa.Column("state", sa.String(16), nullable=False),
        sa.Column("attempts", sa.Integer(), nullable=False),
        _when("next_attempt_at"),
        sa.Column("last_status_code", sa.Integer(), nullable=True),
        sa.Column("last_error", sa.Text(), nullable=True),
        _when("created_at"),
        _when("delivered_at", nullable=True),
        sa.ForeignKeyConstraint(
            ["webhook_id"],
            ["webhook_subscriptions.id"],
            name="fk_webhook_deliveries_webhook_id_webhook_subscriptions",
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("id", name="pk_webhook_deliveries"),
    )
    op.create_index(
        "ix_webhook_deliveries_state_next_attempt_at", "webhook_deliveries", ["state", "next_attempt_at"]
    )
    op.create_index("ix_webhook_deliveries_webhook_id", "webhook_deliveries", ["webhook_id"])


def downgrade() -> None:
    op.drop_index("ix_webhook_deliveries_webhook_id", table_name="webhook_deliveries")
    op.drop_index("ix_webhook_deliveries_state_next_attempt_at", table_name="webhook_deliveries")
    op.drop_table("webhook_deliveries")
    op.drop_table("webhook_subscriptions")
    op.drop_table("silences")
    op.drop_index("ix_alert_events_alert_id", table_name="alert_events")
    op.drop_table("alert_events")
    op.drop_index("ix_alerts_model_name_state", table_name="alerts")
    op.drop_index(OPEN, table_name="alerts")
    op.drop_table("alerts")
    op.drop_table("alert_rules")
