"""The alert lifecycle's test world: settings, rules put on a model, a report evaluated, the alerts."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from pydantic import SecretStr

from alerts import flows, service
from alerts.models import AlertRead
from core.config import Settings
from core.database import Database, utcnow

T0 = datetime(2027, 1, 10, 12, 0, tzinfo=utcnow().tzinfo)


def settings_for(db: Database, **overrides: Any) -> Settings:
    return Settings(database_url=SecretStr(db.url), public_url="https://dw.example.com", **overrides)


def evaluate(
    db: Database, settings: Settings, report: dict[str, Any], at: datetime, **kw: Any
) -> flows.Evaluation:
    with db.session() as s:
        return flows.evaluate_model(
            session=s,
            settings=settings,
            model_name="credit",
            report=report,
            run_id=7,
            model_version=1,
            now=at,
            **kw,
        )


def put_rules(db: Database, rules: list[dict[str, Any]], model: str = "credit") -> None:
    with db.session() as s:
        flows.put_model_rules(session=s, model_name=model, rules_in=rules)


def alerts(db: Database) -> list[AlertRead]:
    with db.session() as s:
        return [AlertRead.model_validate(a) for a in service.list_alerts(session=s, limit=1000)][::-1]
