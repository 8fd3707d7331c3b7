"""Alerts and webhook messages carry the top causes of a drift (issue 42, item 5): every report-based rule's
evidence gets the features that explain most of the performance change, with their share and bounds; a
per-feature alert its feature's impact; a harmful-drift alert the harm figure; the message's drift
evidence the harm verdict and the causes. Against a real receiver, on SQLite and PostgreSQL."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import SecretStr

from alerts import flows, rules
from alerts.causes import with_causes
from alerts.rules import DEFAULT_RULES
from alerts.sender import send_due
from alerts.specs import WebhookSpec
from alerts.webhooks import drift_evidence, new_secret, parse_body
from core.config import Settings
from core.database import Database, utcnow
from tests.alerts.receiver import Receiver
from tests.monitors.explained import CAUSE, HARMLESS, SECOND, explain

DEFAULTS = {r.name: r for r in DEFAULT_RULES}


def _findings(name: str, report: dict[str, Any], kind: str | None = None) -> list[rules.Finding]:
    spec = DEFAULTS[name]
    found = with_causes(kind or str(spec.kind), report, rules.evaluate(spec, report))
    assert found is not None
    return found


def test_report_based_evidence_carries_the_top_causes(reports: dict[str, dict[str, Any]]) -> None:
    report = explain(reports["covariate_shift"])
    (dataset,) = _findings("dataset_drift", report)
    causes = dataset.evidence["causes"]
    assert [c["feature"] for c in causes] == [CAUSE, SECOND]  # by impact; the harmless one is no cause
    assert causes[0]["impact"] == 0.8 and causes[0]["impact_lower"] == pytest.approx(0.7)
    assert (causes[0]["lower"], causes[0]["upper"], causes[0]["estimate"]) == (-0.045, -0.035, "cbpe")
    assert "harm" not in dataset.evidence  # the harm figure is a harmful_drift alert's
    per_feature = {f.labels["feature"]: f for f in _findings("feature_drift", report)}
    assert per_feature[HARMLESS].evidence["impact"]["harmless"] is True
    assert "explains none" in per_feature[HARMLESS].evidence["impact"]["message"]
    assert per_feature[CAUSE].evidence["impact"]["impact"] == 0.8
    assert "impact" not in per_feature["region"].evidence  # not attributed
    (harmful,) = _findings("dataset_drift", report, kind="harmful_drift")
    assert harmful.evidence["harm"]["harmful"] is True and harmful.evidence["harm"]["estimate"] == "cbpe"
    assert harmful.evidence["harm"]["lower"] == 0.79 and "beyond the" in harmful.evidence["harm"]["message"]


def test_a_report_without_an_attribution_keeps_its_evidence(reports: dict[str, dict[str, Any]]) -> None:
    report = reports["covariate_shift"]
    for name in ("dataset_drift", "feature_drift", "prediction_drift", "performance_drop"):
        spec = DEFAULTS[name]
        assert with_causes(str(spec.kind), report, rules.evaluate(spec, report)) == rules.evaluate(
            spec, report
        )
    assert with_causes("dataset_drift", report, None) is None
    evidence = drift_evidence(report, run_id=1, model_version=1)
    assert {"causes", "segments"} & set(evidence) == set()
    assert evidence["harm"]["harmful"] is report["harm"]["harmful"]  # every run judges harm


def test_the_annotations_name_the_causes(reports: dict[str, dict[str, Any]]) -> None:
    report = explain(reports["covariate_shift"])
    (finding,) = _findings("dataset_drift", report)
    spec = DEFAULTS["dataset_drift"].model_copy(update={"annotations": {"description": "why: {causes}"}})
    notes = rules.render_annotations(spec, "credit", finding)
    line = "credit_score 80% [70%, 90%] of the estimated (CBPE) roc_auc change; income 20% [10%, 30%]"
    assert notes["causes"].startswith(line) and notes["description"] == f"why: {notes['causes']}"
    plain = rules.render_annotations(DEFAULTS["dataset_drift"], "credit", rules.evaluate(spec, report)[0])  # type: ignore[index]
    assert "causes" not in plain
    hostile = explain(reports["covariate_shift"], names={CAUSE: "{x:>999999999}" * 400})  # never a template
    (found,) = _findings("dataset_drift", hostile)
    cut = rules.render_annotations(DEFAULTS["dataset_drift"], "credit", found)["causes"]
    assert cut.startswith("{x:>999999999}{x:>999999999}") and len(cut) == rules.MAX_RENDERED


def test_a_webhook_body_carries_the_impact_ranking(db: Database, reports: dict[str, dict[str, Any]]) -> None:
    secret = new_secret()
    settings = Settings(
        database_url=SecretStr(db.url), public_url="https://dw.example.com", retrain_cooldown_s=0
    )
    report = explain(reports["covariate_shift"])
    with Receiver(secret) as receiver:
        with db.session() as s:
            flows.add_webhook(session=s, spec=WebhookSpec(url=receiver.url, secret=secret))
        with db.session() as s:
            ev = flows.evaluate_model(
                session=s, settings=settings, model_name="credit", report=report, run_id=9, model_version=1
            )
        assert ev.fired
        assert send_due(db=db, settings=settings, now=utcnow()) == 1
    (request,) = receiver.accepted
    assert request.signature_ok
    body = parse_body(request.body)
    assert body["type"] == "alert.firing"
    drift = body["data"]["evidence"]["drift"]
    assert [c["feature"] for c in drift["causes"]] == [CAUSE, SECOND]
    assert drift["causes"][0]["impact"] == 0.8 and drift["causes"][0]["impact_upper"] == pytest.approx(0.9)
    assert drift["harm"]["harmful"] is True and drift["harm"]["metric"] == "roc_auc"
    assert drift["segments"] == ["region=north"]
    by_name = {a["name"]: a for a in body["data"]["alerts"]}
    dataset = by_name["dataset_drift"]
    assert [c["feature"] for c in dataset["evidence"]["causes"]] == [CAUSE, SECOND]
    assert dataset["annotations"]["causes"].startswith("credit_score 80% [70%, 90%]")
    features = [a for a in body["data"]["alerts"] if a["name"] == "feature_drift"]
    impacts = {a["labels"]["feature"]: a["evidence"].get("impact") for a in features}
    assert impacts[CAUSE]["impact"] == 0.8 and impacts[HARMLESS]["harmless"] is True
