"""The headline over every finding: never green while a drifted feature, a quality alarm, a metric below the
reference or a firing alert stands."""

from __future__ import annotations

from typing import Any

import numpy as np

from monitors.console import print_report
from monitors.engine import compare
from monitors.findings import Finding, headline, report_findings
from monitors.html import render_html
from monitors.profile import profile_from_dict
from tests.monitors.helpers import true_probability
from training.cluster.datagen import TARGET, Scenario, generate


def _report(profile_dict: dict[str, Any], scenario: Scenario, *, flip: float = 0.0, seed: int = 5) -> Any:
    cur = generate(20_000, scenario=scenario, seed=seed)
    labels = np.asarray(cur[TARGET]).copy()
    if flip:
        rng = np.random.default_rng(seed)
        negative = np.flatnonzero(labels == 0)  # new positives the model scores low: recall falls
        labels[rng.choice(negative, int(len(negative) * flip), replace=False)] = 1
    profile = profile_from_dict(profile_dict)
    return compare(profile=profile, columns=cur, predictions=true_probability(cur), labels=labels)


def test_baseline_has_no_finding_and_a_green_headline(profile_dict: dict[str, Any]) -> None:
    report = _report(profile_dict, Scenario.BASELINE)
    summary = headline(report)
    assert report_findings(report) == []
    assert summary.ok and summary.text.startswith("No findings")
    assert 'class="summary ok"' in render_html(report)


def test_a_new_category_is_never_green_even_when_the_dataset_is_stable(profile_dict: dict[str, Any]) -> None:
    report = _report(profile_dict, Scenario.NEW_CATEGORY)
    found = report_findings(report)
    kinds = {(f.kind, f.subject) for f in found}
    assert ("feature_drift", "loan_purpose") in kinds
    assert ("data_quality", "loan_purpose:unseen_category") in kinds
    summary = headline(report)
    assert not summary.ok and "Attention" in summary.text
    page = render_html(report)
    assert 'class="summary bad"' in page and "unseen category in loan_purpose" in page


def test_realised_metric_below_the_reference_is_a_finding(profile_dict: dict[str, Any]) -> None:
    report = _report(profile_dict, Scenario.BASELINE, flip=0.3)
    perf = [f for f in report_findings(report) if f.kind == "performance"]
    assert "recall" in {f.subject for f in perf}
    recall = next(f for f in perf if f.subject == "recall")
    ref = report.reference_performance["recall"]
    assert f"{ref:.3f}" in recall.message and "below the reference" in recall.message
    assert not headline(report).ok


def test_a_firing_alert_alone_turns_the_headline_red(profile_dict: dict[str, Any], capsys: Any) -> None:
    report = _report(profile_dict, Scenario.BASELINE)
    alert = Finding("alert", "CreditLatency", "alert CreditLatency firing (critical)")
    summary = headline(report, extra=[alert])
    assert not summary.ok and "1 firing alert" in summary.text
    assert "alert CreditLatency firing" in render_html(report, summary=summary)
    print_report(report, summary=summary)
    assert "ATTENTION" in capsys.readouterr().out


def test_a_segment_without_a_measure_prints_no_python_none(profile_dict: dict[str, Any], capsys: Any) -> None:
    report = _report(profile_dict, Scenario.COVARIATE_SHIFT)
    report.segments = [
        {
            "segment": "region=south",
            "rows": 60,
            "share": 0.1,
            "metric": "macro_f1",
            "estimate": None,
            "reference": None,
            "current": None,
            "change": None,
            "flagged": False,
            "drift": {"features": []},
        },
    ]
    print_report(report)
    out = capsys.readouterr().out
    assert "segment region=south: macro_f1 - vs - (-, not measured), 60 rows" in out
    assert "None" not in out
    assert "None" not in render_html(report, title="t")
