"""Finished retraining jobs: a ``job.finished`` (or ``job.rejected``) message, and the validation gate's
alerts: one ``retrain_rejected`` alert per failed check of a rejected candidate, resolved when a later job
of the model is promoted. The alerts go through :mod:`alerts.lifecycle` like every other source's."""

from __future__ import annotations

from dataclasses import replace
from datetime import datetime
from typing import Any

from sqlalchemy.orm import Session

from alerts import rules, service
from alerts.lifecycle import (
    Cadence,
    Evaluation,
    JobMessage,
    Pass,
    Signal,
    announce,
    open_or_advance,
    resolve,
    rule_signal,
)
from alerts.models import AlertSource
from alerts.rules import Finding
from alerts.specs import Kind, RuleSpec
from core.config import Settings
from core.database import utcnow
from registry.models import EventAction
from registry.service import history
from training.retraining.gate import Verdict, check_verdict
from training.retraining.models import JobState, TrainingJob


def _job_doc(job: TrainingJob) -> dict[str, Any]:
    return {
        "id": job.id,
        "model": job.model_name,
        "state": job.state.value,
        "trigger": job.trigger.value if job.trigger else None,
        "alert_id": job.alert_id,
        "result_version": job.result_version,
        "error": job.error,
        "gate": job.gate,
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


def gate_signal(spec: RuleSpec, job: TrainingJob, check: dict[str, Any]) -> Signal:
    """The signal of one failed check of a rejected job: firing at once, announced on every rejection."""
    name = str(check.get("name", "gate"))
    evidence = {
        "kind": Kind.RETRAIN_REJECTED.value,
        "check": name,
        "message": check.get("message"),
        "figures": check.get("figures") or {},
        "job_id": job.id,
        "candidate_version": job.result_version,
    }
    signal = rule_signal(spec, job.model_name, Finding(True, None, evidence, {"check": name}))
    return replace(
        signal,
        source=AlertSource.GATE,
        for_runs=1,
        cadence=Cadence.EVERY,
        opened=f"job {job.id} rejected by the gate: {check.get('message')}",
        advanced=f"job {job.id} rejected by the gate again: {check.get('message')}",
    )


def job_finished(
    *, session: Session, settings: Settings, job: TrainingJob, now: datetime | None = None
) -> Evaluation:
    """Announce a finished job (``job.finished``, or ``job.rejected`` with one gate alert per failed check);
    a job whose candidate was promoted resolves the model's gate alerts."""
    now = now or utcnow()
    model_name = job.model_name
    service.write_lock(session=session, key=f"model:{model_name}")
    pass_ = Pass(
        session=session,
        settings=settings,
        model_name=model_name,
        now=now,
        silences=service.active_silences(session=session, now=now),
        evaluation=Evaluation(model_name),
    )
    checks = [c for c in (job.gate or {}).get("checks") or [] if isinstance(c, dict)]
    failed = [c for c in checks if check_verdict(c) is Verdict.FAILED]
    rejected = job.state is JobState.REJECTED
    if rejected:
        spec = _gate_rule(service.effective_rules(session=session, model_name=model_name))
        if not failed:
            failed = [{"name": "gate", "passed": False, "figures": {}, "message": job.error or "rejected"}]
        signals = [gate_signal(spec, job, check) for check in failed] if spec is not None else []
        for signal in signals:
            already = service.open_alert(session=session, fingerprint=signal.fingerprint)
            open_or_advance(pass_, already, signal)
    elif job.state is JobState.PROMOTED or _was_promoted(session, model_name, job.result_version):
        for alert in service.open_alerts(
            session=session, model_name=model_name, source=AlertSource.GATE.value
        ):
            was_notified = alert.last_notified_at is not None
            resolve(pass_, alert, f"job {job.id} promoted version {job.result_version}", notify=was_notified)
    announce(pass_, JobMessage("job.rejected" if rejected else "job.finished", _job_doc(job)))
    session.flush()
    return pass_.evaluation
