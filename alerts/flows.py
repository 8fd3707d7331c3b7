"""Alert workflows: evaluate a model's rules, move its alerts through their lifecycle, notify, act.

An evaluation runs after every monitor run (``monitor.run``: the drift, performance and quality rules) and
every health pass (``health.pass``: the health rules), never by polling. For each rule and each label set:

- active: a new alert is ``pending`` (``firing`` at once when ``for_runs`` is 1); a pending alert fires
  after ``for_runs`` consecutive active evaluations; a firing one stays firing (one row per fingerprint);
- inactive: a pending alert resolves silently, a firing one resolves with a notification;
- a silence (matchers on the labels) mutes notifications and actions of the alerts it matches while it
  is active; the alert keeps its state and is marked ``silenced``.

One evaluation of a model writes at most one alert message per subscription, holding every alert of
the model that started firing, resolved, or is due for a repeat (``alert_repeat_interval_s``). Actions run
when an alert is first announced: ``retrain`` enqueues a retraining job
(``training.retraining.service.enqueue``), or, for a version driftwarden cannot retrain (served elsewhere,
imported without its builder), writes a ``retrain.requested`` message for the team's own pipeline instead;
a firing performance alert of a version promoted by a job within ``rollback_watch_s`` rolls it back
(``auto_rollback``). Every change, its history rows and its outbox rows are written in the caller's
transaction: all or nothing.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from sqlalchemy.orm import Session

from alerts import rules, service, webhooks
from alerts.alertmanager import (
    AlertmanagerAlert,
    AlertmanagerPayload,
    Ignored,
    Receipt,
    Received,
    RetrainRequested,
)
from alerts.causes import with_causes
from alerts.config import load_rules_file
from alerts.job_outcomes import job_finished
from alerts.labels import fingerprint
from alerts.lifecycle import (
    AlertMessage,
    Cadence,
    Evaluation,
    Pass,
    Signal,
    alert_labels,
    announce,
    mark_silenced,
    open_or_advance,
    resolve,
    retrain,
    rule_signal,
)
from alerts.models import (
    AlertDetail,
    AlertEventRead,
    AlertRead,
    AlertSource,
    AlertState,
    Silence,
    SilenceRead,
    WebhookCreated,
)
from alerts.specs import (
    HEALTH_KINDS,
    MONITOR_KINDS,
    RuleSpec,
    SilenceSpec,
    WebhookSpec,
    check_silence,
    parse_rules,
)
from core.config import Settings, mask_url
from core.database import Database, utcnow
from core.errors import Invalid
from core.events import HEALTH_PASS, JOB_FINISHED, MONITOR_RUN, subscribe
from registry.names import InvalidName, check_name
from registry.service import count_versions, latest_version, read_schema, require_model, serving_version
from training.retraining.service import get_job

if TYPE_CHECKING:
    from core.health import CheckResult
    from monitors.flows import Outcome

log = logging.getLogger("driftwarden.alerts")


def evaluate_model(
    *,
    session: Session,
    settings: Settings,
    model_name: str,
    report: Mapping[str, Any] | None = None,
    health: Mapping[str, CheckResult] | None = None,
    run_id: int | None = None,
    model_version: int | None = None,
    window: Mapping[str, Any] | None = None,
    now: datetime | None = None,
) -> Evaluation:
    """Evaluate the model's rules on a report (``DriftReport.as_dict()``) and/or health results, in the
    session's transaction (every change and its outbox rows commit together); ``window`` (the run's
    ``Window.as_dict()``) goes into a ``retrain.requested`` message."""
    now = now or utcnow()
    service.write_lock(session=session, key=f"model:{model_name}")
    ruleset = service.effective_rules(session=session, model_name=model_name)
    enabled = {r.name: r for r in ruleset.rules if r.enabled}
    kinds = (MONITOR_KINDS if report is not None else frozenset()) | (
        HEALTH_KINDS if health is not None else frozenset()
    )
    pass_ = Pass(
        session=session,
        settings=settings,
        model_name=model_name,
        now=now,
        silences=service.active_silences(session=session, now=now),
        evaluation=Evaluation(model_name),
        model_version=model_version,
        window=window,
    )
    opened = {
        a.fingerprint: a
        for a in service.open_alerts(session=session, model_name=model_name, source=AlertSource.RULE.value)
    }
    active: set[str] = set()
    evaluated: set[str] = set()
    for spec in enabled.values():
        if spec.kind not in kinds:
            continue
        if spec.kind in HEALTH_KINDS:
            findings = rules.evaluate_health(spec, health or {}, model_name)
        else:
            findings = with_causes(str(spec.kind), report or {}, rules.evaluate(spec, report or {}))
        if findings is None:
            continue  # the report cannot say: the rule's alerts keep their state
        evaluated.add(spec.name)
        for finding in findings:
            fp = fingerprint(alert_labels(spec, model_name, finding))
            if finding.active:
                active.add(fp)
                opened[fp] = open_or_advance(pass_, opened.get(fp), rule_signal(spec, model_name, finding))
            elif fp in opened and opened[fp].state != AlertState.RESOLVED.value:
                resolve(pass_, opened[fp], "no longer active", notify="notify" in spec.actions)
    for fp, alert in opened.items():
        if alert.state == AlertState.RESOLVED.value or fp in active:
            continue
        if alert.rule_name not in enabled:
            resolve(pass_, alert, "its rule was removed or disabled", notify=True)
        elif alert.rule_name in evaluated:
            resolve(pass_, alert, "no longer active", notify="notify" in enabled[alert.rule_name].actions)
    evidence = {}
    if report is not None:
        evidence["drift"] = webhooks.drift_evidence(report, run_id=run_id, model_version=model_version)
    announce(pass_, AlertMessage(evidence))
    session.flush()
    return pass_.evaluation


# --- event handlers -----------------------------------------------------------------------------------------


def on_monitor_run(*, db: Database, settings: Settings, outcome: Outcome, **_: Any) -> None:
    """``monitor.run``: evaluate the model's monitor rules on the run's report."""
    with db.session() as session:
        evaluate_model(
            session=session,
            settings=settings,
            model_name=outcome.model_name,
            report=outcome.report.as_dict(),
            run_id=outcome.run_id,
            model_version=outcome.model_version,
            window=outcome.window.as_dict() if outcome.window is not None else None,
        )


def on_health_pass(*, db: Database, settings: Settings, results: Mapping[str, CheckResult], **_: Any) -> None:
    """``health.pass``: evaluate the health rules of every model with a check or with rules of its own."""
    names = {n.removeprefix("model:") for n in results if n.startswith("model:")}
    with db.session() as session:
        names |= {m for m in service.rule_models(session=session) if m != service.WILDCARD}
        names = {
            name
            for name in names
            if any(
                r.enabled and r.kind in HEALTH_KINDS and rules.health_check_name(r, name) in results
                for r in service.effective_rules(session=session, model_name=name).rules
            )
        }  # only models with a health rule this pass can evaluate: no write transaction for the others
    for name in sorted(names):
        try:
            with db.session() as session:
                evaluate_model(session=session, settings=settings, model_name=name, health=results)
        except Exception:  # one model's failure must not stop the others
            log.exception("health alert rules of %s failed", name)


def on_job_finished(*, db: Database, settings: Settings, job_id: int, **_: Any) -> None:
    """``job.finished``: announce the job; a rejected candidate raises the gate's alerts."""
    with db.session() as session:
        job = get_job(session=session, job_id=job_id)
        job_finished(session=session, settings=settings, job=job)


def install() -> None:
    """Subscribe the three handlers (idempotent: installing twice subscribes once)."""
    subscribe(MONITOR_RUN, on_monitor_run)
    subscribe(HEALTH_PASS, on_health_pass)
    subscribe(JOB_FINISHED, on_job_finished)


# --- Alertmanager -------------------------------------------------------------------------------------------


def _model_of(session: Session, labels: Mapping[str, str], cache: dict[str, bool]) -> tuple[str | None, bool]:
    """The alert's ``model`` label when it is a valid name, and whether the registry knows it."""
    name = labels.get("model")
    if not name:
        return None, False
    try:
        check_name(name)
    except InvalidName:
        return None, False
    if name not in cache:
        cache[name] = count_versions(session=session, model_name=name) > 0
    return name, cache[name]


def _alertmanager_signal(item: AlertmanagerAlert, fp: str, payload: AlertmanagerPayload) -> Signal:
    """The signal of one alert of a notification: firing at once, never announced by driftwarden."""
    labels = dict(item.labels)
    alertname = labels.get("alertname", "alertmanager")[:128]
    return Signal(
        source=AlertSource.ALERTMANAGER,
        fingerprint=fp,
        rule_name=alertname,
        severity=labels.get("severity", "none")[:16],
        labels=labels,
        annotations=dict(item.annotations),
        evidence={
            "receiver": payload.receiver,
            "group_key": payload.groupKey,
            "generator_url": mask_url(item.generatorURL),  # evidence is shown: no credential of a URL
            "external_url": mask_url(payload.externalURL),
        },
        summary=item.annotations.get("summary", alertname),
        started_at=item.startsAt.astimezone(UTC),
        cadence=Cadence.NEVER,
        opened=f"firing in Alertmanager (receiver {payload.receiver!r})",
    )


def receive_alertmanager(
    *, session: Session, settings: Settings, payload: AlertmanagerPayload, now: datetime | None = None
) -> Receipt:
    """Record each alert of a notification (source ``alertmanager``) and run its actions: label
    ``action="retrain"`` or annotation ``retrain: "true"`` enqueues a retraining job (once per firing)."""
    now = now or utcnow()
    service.write_lock(session=session, key="alertmanager")
    silences = service.active_silences(session=session, now=now)
    known: dict[str, bool] = {}
    receipt = Receipt(received=len(payload.alerts))
    prints = [item.fingerprint or fingerprint(dict(item.labels)) for item in payload.alerts]
    # every open alert of the notification in one query (not one query and one flush per alert)
    open_by_fp = service.open_alerts_of(session=session, fingerprints=prints)
    for item, fp in zip(payload.alerts, prints, strict=True):
        model_name, model_known = _model_of(session, item.labels, known)
        signal = _alertmanager_signal(item, fp, payload)
        alertname, started = signal.rule_name, item.startsAt.astimezone(UTC)
        pass_ = Pass(session, settings, model_name or "", now, silences, Evaluation(model_name or ""))
        ends = item.ends()
        ended = ends.astimezone(UTC) if ends is not None else now
        alert = open_by_fp.get(fp)
        outcome: Literal["recorded", "updated", "resolved", "duplicate"]
        if item.status == "firing":
            outcome = "recorded" if alert is None else "updated"
            alert = open_or_advance(pass_, alert, signal)
            open_by_fp[fp] = alert
        elif alert is not None:
            resolve(pass_, alert, f"ended in Alertmanager at {ended.isoformat()}", notify=False, at=ended)
            del open_by_fp[fp]
            outcome = "resolved"
        elif service.find_alert(session=session, fingerprint=fp, started_at=started) is not None:
            outcome = "duplicate"
        else:  # first heard of once it had resolved: its whole life at once
            alert = open_or_advance(
                pass_, None, replace(signal, opened=f"{signal.opened}, received resolved")
            )
            resolve(pass_, alert, f"ended in Alertmanager at {ended.isoformat()}", notify=False, at=ended)
            outcome = "recorded"
        receipt.alerts.append(
            Received(
                fingerprint=fp,
                alertname=alertname,
                model=item.labels.get("model"),
                status=item.status,
                id=alert.id if alert is not None else None,
                outcome=outcome,
                actionable=model_known,
            )
        )
        if item.labels.get("model") and not model_known:
            reason = f"model {item.labels.get('model')!r} is not in the registry: not actionable"
            receipt.ignored.append(Ignored(fp, alertname, reason))
            continue
        wants_retrain = (
            item.labels.get("action") == "retrain"
            or item.annotations.get("retrain", "").strip().lower() == "true"
        )
        if item.status != "firing" or not wants_retrain or alert is None:
            continue
        if not model_name:
            receipt.ignored.append(Ignored(fp, alertname, "no 'model' label: cannot retrain"))
        elif alert.silenced:
            receipt.ignored.append(Ignored(fp, alertname, "silenced: retrain muted"))
        else:
            retrain(
                pass_,
                alert,
                trigger="alertmanager",
                key=f"{fp}:{started.isoformat()}",
                requested_by=f"alertmanager:{payload.receiver or 'webhook'}",
            )
            receipt.jobs.extend(RetrainRequested(alertname, r) for r in pass_.evaluation.jobs)
    session.flush()
    return receipt


# --- rules --------------------------------------------------------------------------------------------------


def rules_document(*, session: Session, model_name: str) -> dict[str, Any]:
    """The rules a model follows (its own, the ``*`` ones or the defaults), each marked with its source."""
    require_model(session=session, model_name=model_name)
    ruleset = service.effective_rules(session=session, model_name=model_name)
    return {
        "model": model_name,
        "origin": ruleset.origin,
        "source": ruleset.source,
        "rules": [{**r.as_dict(), "source": ruleset.source} for r in ruleset.rules],
    }


def check_rule_features(*, session: Session, model_name: str, specs: list[RuleSpec], where: str) -> None:
    """Every rule that names one feature names a feature of the model (its serving, else newest, version)."""
    row = serving_version(session=session, model_name=model_name) or latest_version(
        session=session, model_name=model_name
    )
    if row is None:
        return
    try:
        features = read_schema(path=Path(row.path)).feature_names
    except (OSError, ValueError, KeyError) as exc:  # the version's files are gone: nothing to check against
        log.warning("rules of %s: version %s has no readable contract (%s)", model_name, row.version, exc)
        return
    for i, spec in enumerate(specs):
        feature = spec.params.get("feature")
        if isinstance(feature, str) and feature != "*" and feature not in features:
            raise Invalid(
                f"{where}[{i}].params.feature: {feature!r} is not a feature of model {model_name!r} "
                f"(version {row.version} has {', '.join(features)}; '*' is every feature) "
                f"(rule {spec.name!r})"
            )


def put_model_rules(
    *, session: Session, model_name: str, rules_in: Any, source: str = "api"
) -> dict[str, Any]:
    """Replace a model's rules with a validated list (``[]``: back to the defaults)."""
    require_model(session=session, model_name=model_name)
    specs = parse_rules(rules_in, path="rules")
    check_rule_features(session=session, model_name=model_name, specs=specs, where="rules")
    service.replace_rules(session=session, model_name=model_name, rules=specs, source=source)
    return rules_document(session=session, model_name=model_name)


def check_rule_sets(*, session: Session, rule_sets: Mapping[str, list[RuleSpec]], where: str) -> None:
    """Each model a rules file names exists, and its rules name only its features."""
    for name, specs in rule_sets.items():
        if name == service.WILDCARD:
            continue
        if count_versions(session=session, model_name=name) == 0:
            raise Invalid(
                f"{where}: models.{name}: no model {name!r} in the registry (`driftwarden models list` shows "
                "them; use '*' for rules of every model)"
            )
        try:
            check_rule_features(session=session, model_name=name, specs=specs, where=f"models.{name}")
        except Invalid as exc:
            raise Invalid(f"{where}: {exc}") from None


def store_rule_sets(
    *, session: Session, rule_sets: Mapping[str, list[RuleSpec]], source: str, where: str
) -> int:
    """Store the rules of each model of a rules file (every model checked first); how many rules."""
    check_rule_sets(session=session, rule_sets=rule_sets, where=where)
    for name, specs in rule_sets.items():
        service.replace_rules(session=session, model_name=name, rules=specs, source=source)
    return sum(len(s) for s in rule_sets.values())


def apply_rules_file(*, db: Database, path: Path, check_only: bool = False) -> dict[str, int]:
    """Validate a rules file and (unless ``check_only``) store it; the number of rules per model."""
    rule_sets = load_rules_file(path)
    with db.session() as session:
        if check_only:
            check_rule_sets(session=session, rule_sets=rule_sets, where=str(path))
        else:
            store_rule_sets(session=session, rule_sets=rule_sets, source="file", where=str(path))
    return {name: len(specs) for name, specs in rule_sets.items()}


def seed_rules(*, db: Database, settings: Settings) -> int:
    """Store the rules of ``alert_rules_file`` at start (unset: nothing, the defaults apply)."""
    if settings.alert_rules_file is None:
        return 0
    counts = apply_rules_file(db=db, path=settings.alert_rules_file)
    log.info("alert rules seeded from %s: %s", settings.alert_rules_file, counts)
    return sum(counts.values())


# --- reading alerts -----------------------------------------------------------------------------------------


def alert_detail(*, session: Session, alert_id: int) -> AlertDetail:
    """An alert with its history."""
    alert = service.get_alert(session=session, alert_id=alert_id)
    history = [
        AlertEventRead.model_validate(e) for e in service.alert_history(session=session, alert_id=alert_id)
    ]
    return AlertDetail(**AlertRead.model_validate(alert).model_dump(), history=history)


def firing_findings(*, db: Database, model_name: str) -> list[dict[str, Any]]:
    """The firing alerts of a model, most severe first (the drift report's headline)."""
    with db.session() as session:
        return [
            {
                "id": a.id,
                "name": a.rule_name,
                "source": a.source,
                "severity": a.severity,
                "summary": (a.annotations or {}).get("summary", a.rule_name),
                "labels": dict(a.labels or {}),
                "value": a.value,
                "fired_at": (a.fired_at or a.started_at or utcnow()).isoformat(),
                "silenced": a.silenced,
            }
            for a in service.firing_alerts(session=session, model_name=model_name)
        ]


# --- silences and webhooks ----------------------------------------------------------------------------------


def silence_read(silence: Silence, *, now: datetime | None = None) -> SilenceRead:
    """A silence as shown, with whether it is active now."""
    read = SilenceRead.model_validate(silence)
    read.active = service.is_active(silence, now or utcnow())
    return read


def _resilence_open(session: Session, now: datetime) -> None:
    """Re-mark every open alert's ``silenced`` flag after the silences changed."""
    silences = service.active_silences(session=session, now=now)
    for alert in service.open_alerts(session=session):
        mark_silenced(session=session, silences=silences, alert=alert, now=now)


def create_silence(*, session: Session, spec: SilenceSpec, now: datetime | None = None) -> SilenceRead:
    """Store a silence and mark the open alerts it matches."""
    now = now or utcnow()
    matchers, starts, ends = check_silence(spec, now=now)
    row = service.add_silence(
        session=session,
        matchers=matchers,
        starts_at=starts,
        ends_at=ends,
        created_by=spec.created_by,
        comment=spec.comment,
        now=now,
    )
    _resilence_open(session, now)
    return silence_read(row, now=now)


def expire_silence(*, session: Session, silence_id: str, now: datetime | None = None) -> SilenceRead:
    """End a silence now and unmark the open alerts only it muted."""
    now = now or utcnow()
    row = service.expire_silence(session=session, silence_id=silence_id, now=now)
    _resilence_open(session, now)
    return silence_read(row, now=now)


def add_webhook(*, session: Session, spec: WebhookSpec, now: datetime | None = None) -> WebhookCreated:
    """Store a subscription (a secret is generated when none is given); the answer shows the secret once."""
    row = service.add_subscription(
        session=session,
        url=spec.url,
        secret=webhooks.normalize_secret(spec.secret),
        filter=spec.filter.model_dump(mode="json"),
        description=spec.description,
        enabled=spec.enabled,
        now=now or utcnow(),
    )
    return WebhookCreated.model_validate(row)
