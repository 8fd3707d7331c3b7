"""Rules with ``segment``: ``*`` raises one alert per segment whose own change the rule's kind watches, a name
watches that segment; read from the report's segments (monitors/segments.py), the generator's data with an
income shift confined to region=north and labels flipped in region=south. Pure, then the lifecycle on both
backends."""

from __future__ import annotations

import copy
from datetime import timedelta
from typing import Any

import numpy as np
import pytest

from alerts.rules import default_summary, evaluate
from alerts.specs import RuleSpec, parse_rule
from core.database import Database
from core.errors import Invalid
from monitors.config import MonitorConfig
from monitors.profile import Profile
from monitors.segments import segment_table
from tests.alerts.lifecycledata import T0, alerts, put_rules, settings_for
from tests.alerts.lifecycledata import evaluate as evaluate_model
from tests.monitors.segmentdata import SCHEDULED, sample, shifted
from training.cluster.datagen import TARGET, generate


@pytest.fixture(scope="module")
def segments(alert_profile: Profile) -> dict[str, list[dict[str, Any]]]:
    """The segment table of a quiet window and of one with north's income cut and south's labels flipped."""
    from registry.schema import infer_schema

    reference = generate(20_000, seed=201)  # the rows alert_profile was built on
    schema = infer_schema(reference, target=TARGET)
    cols = generate(20_000, seed=31)
    cols = shifted(cols, cols["region"] == "north")
    south = cols["region"] == "south"
    flip = south & (np.random.default_rng(4).random(south.size) < 0.3)
    cols[TARGET] = np.where(flip, 1 - cols[TARGET], cols[TARGET])

    def table(window: dict[str, Any], *, labels: bool = True) -> list[dict[str, Any]]:
        return segment_table(
            reference=sample(reference, schema),
            window=sample(window, schema, labels=labels),
            profile=alert_profile,
            config=MonitorConfig(),
            level=SCHEDULED,
        )

    return {
        "shifted": table(cols),
        "unlabelled": table(cols, labels=False),
        "quiet": table(generate(20_000, seed=32)),
    }


def report(reports: dict[str, dict[str, Any]], rows: list[dict[str, Any]]) -> dict[str, Any]:
    out = copy.deepcopy(reports["baseline"])
    out["segments"] = rows
    return out


def rule(kind: str, **params: Any) -> RuleSpec:
    return parse_rule({"name": "r", "kind": kind, "params": params}, path="rules[0]")


def active(findings: list[Any] | None) -> list[str]:
    assert findings is not None
    return [f.labels["segment"] for f in findings if f.active]


def test_segment_star_raises_one_finding_per_segment(
    reports: dict[str, dict[str, Any]], segments: dict[str, list[dict[str, Any]]]
) -> None:
    shifted_report = report(reports, segments["shifted"])
    drift = evaluate(rule("dataset_drift", segment="*"), shifted_report)
    assert drift is not None and len(drift) == len([s for s in segments["shifted"] if s["judged"]])
    assert active(drift) == ["region=north"]
    north = next(f for f in drift if f.active)
    assert north.evidence["drifted_features"] == ["income"] and north.evidence["share"] > 0.2
    assert north.labels == {"segment": "region=north"} and north.value == 1.0
    assert "segment region=north" in default_summary(rule("dataset_drift", segment="*"), "credit", north)
    assert active(evaluate(rule("performance", segment="*"), shifted_report)) == ["region=south"]
    income = evaluate(rule("feature_drift", feature="income", segment="*"), shifted_report)
    assert active(income) == ["region=north"]
    assert all(f.labels["feature"] == "income" for f in income or [])
    assert active(evaluate(rule("feature_drift", feature="age", segment="*"), shifted_report)) == []
    # the labelled window's segments are judged on labels: an estimated-performance rule has nothing to read
    assert evaluate(rule("estimated_performance", segment="*"), shifted_report) is None
    estimated = evaluate(rule("estimated_performance", segment="*"), report(reports, segments["unlabelled"]))
    assert estimated is not None and active(estimated) == []  # CBPE cannot see flipped labels
    quiet = report(reports, segments["quiet"])
    for kind in ("dataset_drift", "performance", "feature_drift"):
        assert active(evaluate(rule(kind, segment="*"), quiet)) == [], kind


def test_one_named_segment_and_explicit_bounds(
    reports: dict[str, dict[str, Any]], segments: dict[str, list[dict[str, Any]]]
) -> None:
    shifted_report = report(reports, segments["shifted"])
    named = evaluate(rule("dataset_drift", segment="region=north"), shifted_report)
    assert named is not None and [(f.labels, f.active) for f in named] == [
        ({"segment": "region=north"}, True)
    ]
    assert evaluate(rule("dataset_drift", segment="region=mars"), shifted_report) is None  # no such segment
    assert evaluate(rule("dataset_drift", segment="*"), reports["baseline"]) is None  # a report without them
    south = next(s for s in segments["shifted"] if s["segment"] == "region=south")
    drop = -south["change"]
    assert active(evaluate(rule("performance", segment="region=south", margin=drop / 2), shifted_report)) == [
        "region=south"
    ]
    assert (
        active(evaluate(rule("performance", segment="region=south", margin=drop * 2), shifted_report)) == []
    )
    assert (
        evaluate(rule("performance", metric="accuracy", segment="*"), shifted_report) is None
    )  # not measured


@pytest.mark.parametrize(
    ("item", "words"),
    [
        ({"kind": "prediction_drift", "params": {"segment": "*"}}, "rules[0].params.segment: Extra inputs"),
        ({"kind": "dataset_drift", "params": {"segment": ""}}, "rules[0].params.segment: String should have"),
        ({"kind": "dataset_drift", "params": {"segment": 3}}, "rules[0].params.segment: Input should be"),
        ({"kind": "dataset_drift", "labels": {"segment": "x"}}, "label 'segment' is set by the rule itself"),
    ],
)
def test_a_bad_segment_param_is_named(item: dict[str, Any], words: str) -> None:
    with pytest.raises(Invalid) as err:
        parse_rule({"name": "r", **item}, path="rules[0]")
    assert words in str(err.value), str(err.value)


def test_the_stored_form_keeps_the_segment() -> None:
    assert rule("performance", segment="*").params == {
        "metric": "roc_auc",
        "below": None,
        "above": None,
        "margin": None,
        "segment": "*",
    }
    assert "segment" not in rule("dataset_drift").params


def test_one_alert_per_flagged_segment_through_the_lifecycle(
    db: Database, reports: dict[str, dict[str, Any]], segments: dict[str, list[dict[str, Any]]]
) -> None:
    settings = settings_for(db)
    put_rules(
        db,
        [
            {"name": "segment_drift", "kind": "dataset_drift", "params": {"segment": "*"}},
            {"name": "segment_performance", "kind": "performance", "params": {"segment": "*"}},
        ],
    )
    first = evaluate_model(db, settings, report(reports, segments["shifted"]), T0)
    assert len(first.fired) == 2, first
    found = {(a.rule_name, a.labels["segment"], a.state) for a in alerts(db)}
    assert found == {
        ("segment_drift", "region=north", "firing"),
        ("segment_performance", "region=south", "firing"),
    }
    evaluate_model(db, settings, report(reports, segments["quiet"]), T0 + timedelta(minutes=5))
    assert {(a.labels["segment"], a.state) for a in alerts(db)} == {
        ("region=north", "resolved"),
        ("region=south", "resolved"),
    }
