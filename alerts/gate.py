"""Finished retraining jobs: a ``job.finished`` (or ``job.rejected``) message, and the validation gate's
alerts: one ``retrain_rejected`` alert per failed check of a rejected candidate, resolved when a later job
of the model is promoted."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy.orm import Session

from access.service import link_key
from alerts import rules, service, webhooks
from alerts.labels import fingerprint
from alerts.lifecycle import Ctx, Evaluation, Notice, alert_labels, apply_silences, record, resolve
from alerts.models import AlertSource, AlertState
from alerts.rules import Finding
from alerts.specs import Kind, RuleSpec, WebhookFilter
from core.config import Settings
from core.database import utcnow
from registry.models import EventAction
from registry.service import history
from training.gate import Verdict, check_verdict


def _job_doc(job: Any) -> dict[str, Any]:
    return {
        "id": getattr(job, "id", None),
        "model": getattr(job, "model_name", None),
        "state": str(getattr(job.state, "value", job.state)),
        "trigger": str(getattr(job.trigger, "value", job.trigger)) if getattr(job, "trigger", None) else None,
        "alert_id": getattr(job, "alert_id", None),
        "result_version": getattr(job, "result_version", None),
        "error": getattr(job, "error", None),
        "gate": getattr(job, "gate", None),
    }


def _gate_rule(ruleset: service.RuleSet) -> RuleSpec | None:
    """The model's ``retrain_rejected`` rule (the default one when its rules have none); None: disabled."""
    spec = next((r for r in ruleset.rules if r.kind is Kind.RETRAIN_REJECTED), None)
    if spec is None:
        spec = next(r for r in rules.DEFAULT_RULES if r.kind is Kind.RETRAIN_REJECTED)
    return spec if spec.enabled else None


def _was_promoted(session: Session, model_name: str, version: int | None) -> bool:
    if version is None:
        return False
    return any(
        e.action == EventAction.PROMOTE
        for e in history(session=session, model_name=model_name, version=version)
    )


def job_finished(
    *, session: Session, settings: Settings, job: Any, now: datetime | None = None
) -> Evaluation:
    """Announce a finished job (``job.finished``, or ``job.rejected`` with one gate alert per failed check);
    a job whose candidate was promoted resolves the model's gate alerts."""
    now = now or utcnow()
    model_name = str(job.model_name)
    service.write_lock(session=session, key=f"model:{model_name}")
    ctx = Ctx(
        session=session,
        settings=settings,
        model_name=model_name,
        now=now,
        silences=service.active_silences(session=session, now=now),
        ev=Evaluation(model_name),
    )
    gate = dict(job.gate or {})
    checks = [c for c in gate.get("checks") or [] if isinstance(c, dict)]
    failed = [c for c in checks if check_verdict(c) is Verdict.FAILED]
    state = str(getattr(job.state, "value", job.state))
    rejected = state == "rejected"
    if rejected:
        spec = _gate_rule(service.effective_rules(session=session, model_name=model_name))
        if not failed:
            failed = [{"name": "gate", "passed": False, "figures": {}, "message": job.error or "rejected"}]
        for check in failed if spec is not None else []:
            assert spec is not None
            name = str(check.get("name", "gate"))
            evidence = {
                "kind": Kind.RETRAIN_REJECTED.value,
                "check": name,
                "message": check.get("message"),
                "figures": check.get("figures") or {},
                "job_id": job.id,
                "candidate_version": job.result_version,
            }
            finding = Finding(True, None, evidence, {"check": name})
            labels = alert_labels(spec, model_name, finding)
            annotations = rules.render_annotations(spec, model_name, finding)
            alert = service.open_alert(session=session, fingerprint=fingerprint(labels))
            if alert is None:
                alert = service.add_alert(
                    session=session,
                    fingerprint=fingerprint(labels),
                    model_name=model_name,
                    rule_name=spec.name,
                    source=AlertSource.GATE.value,
                    state=AlertState.FIRING.value,
                    severity=spec.severity,
                    labels=labels,
                    annotations=annotations,
                    evidence=evidence,
                    value=None,
                    now=now,
                )
                record(ctx, alert, alert.state, f"job {job.id} rejected by the gate: {check.get('message')}")
                ctx.ev.fired.append(alert.id)
            else:
                alert.consecutive += 1
                alert.evidence = evidence
                alert.annotations = annotations
                alert.last_evaluated_at = now
                detail = f"job {job.id} rejected by the gate again: {check.get('message')}"
                record(ctx, alert, alert.state, detail, from_state=alert.state)
            apply_silences(ctx, alert)
            if not alert.silenced:
                ctx.ev.notices.append(Notice(alert, "firing", "notify" in spec.actions))
    elif state == "promoted" or _was_promoted(session, model_name, job.result_version):
        for alert in service.open_alerts(
            session=session, model_name=model_name, source=AlertSource.GATE.value
        ):
            was_notified = alert.last_notified_at is not None
            resolve(ctx, alert, f"job {job.id} promoted version {job.result_version}", notify=was_notified)
    for n in ctx.ev.notices:
        if n.why != "resolved":
            n.alert.last_notified_at = now
    event_type = "job.rejected" if rejected else "job.finished"
    doc = _job_doc(job)
    key: bytes | None = None  # the report links' signing key, read once when a message is made
    for sub in service.list_subscriptions(session=session, enabled_only=True):
        filt = WebhookFilter.model_validate(sub.filter or {})
        if not filt.wants(model=model_name, event=event_type):
            continue
        shown = [
            n.alert
            for n in ctx.ev.notices
            if n.notify and filt.wants(model=model_name, event=event_type, severity=n.alert.severity)
        ]
        if key is None:
            key = link_key(session=session, settings=settings)
        body = webhooks.job_message(
            settings=settings,
            event_type=event_type,
            model_name=model_name,
            job=doc,
            alerts=shown,
            at=now,
            link_key=key,
        )
        row = service.add_delivery(
            session=session, webhook_id=sub.id, event_type=event_type, payload=body, now=now
        )
        ctx.ev.deliveries.append(row.id)
    session.flush()
    return ctx.ev
