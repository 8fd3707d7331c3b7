"""Issue 43, item 2: the HTML report of one run, read at a glance: the verdict in words, findings counted
once, the level each test ran at explained, one threshold per statistic, class names, times in a human form
(no ISO timestamp), no Python repr, no number with more than 4 significant digits, a summary of every
feature and output with a sparkline of its effect over the last runs."""

from __future__ import annotations

import copy
import html
import json
import re
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from monitors.engine import compare
from monitors.findings import Finding, headline
from monitors.history import build_history, run_point
from monitors.horizon import run_alpha
from monitors.html import RunInfo, render_html
from monitors.profile import profile_from_dict
from monitors.report import report_from_dict
from tests.monitors.explained import explain
from tests.monitors.helpers import true_probability
from tests.monitors.reporttext import NUMBER, REPR, _significant, _text
from training.cluster.datagen import TARGET, generate

CREATED = datetime(2026, 12, 4, 17, 37, 32, 359707, tzinfo=UTC)
START, END = (
    datetime(2026, 12, 4, 16, 37, 30, 766946, tzinfo=UTC),
    datetime(2026, 12, 4, 17, 37, 30, tzinfo=UTC),
)
ISO = re.compile(r"\d{4}-\d\d-\d\d[T ]\d\d:\d\d")


@pytest.fixture(scope="module")
def stored(profile_dict: dict[str, Any]) -> dict[str, Any]:
    """A covariate shift as a scheduled run every 5 minutes stores it (explained: harm, attribution,
    segments, weak slices), tested at the level of the default budget."""
    cur = generate(8_000, scenario="covariate_shift", seed=42)
    report = compare(
        profile=profile_from_dict(profile_dict),
        columns=cur,
        predictions=true_probability(cur),
        labels=cur[TARGET],
    )
    data = json.loads(json.dumps(explain(report.as_dict())))
    data["dataset"]["alpha"] = run_alpha(alpha=0.05, budget=0.5, every_s=300.0)
    return data


def _history(data: dict[str, Any], runs: int = 6) -> Any:
    """``runs`` stored runs an hour apart, the last one ``data``, the earlier ones with smaller effects;
    the first two backfilled."""
    points = []
    for k in range(runs):
        doc = copy.deepcopy(data)
        for f in doc["features"]:
            f["result"]["effect"] = f["result"]["effect"] * (k + 1) / runs
        doc["window"] = {"rows_by_source": {"serve": 500 + k, "ingest": 100 * k}}
        doc["backfill"] = k < 2
        end = END - timedelta(hours=runs - 1 - k)
        points.append(
            run_point(
                run_id=k + 1,
                created_at=end,
                window_start=end - timedelta(hours=1),
                window_end=end,
                report=doc,
            )
        )
    return build_history(points)


def _page(data: dict[str, Any], **kw: Any) -> str:
    run = RunInfo(
        model_name="credit",
        model_version=3,
        run_id=6,
        created_at=CREATED,
        window_start=START,
        window_end=END,
        budget=0.5,
        alpha=0.05,
    )
    options: dict[str, Any] = {
        "title": "Drift report: credit v3",
        "run": run,
        "now": CREATED + timedelta(hours=3),
    }
    return render_html(report_from_dict(data), **(options | kw))


def test_times_read_as_people_read_them_and_no_iso_timestamp(stored: dict[str, Any]) -> None:
    alert = Finding(
        "alert", "CreditDrift", "alert CreditDrift firing (warning) since 2026-12-04T15:02:11.5+00:00: x"
    )
    report = report_from_dict(stored)
    page = _page(stored, history=_history(stored), summary=headline(report, extra=[alert]))
    text = _text(page)
    assert "evaluated 4 Dec 2026 17:37 UTC (3 h ago)" in text
    assert "window 4 Dec 2026 16:37\u201317:37 UTC (1 h)" in text
    assert "since 4 Dec 2026 15:02 UTC" in text  # an alert's time too
    assert ISO.search(page) is None, ISO.search(page)


def test_no_python_repr_and_no_number_beyond_four_significant_digits(stored: dict[str, Any]) -> None:
    data = copy.deepcopy(stored)
    data["segments"][-1] |= {"estimate": None, "current": None, "change": None}  # a segment without a figure
    text = _text(_page(data, history=_history(data)))
    assert REPR.search(text) is None, text[max(0, REPR.search(text).start() - 80) :][:160]  # type: ignore[union-attr]
    long = [t for t in NUMBER.findall(text) if _significant(t) > 4]
    assert not long, long[:20]
    assert "8.3e-6" in text and "40,000 reference rows" in text


def test_the_level_is_explained_in_words(stored: dict[str, Any], profile_dict: dict[str, Any]) -> None:
    text = _text(_page(stored))
    assert (
        "each test at 8.3e-6: a false-alarm budget of 0.5 per 30 days over 8,640 runs (one every 5 min)"
        in text
    )
    assert "adjusted across features by Benjamini\u2013Hochberg" in text
    daily = copy.deepcopy(stored)  # a backfilled run of a daily window: its every_s is the window's length
    daily["dataset"]["alpha"] = run_alpha(alpha=0.05, budget=0.5, every_s=86_400.0)
    assert "each test at 0.002381: a false-alarm budget of 0.5 per 30 days over 30 runs (one every 1 d)" in (
        _text(_page(daily))
    )
    capped = copy.deepcopy(stored)  # a model whose alpha is below its budget's share
    capped["dataset"]["alpha"] = 0.05
    assert "each test at 0.05, the model's alpha" in _text(_page(capped))
    cur = generate(2_000, seed=7)
    offline = compare(profile=profile_from_dict(profile_dict), columns=cur, predictions=true_probability(cur))
    said = _text(render_html(offline, title="Drift report: current.csv"))  # Part 1's call: report and title
    assert "each test at 0.05, the level of a one-off comparison" in said


def test_the_verdict_comes_first_in_words_and_findings_are_counted_once(stored: dict[str, Any]) -> None:
    report = report_from_dict(stored)
    drifted = [f.name for f in report.features if f.drifted]
    restated = [
        Finding("alert", "feature_drift", f"alert feature_drift firing (info): {name} drifted")
        for name in drifted
    ]
    summary = headline(report, extra=restated)
    own = [f for f in summary.findings if f.kind != "alert"]
    assert summary.text.startswith(f"Attention, {len(own)} findings: {len(drifted)} drifted features")
    assert summary.text.endswith(f"; {len(drifted)} firing alerts.")
    text = _text(_page(stored, summary=summary))
    top = text[: text.index("Summary")]
    d = report.dataset
    assert f"{d.n_drifted} of {d.n_features} features drifted \u2014 the dataset drifted" in top
    assert "the drift is harmful: estimated (CBPE) ROC AUC" in top
    assert f"{len(own)} findings:" in top and f"{len(drifted)} firing alerts:" in top
    assert f"{len(own) + len(drifted)} finding" not in text


def test_one_threshold_per_statistic_in_every_place(stored: dict[str, Any]) -> None:
    page = _page(stored)
    seen: dict[str, set[str]] = {}
    for name, value in re.findall(r"([A-Za-z0-9 /]+?) = [^ ]+ \(threshold ([^)]+)\)", _text(page)):
        seen.setdefault(name.split(",")[-1].strip(), set()).add(value)
    rows = re.findall(r'<td>([^<]+)</td><td class="num">([^<]+)</td><td class="num">[^<]+</td>', page)
    for name, value in rows:  # the summary's effect size and threshold cells
        seen.setdefault(html.unescape(name), set()).add(value)
    assert seen["W1 / reference sd"] == {"0.05"} and seen["total variation"] == {"0.02"}, seen
    cards = page.split('<div class="card"><h2>')[1:]
    assert cards and all(_text(c).count("threshold") == 1 for c in cards)


def test_the_summary_lists_every_feature_and_output_with_its_effect_over_the_last_runs(
    stored: dict[str, Any],
) -> None:
    history = _history(stored)
    page = _page(stored, history=history)
    summary = page[page.index('id="summary"') : page.index('id="history"')]
    names = re.findall(r"<tr><td>([^<]+)</td><td>(?:DRIFT|ok)</td>", summary)
    outputs = [stored[k]["name"] for k in ("prediction", "multivariate") if stored.get(k)]
    assert sorted(names) == sorted([f["name"] for f in stored["features"]] + outputs)
    assert summary.count('<svg class="spark"') == len(names)
    assert "effect, last 6 runs" in summary
    charts = page[page.index('id="history"') :]
    assert "6 runs from 4 Dec 2026 12:37 UTC to 4 Dec 2026 17:37 UTC" in _text(charts)
    assert "2 of them backfilled" in _text(charts)
    first = charts[: charts.index("</figure>")]
    assert first.count('<circle class="point"') == 6  # the drift share: one point per run
    assert "serve" in charts and "ingest" in charts  # rows by source


def test_class_names_on_a_report_stored_with_recall_by_index() -> None:
    from monitors.profile import build_reference_profile
    from registry.schema import Task, infer_schema, label_codes
    from tests.monitors.references import CLASSES, _window, multiclass_reference

    cols, prob = multiclass_reference(3_000)
    schema = infer_schema(cols, target="label", task=Task.MULTICLASS, classes=CLASSES)
    labels = label_codes(cols["label"], schema.classes)
    doc = build_reference_profile(cols, schema, predictions=prob, labels=labels)
    stored = _window(doc, prob[:1_000], labels[:1_000]).as_dict()
    indexed = {f"recall[{c}]": f"recall_{k}" for k, c in enumerate(CLASSES)}
    for part in ("performance", "reference_performance", "estimated_performance"):
        stored[part] = {indexed.get(k, k): v for k, v in (stored[part] or {}).items()}
    page = render_html(report_from_dict(stored))
    text = _text(page)
    assert all(f"recall[{c}]" in text and f"prediction[{c}]" in text for c in CLASSES)
    assert "recall_" not in text
