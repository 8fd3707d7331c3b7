"""The alert lifecycle on SQLite and PostgreSQL: pending -> firing -> resolved, de-duplication, repeats,
grouping per model, silences, history, the outbox in the same transaction, retrain and rollback actions."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import pytest
from sqlalchemy import func, select
from sqlalchemy.exc import IntegrityError

from access.service import link_key
from alerts import flows, service
from alerts.models import Alert, AlertEvent, WebhookDelivery
from alerts.specs import MatcherSpec, SilenceSpec, WebhookFilter, WebhookSpec
from alerts.webhooks import parse_body
from core.auth import link_refusal
from core.database import Database, utcnow
from core.health import CheckResult
from tests.alerts.lifecycledata import T0, alerts, evaluate, put_rules, settings_for
from training.retraining import service as jobs


def subscribe(db: Database, **filter_: Any) -> str:
    with db.session() as s:
        return flows.add_webhook(
            session=s, spec=WebhookSpec(url="http://127.0.0.1:9/hook", filter=WebhookFilter(**filter_))
        ).id


def bodies(db: Database, webhook_id: str | None = None) -> list[dict[str, Any]]:
    with db.session() as s:
        rows = service.list_deliveries(session=s, webhook_id=webhook_id, limit=1000)
        return [parse_body(d.payload) for d in sorted(rows, key=lambda d: (d.created_at, d.id))]


def history(db: Database, alert_id: int) -> list[tuple[str | None, str, str]]:
    with db.session() as s:
        return [
            (e.from_state, e.to_state, e.detail) for e in service.alert_history(session=s, alert_id=alert_id)
        ]


def count(db: Database, table: Any) -> int:
    with db.session() as s:
        return int(s.scalar(select(func.count()).select_from(table)) or 0)


DRIFT_FOR_2 = [{"name": "drift", "kind": "dataset_drift", "for": 2, "severity": "warning"}]


def test_pending_then_firing_then_resolved_with_history(
    db: Database, reports: dict[str, dict[str, Any]]
) -> None:
    settings = settings_for(db)
    put_rules(db, DRIFT_FOR_2)
    hook = subscribe(db)
    shifted, quiet = reports["covariate_shift"], reports["baseline"]

    first = evaluate(db, settings, shifted, T0)
    assert first.pending and not first.fired and not first.deliveries
    (alert,) = alerts(db)
    assert (
        alert.state == "pending"
        and alert.consecutive == 1
        and alert.labels
        == {
            "alertname": "drift",
            "model": "credit",
            "severity": "warning",
        }
    )

    second = evaluate(db, settings, shifted, T0 + timedelta(minutes=5))
    assert second.fired == [alert.id] and len(second.deliveries) == 1
    (alert,) = alerts(db)
    assert alert.state == "firing" and alert.consecutive == 2
    body = bodies(db, hook)[0]
    assert body["type"] == "alert.firing"
    assert [a["id"] for a in body["data"]["alerts"]] == [alert.id]
    assert body["data"]["alerts"][0]["notification"] == "firing"

    third = evaluate(db, settings, shifted, T0 + timedelta(minutes=10))  # still firing: de-duplicated, quiet
    assert not third.fired and not third.deliveries and len(alerts(db)) == 1
    assert alerts(db)[0].consecutive == 3

    fourth = evaluate(db, settings, quiet, T0 + timedelta(minutes=15))
    assert fourth.resolved == [alert.id] and len(fourth.deliveries) == 1
    resolved = bodies(db, hook)[-1]
    assert resolved["type"] == "alert.resolved" and resolved["data"]["alerts"][0]["state"] == "resolved"
    (alert,) = alerts(db)
    assert alert.state == "resolved" and alert.resolved_at == T0 + timedelta(minutes=15)

    steps = [(f, t) for f, t, _ in history(db, alert.id)]
    assert steps == [
        (None, "pending"),
        ("pending", "firing"),
        ("firing", "firing"),  # notified
        ("firing", "resolved"),
        ("resolved", "resolved"),  # notified
    ]
    assert "firing after 2 consecutive" in history(db, alert.id)[1][2]

    again = evaluate(db, settings, shifted, T0 + timedelta(minutes=20))  # a new episode: a new row
    assert again.pending and len(alerts(db)) == 2


def test_a_pending_alert_resolves_silently(db: Database, reports: dict[str, dict[str, Any]]) -> None:
    settings = settings_for(db)
    put_rules(db, [{"name": "drift", "kind": "dataset_drift", "for": 3}])
    subscribe(db)
    evaluate(db, settings, reports["covariate_shift"], T0)
    ev = evaluate(db, settings, reports["baseline"], T0 + timedelta(minutes=1))
    assert not ev.resolved and not ev.deliveries
    (alert,) = alerts(db)
    assert alert.state == "resolved" and alert.fired_at is None
    assert "not notified" in history(db, alert.id)[-1][2]
    assert count(db, WebhookDelivery) == 0


def test_repeat_interval_notifies_a_still_firing_alert_again(
    db: Database, reports: dict[str, dict[str, Any]]
) -> None:
    settings = settings_for(db, alert_repeat_interval_s=3600)
    put_rules(db, [{"name": "drift", "kind": "dataset_drift"}])
    hook = subscribe(db)
    shifted = reports["covariate_shift"]
    assert len(evaluate(db, settings, shifted, T0).deliveries) == 1
    assert not evaluate(db, settings, shifted, T0 + timedelta(minutes=59)).deliveries
    due = evaluate(db, settings, shifted, T0 + timedelta(minutes=61))
    assert due.repeated and len(due.deliveries) == 1
    assert bodies(db, hook)[-1]["data"]["alerts"][0]["notification"] == "repeat"
    assert not evaluate(db, settings, shifted, T0 + timedelta(minutes=62)).deliveries  # the clock restarted
    assert len(alerts(db)) == 1


def test_one_message_per_subscription_groups_the_model_and_filters_apply(
    db: Database, reports: dict[str, dict[str, Any]]
) -> None:
    settings = settings_for(db)  # the default rules: dataset, per-feature and prediction drift fire together
    every = subscribe(db)
    warnings = subscribe(db, severities=["warning", "critical"])
    other_model = subscribe(db, models=["other"])
    resolved_only = subscribe(db, events=["alert.resolved"])
    ev = evaluate(db, settings, reports["covariate_shift"], T0)
    assert len(ev.deliveries) == 2  # every + warnings; other_model and resolved_only get nothing
    (all_body,) = bodies(db, every)
    names = sorted({a["name"] for a in all_body["data"]["alerts"]})
    assert names == ["dataset_drift", "feature_drift", "prediction_drift"]
    features = {a["labels"]["feature"] for a in all_body["data"]["alerts"] if a["name"] == "feature_drift"}
    assert {"age", "income", "credit_score"} <= features
    (warn_body,) = bodies(db, warnings)
    assert {a["severity"] for a in warn_body["data"]["alerts"]} == {"warning"}
    assert bodies(db, other_model) == [] and bodies(db, resolved_only) == []
    data = all_body["data"]
    assert data["model"] == "credit" and data["group_key"] == '{}:{model="credit"}'
    drift = data["evidence"]["drift"]
    assert drift["run_id"] == 7 and drift["dataset"]["drifted"] is True
    age = next(f for f in drift["features"] if f["name"] == "age")
    assert {"statistic", "p_value", "effect", "effect_name"} <= set(age) and age["p_value"] < 0.05
    links = data["links"]
    # the report link is signed (a browser opens it without a token) for report_link_ttl_s after the message
    report = urlsplit(links["report"])
    assert f"{report.scheme}://{report.netloc}{report.path}" == "https://dw.example.com/reports/credit/drift"
    query = {k: v[0] for k, v in parse_qs(report.query).items()}
    assert int(query["expires"]) == int((T0 + timedelta(seconds=settings.report_link_ttl_s)).timestamp())
    with db.session() as s:
        key = link_key(session=s, settings=settings)
    path, expires, signature = report.path, int(query["expires"]), query["signature"]
    assert link_refusal(key=key, path=path, expires=expires, signature=signature, now=T0.timestamp()) is None
    assert "signature" not in links["drift"]  # the API links stay plain: a program sends a token
    assert links["drift"] == "https://dw.example.com/v1/models/credit/drift"
    assert links["retrain"] == {"method": "POST", "url": "https://dw.example.com/v1/models/credit/retrain"}
    assert links["silence"]["url"] == "https://dw.example.com/v1/silences"
    assert links["silence"]["body"]["matchers"] == [
        {"name": "model", "value": "credit", "is_regex": False, "is_equal": True}
    ]
    back = evaluate(db, settings, reports["baseline"], T0 + timedelta(minutes=5))
    assert len(back.deliveries) == 3  # every + warnings + resolved_only
    assert bodies(db, resolved_only)[0]["type"] == "alert.resolved"


def test_silences_mute_notifications_and_expire(db: Database, reports: dict[str, dict[str, Any]]) -> None:
    settings = settings_for(db)
    put_rules(db, [{"name": "drift", "kind": "dataset_drift"}])
    hook = subscribe(db)
    with db.session() as s:
        silence = flows.create_silence(
            session=s,
            spec=SilenceSpec(
                matchers=[
                    MatcherSpec(name="model", value="credit"),
                    MatcherSpec(name="severity", value="warn.*", is_regex=True),
                ],
                duration="2h",
                comment="known shift",
                created_by="ops",
            ),
            now=T0,
        )
    assert silence.active and silence.ends_at == T0 + timedelta(hours=2)
    shifted = reports["covariate_shift"]
    muted = evaluate(db, settings, shifted, T0 + timedelta(minutes=1))
    assert muted.fired and not muted.deliveries and not muted.jobs
    (alert,) = alerts(db)
    assert alert.state == "firing" and alert.silenced and alert.last_notified_at is None
    assert any("silenced by" in d and "known shift" in d for _, _, d in history(db, alert.id))
    assert not evaluate(db, settings, shifted, T0 + timedelta(minutes=30)).deliveries

    after = evaluate(db, settings, shifted, T0 + timedelta(hours=2, minutes=1))  # the silence has ended
    assert len(after.deliveries) == 1 and not alerts(db)[0].silenced
    assert bodies(db, hook)[0]["data"]["alerts"][0]["notification"] == "firing"
    assert history(db, alert.id)[-2][2] == "no longer silenced"


def test_expiring_a_silence_unmarks_open_alerts(db: Database, reports: dict[str, dict[str, Any]]) -> None:
    settings = settings_for(db)
    put_rules(db, [{"name": "drift", "kind": "dataset_drift"}])
    evaluate(db, settings, reports["covariate_shift"], utcnow())
    with db.session() as s:
        silence = flows.create_silence(
            session=s,
            spec=SilenceSpec(matchers=[MatcherSpec(name="alertname", value="drift")], duration="1h"),
        )
    assert silence.active and alerts(db)[0].silenced
    with db.session() as s:
        expired = flows.expire_silence(session=s, silence_id=silence.id)
    assert not expired.active and expired.expired_at is not None and not alerts(db)[0].silenced


def test_state_changes_and_outbox_rows_share_one_transaction(
    db: Database, reports: dict[str, dict[str, Any]]
) -> None:
    settings = settings_for(db)
    subscribe(db)

    class Boom(Exception):
        pass

    with pytest.raises(Boom), db.session() as s:
        ev = flows.evaluate_model(
            session=s, settings=settings, model_name="credit", report=reports["covariate_shift"], now=T0
        )
        assert ev.fired and ev.deliveries  # written in this transaction ...
        raise Boom  # ... and rolled back with it
    assert count(db, Alert) == count(db, AlertEvent) == count(db, WebhookDelivery) == 0
    ev = evaluate(db, settings, reports["covariate_shift"], T0)
    assert count(db, Alert) == len(ev.fired) > 0 and count(db, WebhookDelivery) == 1


def test_one_open_alert_per_fingerprint_is_enforced_by_the_database(db: Database) -> None:
    values: dict[str, Any] = {
        "fingerprint": "f" * 16,
        "model_name": "credit",
        "rule_name": "drift",
        "source": "rule",
        "state": "firing",
        "severity": "warning",
        "labels": {},
        "annotations": {},
        "evidence": {},
        "value": None,
        "now": T0,
    }
    with db.session() as s:
        service.add_alert(session=s, **values)
    with pytest.raises(IntegrityError), db.session() as s:
        service.add_alert(session=s, **values)
    with db.session() as s:
        service.add_alert(session=s, **{**values, "state": "resolved"})  # resolved ones may repeat
    assert count(db, Alert) == 2


def test_removed_rules_resolve_their_alerts_and_unknown_reports_keep_state(
    db: Database, reports: dict[str, dict[str, Any]]
) -> None:
    settings = settings_for(db)
    put_rules(db, [{"name": "drift", "kind": "dataset_drift"}, {"name": "perf", "kind": "performance"}])
    evaluate(db, settings, reports["concept_drift"], T0)
    assert [(a.rule_name, a.state) for a in alerts(db)] == [("perf", "firing")]
    unlabelled = {**reports["baseline"], "performance": None}  # no labels: the perf rule cannot say
    ev = evaluate(db, settings, unlabelled, T0 + timedelta(minutes=1))
    assert not ev.resolved and alerts(db)[0].state == "firing"
    put_rules(db, [{"name": "drift", "kind": "dataset_drift"}])
    ev = evaluate(db, settings, unlabelled, T0 + timedelta(minutes=2))
    assert ev.resolved and alerts(db)[0].state == "resolved"
    assert "its rule was removed or disabled" in history(db, alerts(db)[0].id)[-2][2]


def test_health_rules_fire_after_their_passes(db: Database) -> None:
    settings = settings_for(db)
    hook = subscribe(db)

    def results(ok: bool) -> dict[str, CheckResult]:
        check = CheckResult("model:credit", ok, "answers" if ok else "not loaded", 0.01, None, 0.0)
        disk = CheckResult("disk:registry", True, "plenty", 0.01, 1e9, 0.0)
        return {"model:credit": check, "disk:registry": disk}

    flows.on_health_pass(db=db, settings=settings, results=results(False))
    (alert,) = alerts(db)
    assert alert.rule_name == "model_unhealthy" and alert.state == "pending"  # default: 2 passes
    flows.on_health_pass(db=db, settings=settings, results=results(False))
    assert alerts(db)[0].state == "firing" and alerts(db)[0].severity == "critical"
    assert bodies(db, hook)[0]["data"]["alerts"][0]["annotations"]["summary"].endswith("not loaded")
    flows.on_health_pass(db=db, settings=settings, results=results(True))
    assert alerts(db)[0].state == "resolved" and len(bodies(db, hook)) == 2


def test_firing_findings_for_the_report_headline(db: Database, reports: dict[str, dict[str, Any]]) -> None:
    evaluate(db, settings_for(db), reports["covariate_shift"], T0)
    found = flows.firing_findings(db=db, model_name="credit")
    assert found[0]["severity"] == "warning" and found[-1]["severity"] == "info"  # most severe first
    assert {f["name"] for f in found} == {"dataset_drift", "feature_drift", "prediction_drift"}
    assert all(f["summary"].startswith("credit: ") for f in found)
    assert flows.firing_findings(db=db, model_name="other") == []


# --- actions: retrain and rollback (need the job queue of training/) ----------------------------------------


def test_retrain_action_enqueues_one_job_per_firing(db: Database, reports: dict[str, dict[str, Any]]) -> None:
    settings = settings_for(db, retrain_cooldown_s=0)
    assert reports["concept_drift"]["harm"]["harmful"] is True  # the labels' relation changed: it hurts
    ev = evaluate(db, settings, reports["concept_drift"], T0)  # default harmful_drift: notify + retrain
    (job,) = ev.jobs
    assert job.created and job.job_id is not None
    with db.session() as s:
        row = jobs.get_job(session=s, job_id=job.job_id)
        harm_alert = next(a for a in service.list_alerts(session=s) if a.rule_name == "harmful_drift")
        assert row.trigger == "alert" and row.alert_id == harm_alert.id and row.model_name == "credit"
        assert harm_alert.evidence["retrain"]["job_id"] == row.id
        assert harm_alert.evidence["estimate"] == "realised" and harm_alert.state == "firing"
    again = evaluate(db, settings, reports["concept_drift"], T0 + timedelta(minutes=5))
    assert again.jobs == []  # still the same firing: no second request
    with db.session() as s:
        assert len(jobs.list_jobs(session=s, model_name="credit")) == 1


def test_drift_that_does_not_hurt_notifies_and_starts_no_job(
    db: Database, reports: dict[str, dict[str, Any]]
) -> None:
    settings = settings_for(db, retrain_cooldown_s=0)
    report = reports["covariate_shift"]  # the inputs drifted; the (true) model's ROC AUC did not move
    assert report["dataset"]["drifted"] is True and report["harm"]["harmful"] is False
    ev = evaluate(db, settings, report, T0)
    assert ev.jobs == []
    with db.session() as s:
        firing = {a.rule_name: a for a in service.list_alerts(session=s) if a.state == "firing"}
        assert "dataset_drift" in firing and "harmful_drift" not in firing
        assert "retrain" not in (firing["dataset_drift"].evidence or {})
        assert jobs.list_jobs(session=s, model_name="credit") == []


def test_silenced_alerts_do_not_retrain(db: Database, reports: dict[str, dict[str, Any]]) -> None:
    with db.session() as s:
        flows.create_silence(
            session=s,
            spec=SilenceSpec(matchers=[MatcherSpec(name="model", value="credit")], duration="1h"),
            now=T0,
        )
    ev = evaluate(db, settings_for(db), reports["covariate_shift"], T0 + timedelta(minutes=1))
    assert ev.fired and ev.jobs == []


def _promote_by(db: Database, actor: str, version: int = 2) -> None:
    from registry.service import promote

    with db.session() as s:
        promote(session=s, model_name="credit", version=version, actor=actor)


@pytest.fixture
def two_versions(database_url: str, tmp_path: Path) -> Any:
    from core.database import open_database
    from tests.alerts.conftest import register_model

    database = open_database(database_url, upgrade=True)
    register_model(database, tmp_path, versions=2)
    yield database
    database.dispose()


PERF = [
    {"name": "perf", "kind": "performance", "params": {"margin": 0.05}, "severity": "critical", "actions": []}
]


def test_a_performance_alert_rolls_back_a_version_a_job_promoted(
    two_versions: Database, reports: dict[str, dict[str, Any]]
) -> None:
    from registry.service import history as version_history
    from registry.service import serving_version

    db = two_versions
    put_rules(db, PERF)
    _promote_by(db, "job:41")
    now = utcnow()
    with db.session() as s:
        ev = flows.evaluate_model(
            session=s,
            settings=settings_for(db, rollback_watch_s=3600),
            model_name="credit",
            report=reports["concept_drift"],
            model_version=2,
            now=now,
        )
    (done,) = ev.rollbacks
    assert done.from_version == 2 and done.to_version == 1 and done.promoted_by == "job:41"
    with db.session() as s:
        assert serving_version(session=s, model_name="credit").version == 1  # type: ignore[union-attr]
        last = version_history(session=s, model_name="credit")[-1]
        assert last.action == "rollback" and last.actor == f"alert:{ev.fired[0]}"
    (alert,) = alerts(db)
    assert alert.evidence["rollback"]["to_version"] == 1
    assert any("rolled back" in d for _, _, d in history(db, alert.id))


@pytest.mark.parametrize(
    ("actor", "overrides", "report_version"),
    [
        ("cli", {}, 2),  # promoted by a person: theirs to undo
        ("job:41", {"auto_rollback": False}, 2),
        ("job:41", {"rollback_watch_s": 1}, 2),  # the watch is over (promoted "long" before the alert)
        ("job:41", {}, 1),  # the report was of another version than the one serving now
    ],
)
def test_no_rollback_outside_its_conditions(
    two_versions: Database,
    reports: dict[str, dict[str, Any]],
    actor: str,
    overrides: dict[str, Any],
    report_version: int,
) -> None:
    db = two_versions
    put_rules(db, PERF)
    _promote_by(db, actor)
    with db.session() as s:
        ev = flows.evaluate_model(
            session=s,
            settings=settings_for(db, **overrides),
            model_name="credit",
            report=reports["concept_drift"],
            model_version=report_version,
            now=utcnow() + timedelta(seconds=5),
        )
    assert ev.fired and ev.rollbacks == []
