"""Alert rules: a model's own, the wildcard's, the defaults (the rule set a run is judged by)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from sqlalchemy import delete, select
from sqlalchemy.orm import Session

from alerts.models import AlertRule
from alerts.rules import DEFAULT_RULES
from alerts.service.locks import WILDCARD
from alerts.specs import Kind, RuleSpec
from core.database import utcnow


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
