"""The steps of an alert's life, shared by every source that changes alerts: the rules on a monitor run or
a health pass (``alerts.flows.evaluate_model``), a finished retraining job (``alerts.job_outcomes``: the
validation gate's alerts) and Prometheus Alertmanager (``alerts.flows.receive_alertmanager``).

Each source describes an active condition as a :class:`Signal`; :func:`open_or_advance` opens its alert or
advances the open one, :func:`resolve` resolves it. These two are the only places that set an alert's
``state``, ``consecutive`` and ``resolved_at``, firing a pending alert by :func:`is_firing` (the pure rule,
shared with ``alerts.backtest``'s in-memory replay). Around them: silences (:func:`mark_silenced`), actions
(retrain, roll back) and :func:`announce`, the one fan-out writing an outbox row per subscription for what
changed (through :func:`deliver`, which also writes a ``retrain`` action's ``retrain.requested``
message). Everything is written in the caller's session (one transaction with the change it announces).
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from typing import Any, Literal

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
from training.cluster.builders import NotRetrainable
from training.retraining.service import enqueue

Why = Literal["firing", "repeat", "resolved"]
RETRAIN_REQUESTED = "retrain.requested"


class Cadence(enum.Enum):
    """When a firing alert is announced."""

    ONCE = "once"  # when it starts firing, then every ``alert_repeat_interval_s`` while it fires (rules)
    EVERY = "every"  # on every report of the source (each rejected job is news)
    NEVER = "never"  # never by driftwarden (Alertmanager notifies on its own)


@dataclass(frozen=True)
class Signal:
    """A source's report that an alert's condition holds: which alert, what it shows, how it is announced
    and whose actions run when it is first announced."""

    source: AlertSource
    fingerprint: str
    rule_name: str
    severity: str
    labels: dict[str, str]
    annotations: dict[str, str]
    evidence: dict[str, Any]
    summary: str  # one line for the alert's history
    value: float | None = None
    started_at: datetime | None = None  # when the source saw it start (None: now)
    for_runs: int = 1  # consecutive reports before a new alert fires
    cadence: Cadence = Cadence.ONCE
    notify: bool = False  # whether its announcements go to the webhooks
    rule: RuleSpec | None = None  # the rule whose actions run when it is first announced
    opened: str | None = None  # the history entry of a new alert (None: "<state>: <summary>")
    advanced: str | None = None  # the history entry of each further report (None: none)


@dataclass
class Notice:
    """An alert to announce in this pass's message: why (``firing``, ``repeat``, ``resolved``) and
    whether its announcements go to the webhooks at all."""

    alert: Alert
    why: Why
    notify: bool


@dataclass(frozen=True)
class RetrainOutcome:
    """A ``retrain`` action: the job it enqueued (``created``) or found, or why it enqueued none."""

    alert_id: int
    fingerprint: str
    job_id: int | None = None
    created: bool = False
    reason: str | None = None
    error: str | None = None
    requested: int | None = None  # a version not retrainable here: its retrain.requested messages
    model_name: str | None = None  # the model a retrain.requested went out for

    def evidence(self) -> dict[str, Any]:
        """As the alert's ``evidence["retrain"]`` keeps it: the job and why, the event sent instead of a job
        (``event``, ``webhooks``: how many subscriptions it went to), or the error."""
        if self.error is not None:
            return {"error": self.error}
        doc: dict[str, Any] = {"job_id": self.job_id, "created": self.created, "reason": self.reason}
        if self.requested is not None:
            doc |= {"event": RETRAIN_REQUESTED, "webhooks": self.requested}
        return doc


@dataclass(frozen=True)
class RollbackOutcome:
    """An automatic rollback: the version a job promoted, and the version serving now or the error."""

    alert_id: int
    from_version: int
    promoted_by: str
    promoted_at: str
    to_version: int | None = None
    error: str | None = None

    def evidence(self) -> dict[str, Any]:
        """As the alert's ``evidence["rollback"]`` keeps it."""
        doc: dict[str, Any] = {
            "from_version": self.from_version,
            "promoted_by": self.promoted_by,
            "promoted_at": self.promoted_at,
        }
        if self.error is not None:
            doc["error"] = self.error
        else:
            doc["to_version"] = self.to_version
        return doc


@dataclass
class Evaluation:
    """What one pass over a model's alerts did (alert ids, outbox ids, jobs, rollbacks)."""

    model_name: str
    pending: list[int] = field(default_factory=list)
    fired: list[int] = field(default_factory=list)
    resolved: list[int] = field(default_factory=list)
    repeated: list[int] = field(default_factory=list)
    deliveries: list[str] = field(default_factory=list)
    jobs: list[RetrainOutcome] = field(default_factory=list)
    rollbacks: list[RollbackOutcome] = field(default_factory=list)
    notices: list[Notice] = field(default_factory=list)


@dataclass
class Pass:
    """One pass over a model's alerts (an evaluation of its rules, a finished job, an Alertmanager alert):
    its session, settings, model, clock and active silences, and what it did (``evaluation``)."""

    session: Session
    settings: Settings
    model_name: str
    now: datetime
    silences: list[Silence]
    evaluation: Evaluation
    model_version: int | None = None
    window: Mapping[str, Any] | None = None  # the monitor run's window (``log_window.Window.as_dict()``)


def alert_labels(spec: RuleSpec, model_name: str, finding: Finding) -> dict[str, str]:
    """The label set of a rule's alert: alertname, model, severity, the rule's labels, feature/check."""
    return {
        **spec.labels,
        **finding.labels,
        "alertname": spec.name,
        "model": model_name,
        "severity": spec.severity,
    }


def rule_signal(spec: RuleSpec, model_name: str, finding: Finding) -> Signal:
    """The signal of a rule's active finding: its labels, rendered annotations, ``for_runs`` and actions."""
    labels = alert_labels(spec, model_name, finding)
    annotations = rules.render_annotations(spec, model_name, finding)
    return Signal(
        source=AlertSource.RULE,
        fingerprint=fingerprint(labels),
        rule_name=spec.name,
        severity=spec.severity,
        labels=labels,
        annotations=annotations,
        evidence={**finding.evidence, "kind": spec.kind.value},
        summary=annotations.get("summary", spec.name),
        value=finding.value,
        for_runs=spec.for_runs,
        notify="notify" in spec.actions,
        rule=spec,
    )


def record(pass_: Pass, alert: Alert, to_state: str, detail: str, from_state: str | None = None) -> None:
    """One entry of the alert's history, at the pass's time."""
    service.record_event(
        session=pass_.session,
        alert=alert,
        from_state=from_state,
        to_state=to_state,
        detail=detail,
        at=pass_.now,
    )


def apply_silences(pass_: Pass, alert: Alert) -> None:
    """:func:`mark_silenced` with the pass's silences."""
    mark_silenced(session=pass_.session, silences=pass_.silences, alert=alert, now=pass_.now)


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


def retrain(pass_: Pass, alert: Alert, *, trigger: str, key: str, requested_by: str) -> dict[str, Any]:
    """Enqueue a retraining job for the alert's model (in a savepoint: a refusal leaves the rest intact);
    a version driftwarden cannot retrain (served elsewhere, imported without its builder) gets no job: a
    ``retrain.requested`` message goes to the webhooks instead (:class:`RetrainRequest`). The outcome joins
    the pass's ``jobs``; returns its evidence as the alert keeps it."""
    try:
        with pass_.session.begin_nested():
            result = enqueue(
                session=pass_.session,
                model_name=str(alert.model_name),
                trigger=trigger,
                requested_by=requested_by,
                idempotency_key=key,
                alert_id=alert.id,
                cooldown_s=pass_.settings.retrain_cooldown_s,
            )
    except NotRetrainable as exc:
        earlier = _requested_in_pass(pass_, str(alert.model_name))
        if earlier is not None:  # one request per model and pass, as one job would serve both alerts
            reason = f"{exc}; {RETRAIN_REQUESTED} already sent for alert {earlier} in this pass"
            outcome = RetrainOutcome(alert.id, alert.fingerprint, reason=reason)
            detail = f"retrain: no job ({reason})"
        else:
            request = RetrainRequest(alert=alert, version=exc.version, why=exc.why, window=pass_.window)
            sent = deliver(pass_, request, [])
            outcome = RetrainOutcome(
                alert.id, alert.fingerprint, reason=str(exc), requested=sent, model_name=str(alert.model_name)
            )
            detail = f"retrain: no job ({exc}); {RETRAIN_REQUESTED} sent to {sent} webhook(s)"
    except DomainError as exc:
        outcome = RetrainOutcome(alert.id, alert.fingerprint, error=str(exc))
        detail = f"retrain not enqueued: {exc}"
    else:
        outcome = RetrainOutcome(
            alert.id, alert.fingerprint, job_id=result.job_id, created=result.created, reason=result.reason
        )
        if result.created:
            detail = f"retrain: job {result.job_id} enqueued"
        else:
            detail = f"retrain: no new job ({result.reason}" + (
                f"; job {result.job_id})" if result.job_id is not None else ")"
            )
    info = outcome.evidence()
    alert.evidence = {**(alert.evidence or {}), "retrain": info}
    record(pass_, alert, alert.state, detail, from_state=alert.state)
    pass_.evaluation.jobs.append(outcome)
    return info


def _requested_in_pass(pass_: Pass, model_name: str) -> int | None:
    """The alert whose ``retrain.requested`` this pass already sent for the model (None: none yet)."""
    for outcome in pass_.evaluation.jobs:
        if isinstance(outcome, RetrainOutcome) and outcome.model_name == model_name and outcome.requested:
            return outcome.alert_id
    return None


def rollback_if_watched(pass_: Pass, alert: Alert) -> None:
    """Roll back a version promoted by a job less than ``rollback_watch_s`` ago (``auto_rollback``)."""
    settings, session, model_name = pass_.settings, pass_.session, pass_.model_name
    if not settings.auto_rollback:
        return
    serving = serving_version(session=session, model_name=model_name)
    if serving is None or (pass_.model_version is not None and pass_.model_version != serving.version):
        return  # the report was of another version than the one serving now
    entered = [
        e
        for e in history(session=session, model_name=model_name, version=serving.version)
        if e.to_state == VersionState.SERVING
    ]
    if not entered:
        return
    last = entered[-1]
    promoted_at = last.at
    if last.action != EventAction.PROMOTE or not last.actor.startswith("job:"):
        return
    if (pass_.now - promoted_at).total_seconds() > settings.rollback_watch_s:
        return
    watched = RollbackOutcome(alert.id, serving.version, last.actor, promoted_at.isoformat())
    try:
        with session.begin_nested():
            target = rollback(session=session, model_name=model_name, actor=f"alert:{alert.id}")
    except DomainError as exc:
        outcome = replace(watched, error=str(exc))
        detail = f"automatic rollback of version {serving.version} failed: {exc}"
    else:
        outcome = replace(watched, to_version=target.version)
        detail = (
            f"rolled back: version {serving.version} (promoted by {last.actor} at {promoted_at.isoformat()}) "
            f"replaced by version {target.version}"
        )
    alert.evidence = {**(alert.evidence or {}), "rollback": outcome.evidence()}
    record(pass_, alert, alert.state, detail, from_state=alert.state)
    pass_.evaluation.rollbacks.append(outcome)


def act(pass_: Pass, spec: RuleSpec, alert: Alert) -> None:
    """The rule's actions on an alert announced for the first time: rollback (performance), retrain."""
    if spec.kind in PERFORMANCE_KINDS:
        rollback_if_watched(pass_, alert)
    if "retrain" in spec.actions and alert.model_name:
        fired = alert.fired_at or pass_.now
        retrain(
            pass_,
            alert,
            trigger="alert",
            key=f"{alert.fingerprint}:{fired.isoformat()}",
            requested_by=f"alert:{alert.id}",
        )


# --- the lifecycle ------------------------------------------------------------------------------------------


def is_firing(*, firing: bool, active_runs: int, for_runs: int) -> bool:
    """Whether an open alert fires after ``active_runs`` consecutive active evaluations (a new alert: 1)."""
    return firing or active_runs >= for_runs


def open_or_advance(pass_: Pass, alert: Alert | None, signal: Signal) -> Alert:
    """The one entry for an active condition from any source. No open alert: a new one, ``firing`` (or
    ``pending`` while ``signal.for_runs`` > 1). An open one: one more consecutive report, its labels,
    annotations, value and evidence renewed; pending fires after ``for_runs`` reports. Then its silences,
    its announcement by ``signal.cadence`` and, when first announced, the actions of ``signal.rule``."""
    evaluation = pass_.evaluation
    if alert is None:
        fires = is_firing(firing=False, active_runs=1, for_runs=signal.for_runs)  # consecutive starts at 1
        state = AlertState.FIRING if fires else AlertState.PENDING
        alert = service.add_alert(
            session=pass_.session,
            fingerprint=signal.fingerprint,
            model_name=pass_.model_name or None,
            rule_name=signal.rule_name,
            source=signal.source.value,
            state=state.value,
            severity=signal.severity,
            labels=signal.labels,
            annotations=signal.annotations,
            evidence=signal.evidence,
            value=signal.value,
            now=pass_.now,
            started_at=signal.started_at,
        )
        record(pass_, alert, state.value, signal.opened or f"{state.value}: {signal.summary}")
        (evaluation.fired if state is AlertState.FIRING else evaluation.pending).append(alert.id)
    else:
        alert.consecutive += 1
        alert.labels = signal.labels
        alert.annotations = signal.annotations
        alert.value = signal.value
        alert.evidence = keep_actions(alert.evidence, signal.evidence)
        alert.last_evaluated_at = pass_.now
        if signal.advanced is not None:
            record(pass_, alert, alert.state, signal.advanced, from_state=alert.state)
        pending = alert.state == AlertState.PENDING.value
        if pending and is_firing(firing=False, active_runs=alert.consecutive, for_runs=signal.for_runs):
            alert.state = AlertState.FIRING.value
            alert.fired_at = pass_.now
            record(
                pass_,
                alert,
                AlertState.FIRING.value,
                f"firing after {alert.consecutive} consecutive active evaluations: {signal.summary}",
                from_state=AlertState.PENDING.value,
            )
            evaluation.fired.append(alert.id)
    apply_silences(pass_, alert)
    if alert.state != AlertState.FIRING.value or alert.silenced or signal.cadence is Cadence.NEVER:
        return alert
    notified = alert.last_notified_at
    if notified is None or signal.cadence is Cadence.EVERY:
        evaluation.notices.append(Notice(alert, "firing", signal.notify))
        if notified is None and signal.rule is not None:
            act(pass_, signal.rule, alert)
    elif pass_.now - notified >= timedelta(seconds=pass_.settings.alert_repeat_interval_s):
        evaluation.notices.append(Notice(alert, "repeat", signal.notify))
        evaluation.repeated.append(alert.id)
    return alert


def resolve(pass_: Pass, alert: Alert, reason: str, *, notify: bool, at: datetime | None = None) -> None:
    """Resolve an open alert (ended ``at``, else now): a pending one silently, a firing one announced when
    it was announced firing and is not silenced."""
    previous = alert.state
    apply_silences(pass_, alert)
    alert.state = AlertState.RESOLVED.value
    alert.resolved_at = at or pass_.now
    alert.last_evaluated_at = pass_.now
    if previous == AlertState.PENDING.value:
        record(
            pass_, alert, alert.state, f"resolved before firing ({reason}); not notified", from_state=previous
        )
        return
    record(pass_, alert, alert.state, f"resolved: {reason}", from_state=previous)
    pass_.evaluation.resolved.append(alert.id)
    if alert.last_notified_at is not None and not alert.silenced:
        pass_.evaluation.notices.append(Notice(alert, "resolved", notify))


# --- announcing ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class AlertMessage:
    """``alert.firing`` / ``alert.resolved``: the alerts a pass announces, with its evidence (the drift
    report); a subscription gets it when it wants one of them."""

    evidence: dict[str, Any]

    def event_of(self, notice: Notice) -> str:
        """The event a subscription's filter is asked about for one notice."""
        return "alert.resolved" if notice.why == "resolved" else "alert.firing"

    def goes_to(self, filt: WebhookFilter, model_name: str, chosen: list[Notice]) -> bool:
        """Whether a subscription gets the message: when it wants one of the alerts."""
        return bool(chosen)

    def render(
        self, *, settings: Settings, model_name: str, chosen: list[Notice], at: datetime, key: bytes
    ) -> tuple[str, str]:
        """``(event type, body)`` of the message holding ``chosen``."""
        return webhooks.alert_message(
            settings=settings,
            model_name=model_name,
            alerts=[(n.alert, n.why) for n in chosen],
            evidence=self.evidence,
            at=at,
            link_key=key,
        )


@dataclass(frozen=True)
class JobMessage:
    """``job.finished`` / ``job.rejected``: a finished job, with the alerts it raised or resolved that a
    subscription wants; a subscription of the event gets it even without alerts."""

    event_type: Literal["job.finished", "job.rejected"]
    job: dict[str, Any]

    def event_of(self, notice: Notice) -> str:
        """The event a subscription's filter is asked about for one notice."""
        return self.event_type

    def goes_to(self, filt: WebhookFilter, model_name: str, chosen: list[Notice]) -> bool:
        """Whether a subscription gets the message: when it wants the job's event."""
        return filt.wants(model=model_name, event=self.event_type)

    def render(
        self, *, settings: Settings, model_name: str, chosen: list[Notice], at: datetime, key: bytes
    ) -> tuple[str, str]:
        """``(event type, body)`` of the message holding ``chosen``."""
        body = webhooks.job_message(
            settings=settings,
            event_type=self.event_type,
            model_name=model_name,
            job=self.job,
            alerts=[n.alert for n in chosen],
            at=at,
            link_key=key,
        )
        return self.event_type, body


@dataclass(frozen=True)
class RetrainRequest:
    """``retrain.requested``: an alert's ``retrain`` action on a version driftwarden cannot retrain, for the
    team's own pipeline: the model, the version, the alert, why no job started and the window (its time
    range and row counts). A subscription gets it when it wants the event (and the alert's severity)."""

    alert: Alert
    version: int
    why: str
    window: Mapping[str, Any] | None

    def event_of(self, notice: Notice) -> str:
        """The event a subscription's filter is asked about for one notice."""
        return RETRAIN_REQUESTED

    def goes_to(self, filt: WebhookFilter, model_name: str, chosen: list[Notice]) -> bool:
        """Whether a subscription gets the message: when it wants the event of this alert."""
        return filt.wants(model=model_name, event=RETRAIN_REQUESTED, severity=self.alert.severity)

    def render(
        self, *, settings: Settings, model_name: str, chosen: list[Notice], at: datetime, key: bytes
    ) -> tuple[str, str]:
        """``(event type, body)`` of the message."""
        body = webhooks.retrain_message(
            settings=settings,
            model_name=model_name,
            version=self.version,
            alert=self.alert,
            why=self.why,
            window=self.window,
            at=at,
            link_key=key,
        )
        return RETRAIN_REQUESTED, body


Message = AlertMessage | JobMessage | RetrainRequest


def announce(pass_: Pass, message: AlertMessage | JobMessage) -> None:
    """The one fan-out of a pass's notices: one outbox row per enabled subscription the message goes to
    (:func:`deliver`), holding the notices it wants; ``last_notified_at`` is set on the firing ones, each
    notified alert's history counts its messages."""
    notices = pass_.evaluation.notices
    for n in notices:
        if n.why != "resolved":
            n.alert.last_notified_at = pass_.now
    wanted = [n for n in notices if n.notify]
    if not wanted and isinstance(message, AlertMessage):
        return  # no alert to announce: no message
    counts: dict[int, int] = {}
    deliver(pass_, message, wanted, counts)
    for n in wanted:
        k = counts.get(n.alert.id, 0)
        record(pass_, n.alert, n.alert.state, f"notified ({n.why}): {k} webhook message(s)", n.alert.state)


def deliver(pass_: Pass, message: Message, wanted: list[Notice], counts: dict[int, int] | None = None) -> int:
    """One outbox row per enabled subscription ``message`` goes to, holding the ``wanted`` notices its
    filter passes (``counts``: messages per alert id); returns the number of rows."""
    counts = {} if counts is None else counts
    rows = 0
    key: bytes | None = None  # the report links' signing key, read once when a message is made
    for sub in service.list_subscriptions(session=pass_.session, enabled_only=True):
        filt = WebhookFilter.model_validate(sub.filter or {})
        chosen = [
            n
            for n in wanted
            if filt.wants(model=pass_.model_name, event=message.event_of(n), severity=n.alert.severity)
        ]
        if not message.goes_to(filt, pass_.model_name, chosen):
            continue
        if key is None:
            key = link_key(session=pass_.session, settings=pass_.settings)
        event_type, body = message.render(
            settings=pass_.settings, model_name=pass_.model_name, chosen=chosen, at=pass_.now, key=key
        )
        row = service.add_delivery(
            session=pass_.session, webhook_id=sub.id, event_type=event_type, payload=body, now=pass_.now
        )
        pass_.evaluation.deliveries.append(row.id)
        rows += 1
        for n in chosen:
            counts[n.alert.id] = counts.get(n.alert.id, 0) + 1
    return rows
