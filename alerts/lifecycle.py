"""The steps of an alert's life, shared by every workflow that changes alerts (``alerts.flows``,
``alerts.gate``): raise or advance an alert, resolve it, mark it silenced, act on it (retrain, roll
back) and write the grouped outbox rows announcing what changed. Everything is written in the caller's
session (one transaction with the change it announces).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy.orm import Session

from access.service import link_key
from alerts import rules, service, webhooks
from alerts.labels import fingerprint
from alerts.models import Alert, AlertSource, AlertState, Silence
from alerts.rules import Finding
from alerts.specs import PERFORMANCE_KINDS, RuleSpec, WebhookFilter
from core.config import Settings
from core.errors import DomainError
from registry.models import EventAction, VersionState
from registry.service import history, rollback, serving_version
from training.service import enqueue


@dataclass
class Notice:
    """An alert to announce in this evaluation's message: why (``firing``, ``repeat``, ``resolved``) and
    whether its rule notifies at all."""

    alert: Alert
    why: str
    notify: bool


@dataclass
class Evaluation:
    """What one evaluation of a model did (alert ids, outbox ids, jobs, rollbacks)."""

    model_name: str
    pending: list[int] = field(default_factory=list)
    fired: list[int] = field(default_factory=list)
    resolved: list[int] = field(default_factory=list)
    repeated: list[int] = field(default_factory=list)
    deliveries: list[str] = field(default_factory=list)
    jobs: list[dict[str, Any]] = field(default_factory=list)
    rollbacks: list[dict[str, Any]] = field(default_factory=list)
    notices: list[Notice] = field(default_factory=list)


@dataclass
class Ctx:
    """What one evaluation works with: its session, settings, model, clock, silences and its result."""

    session: Session
    settings: Settings
    model_name: str
    now: datetime
    silences: list[Silence]
    ev: Evaluation
    model_version: int | None = None


def alert_labels(spec: RuleSpec, model_name: str, finding: Finding) -> dict[str, str]:
    """The label set of a rule's alert: alertname, model, severity, the rule's labels, feature/check."""
    return {
        **spec.labels,
        **finding.labels,
        "alertname": spec.name,
        "model": model_name,
        "severity": spec.severity,
    }


def record(ctx: Ctx, alert: Alert, to_state: str, detail: str, from_state: str | None = None) -> None:
    """One entry of the alert's history, at the evaluation's time."""
    service.record_event(
        session=ctx.session, alert=alert, from_state=from_state, to_state=to_state, detail=detail, at=ctx.now
    )


def apply_silences(ctx: Ctx, alert: Alert) -> None:
    """:func:`mark_silenced` with the evaluation's silences."""
    mark_silenced(session=ctx.session, silences=ctx.silences, alert=alert, now=ctx.now)


def mark_silenced(*, session: Session, silences: list[Silence], alert: Alert, now: datetime) -> None:
    """Set ``alert.silenced`` from the active silences (a change is recorded in its history)."""
    silence = service.silencing(silences, dict(alert.labels or {}))
    now_silenced = silence is not None
    if now_silenced == alert.silenced:
        return
    alert.silenced = now_silenced
    if silence is not None:
        comment = f": {silence.comment}" if silence.comment else ""
        detail = f"silenced by {silence.id} ({silence.created_by}{comment})"
    else:
        detail = "no longer silenced"
    service.record_event(
        session=session, alert=alert, from_state=alert.state, to_state=alert.state, detail=detail, at=now
    )


def keep_actions(old: Mapping[str, Any] | None, new: dict[str, Any]) -> dict[str, Any]:
    """New evidence that keeps what the alert's actions recorded (``retrain``, ``rollback``)."""
    kept = {k: v for k, v in (old or {}).items() if k in ("retrain", "rollback")}
    return {**new, **kept}


# --- actions ------------------------------------------------------------------------------------------------


def retrain(ctx: Ctx, alert: Alert, *, trigger: str, key: str, requested_by: str) -> dict[str, Any]:
    """Enqueue a retraining job for the alert's model (in a savepoint: a refusal leaves the rest intact)."""
    try:
        with ctx.session.begin_nested():
            result = enqueue(
                session=ctx.session,
                model_name=str(alert.model_name),
                trigger=trigger,
                requested_by=requested_by,
                idempotency_key=key,
                alert_id=alert.id,
                cooldown_s=ctx.settings.retrain_cooldown_s,
            )
    except DomainError as exc:
        info: dict[str, Any] = {"error": str(exc)}
    else:
        info = {"job_id": result.job_id, "created": result.created, "reason": result.reason}
    if "error" in info:
        detail = f"retrain not enqueued: {info['error']}"
    elif info["created"]:
        detail = f"retrain: job {info['job_id']} enqueued"
    else:
        detail = f"retrain: no new job ({info['reason']}" + (
            f"; job {info['job_id']})" if info["job_id"] is not None else ")"
        )
    alert.evidence = {**(alert.evidence or {}), "retrain": info}
    record(ctx, alert, alert.state, detail, from_state=alert.state)
    ctx.ev.jobs.append({"alert_id": alert.id, "fingerprint": alert.fingerprint, **info})
    return info


def rollback_if_watched(ctx: Ctx, alert: Alert) -> None:
    """Roll back a version promoted by a job less than ``rollback_watch_s`` ago (``auto_rollback``)."""
    if not ctx.settings.auto_rollback:
        return
    serving = serving_version(session=ctx.session, model_name=ctx.model_name)
    if serving is None or (ctx.model_version is not None and ctx.model_version != serving.version):
        return  # the report was of another version than the one serving now
    entered = [
        e
        for e in history(session=ctx.session, model_name=ctx.model_name, version=serving.version)
        if e.to_state == VersionState.SERVING
    ]
    if not entered:
        return
    last = entered[-1]
    promoted_at = last.at
    if last.action != EventAction.PROMOTE or not last.actor.startswith("job:"):
        return
    if (ctx.now - promoted_at).total_seconds() > ctx.settings.rollback_watch_s:
        return
    info: dict[str, Any] = {
        "from_version": serving.version,
        "promoted_by": last.actor,
        "promoted_at": promoted_at.isoformat(),
    }
    try:
        with ctx.session.begin_nested():
            target = rollback(session=ctx.session, model_name=ctx.model_name, actor=f"alert:{alert.id}")
    except DomainError as exc:
        info["error"] = str(exc)
        detail = f"automatic rollback of version {serving.version} failed: {exc}"
    else:
        info["to_version"] = target.version
        detail = (
            f"rolled back: version {serving.version} (promoted by {last.actor} at {promoted_at.isoformat()}) "
            f"replaced by version {target.version}"
        )
    alert.evidence = {**(alert.evidence or {}), "rollback": info}
    record(ctx, alert, alert.state, detail, from_state=alert.state)
    ctx.ev.rollbacks.append({"alert_id": alert.id, **info})


def act(ctx: Ctx, spec: RuleSpec, alert: Alert) -> None:
    if spec.kind in PERFORMANCE_KINDS:
        rollback_if_watched(ctx, alert)
    if "retrain" in spec.actions and alert.model_name:
        fired = alert.fired_at or ctx.now
        retrain(
            ctx,
            alert,
            trigger="alert",
            key=f"{alert.fingerprint}:{fired.isoformat()}",
            requested_by=f"alert:{alert.id}",
        )


# --- the lifecycle ------------------------------------------------------------------------------------------


def activate(
    ctx: Ctx, spec: RuleSpec, alert: Alert | None, labels: dict[str, str], finding: Finding
) -> Alert:
    annotations = rules.render_annotations(spec, ctx.model_name, finding)
    evidence = {**finding.evidence, "kind": spec.kind.value}
    summary = annotations.get("summary", spec.name)
    if alert is None:
        state = AlertState.FIRING if spec.for_runs <= 1 else AlertState.PENDING
        alert = service.add_alert(
            session=ctx.session,
            fingerprint=fingerprint(labels),
            model_name=ctx.model_name,
            rule_name=spec.name,
            source=AlertSource.RULE.value,
            state=state.value,
            severity=spec.severity,
            labels=labels,
            annotations=annotations,
            evidence=evidence,
            value=finding.value,
            now=ctx.now,
        )
        record(ctx, alert, state.value, f"{state.value}: {summary}")
        (ctx.ev.fired if state is AlertState.FIRING else ctx.ev.pending).append(alert.id)
    else:
        alert.consecutive += 1
        alert.value = finding.value
        alert.evidence = keep_actions(alert.evidence, evidence)
        alert.annotations = annotations
        alert.last_evaluated_at = ctx.now
        if alert.state == AlertState.PENDING.value and alert.consecutive >= spec.for_runs:
            alert.state = AlertState.FIRING.value
            alert.fired_at = ctx.now
            record(
                ctx,
                alert,
                AlertState.FIRING.value,
                f"firing after {alert.consecutive} consecutive active evaluations: {summary}",
                from_state=AlertState.PENDING.value,
            )
            ctx.ev.fired.append(alert.id)
    apply_silences(ctx, alert)
    if alert.state == AlertState.FIRING.value and not alert.silenced:
        notified = alert.last_notified_at
        if notified is None:
            ctx.ev.notices.append(Notice(alert, "firing", "notify" in spec.actions))
            act(ctx, spec, alert)
        elif ctx.now - notified >= timedelta(seconds=ctx.settings.alert_repeat_interval_s):
            ctx.ev.notices.append(Notice(alert, "repeat", "notify" in spec.actions))
            ctx.ev.repeated.append(alert.id)
    return alert


def resolve(ctx: Ctx, alert: Alert, reason: str, *, notify: bool) -> None:
    previous = alert.state
    apply_silences(ctx, alert)
    alert.state = AlertState.RESOLVED.value
    alert.resolved_at = ctx.now
    alert.last_evaluated_at = ctx.now
    if previous == AlertState.PENDING.value:
        record(
            ctx, alert, alert.state, f"resolved before firing ({reason}); not notified", from_state=previous
        )
        return
    record(ctx, alert, alert.state, f"resolved: {reason}", from_state=previous)
    ctx.ev.resolved.append(alert.id)
    if alert.last_notified_at is not None and not alert.silenced:
        ctx.ev.notices.append(Notice(alert, "resolved", notify))


def announce(ctx: Ctx, *, evidence: dict[str, Any]) -> None:
    """One outbox row per subscription holding every alert to announce; ``last_notified_at`` is set."""
    notices = ctx.ev.notices
    for n in notices:
        if n.why != "resolved":
            n.alert.last_notified_at = ctx.now
    wanted = [n for n in notices if n.notify]
    if not wanted:
        return
    counts: dict[int, int] = {}
    key: bytes | None = None  # the report links' signing key, read once when a message is made
    for sub in service.list_subscriptions(session=ctx.session, enabled_only=True):
        filt = WebhookFilter.model_validate(sub.filter or {})
        chosen = [
            n
            for n in wanted
            if filt.wants(
                model=ctx.model_name,
                event="alert.resolved" if n.why == "resolved" else "alert.firing",
                severity=n.alert.severity,
            )
        ]
        if not chosen:
            continue
        if key is None:
            key = link_key(session=ctx.session, settings=ctx.settings)
        event_type, body = webhooks.alert_message(
            settings=ctx.settings,
            model_name=ctx.model_name,
            alerts=[(n.alert, n.why) for n in chosen],
            evidence=evidence,
            at=ctx.now,
            link_key=key,
        )
        row = service.add_delivery(
            session=ctx.session, webhook_id=sub.id, event_type=event_type, payload=body, now=ctx.now
        )
        ctx.ev.deliveries.append(row.id)
        for n in chosen:
            counts[n.alert.id] = counts.get(n.alert.id, 0) + 1
    for n in wanted:
        k = counts.get(n.alert.id, 0)
        record(ctx, n.alert, n.alert.state, f"notified ({n.why}): {k} webhook message(s)", n.alert.state)
