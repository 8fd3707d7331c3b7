"""Where people read why a drift matters (issue 42, item 5): the summary of every feature (verdict, effect,
impact), the harm line, segments and weak slices in the headline JSON, the HTML report and the terminal; a
report stored before them renders with what it holds; client names are escaped everywhere."""

from __future__ import annotations

import io
import json
import re
from typing import Any

import pytest
from rich.console import Console

from monitors.console import print_report
from monitors.engine import compare
from monitors.findings import causes_text, feature_summary, headline, top_causes
from monitors.html import render_html
from monitors.profile import profile_from_dict
from monitors.report import DriftReport, report_from_dict
from tests.monitors.explained import CAUSE, HARMLESS, SECOND, explain
from tests.monitors.helpers import true_probability
from training.cluster.datagen import TARGET, generate

HOSTILE = {
    CAUSE: "<script>alert(1)</script>",
    "loan_amount": "[red]loan[/red]",
    "region": '"><img src=x onerror=alert(2)>',
    "north": "[bold red]north[/]&amp;",
}


@pytest.fixture(scope="module")
def shifted(profile_dict: dict[str, Any]) -> dict[str, Any]:
    """A covariate shift of age, income and credit score as the engine reports it (no explanation)."""
    cur = generate(8_000, scenario="covariate_shift", seed=42)
    profile = profile_from_dict(profile_dict)
    report = compare(profile=profile, columns=cur, predictions=true_probability(cur), labels=cur[TARGET])
    assert {CAUSE, SECOND, HARMLESS} <= {f.name for f in report.features if f.drifted}
    return report.as_dict()


def _explained(shifted: dict[str, Any], **kw: Any) -> DriftReport:
    return report_from_dict(json.loads(json.dumps(explain(shifted, **kw))))  # as stored and read back


def _console(report: DriftReport) -> str:
    out = io.StringIO()
    print_report(report, console=Console(file=out, width=100, force_terminal=False, color_system=None))
    return out.getvalue()


def test_the_summary_ranks_by_impact_then_drift(shifted: dict[str, Any]) -> None:
    rows = feature_summary(_explained(shifted))
    assert [r["name"] for r in rows[:2]] == [CAUSE, SECOND]
    cause = rows[0]
    assert cause["drifted"] and cause["effect"] is not None and cause["effect_name"]
    imp = cause["impact"]
    assert imp["share"] == 0.8 and not imp["harmless"]
    assert imp["share_lower"] == pytest.approx(0.7) and imp["share_upper"] == pytest.approx(0.9)
    harmless = next(r for r in rows if r["name"] == HARMLESS)
    assert harmless["impact"]["harmless"] and "explains none" in harmless["impact"]["message"]
    drifted = [r["drifted"] for r in rows]
    assert drifted == sorted(drifted, reverse=True)  # after the attributed ones, drifted before stable
    assert all(r["impact"] is None for r in rows if r["name"] not in {CAUSE, SECOND, HARMLESS})


def test_the_headline_json_carries_the_summary_harm_and_top_causes(shifted: dict[str, Any]) -> None:
    report = _explained(shifted)
    doc = json.loads(json.dumps(headline(report).as_dict(), allow_nan=False))
    assert not doc["ok"]
    assert [f["name"] for f in doc["features"]][:2] == [CAUSE, SECOND]
    assert len(doc["features"]) == len(report.features)
    assert doc["harm"]["harmful"] is True and doc["harm"]["estimate"] == "cbpe"
    assert doc["harm"]["lower"] == 0.79 and doc["harm"]["upper"] == 0.83
    assert [c["feature"] for c in doc["causes"]] == [CAUSE, SECOND]  # the harmless one is no cause
    first = doc["causes"][0]
    assert (first["impact"], first["lower"], first["upper"], first["metric"]) == (
        0.8,
        -0.045,
        -0.035,
        "roc_auc",
    )
    kinds = {(f["kind"], f["subject"]) for f in doc["findings"]}
    assert ("harmful_drift", "roc_auc") in kinds and ("segment", "region=north") in kinds
    assert ("segment", "region=south") not in kinds  # not flagged
    assert "1 harmful drift" in doc["text"] and "1 flagged segment" in doc["text"]


def _old(report: dict[str, Any]) -> dict[str, Any]:
    """The report as a run stored before issue 42 kept it (no harm, attribution, segments, weak slices)."""
    return {k: v for k, v in report.items() if k not in {"harm", "attribution", "segments", "weak_slices"}}


def test_an_old_report_has_an_empty_summary_of_causes(shifted: dict[str, Any]) -> None:
    shifted = _old(shifted)
    doc = headline(report_from_dict(shifted)).as_dict()
    assert doc["harm"] is None and doc["causes"] == []
    assert {f["kind"] for f in doc["findings"]} & {"harmful_drift", "segment"} == set()
    assert all(f["impact"] is None for f in doc["features"])
    assert top_causes(None) == [] and causes_text([]) == ""


def test_harm_that_is_not_harmful_is_no_finding(shifted: dict[str, Any]) -> None:
    data = explain(shifted)
    data["harm"] = {**data["harm"], "harmful": False, "value": 0.855, "change": -0.005}
    data["segments"] = []
    report = report_from_dict(data)
    assert "harmful_drift" not in {f.kind for f in headline(report).findings}
    page = render_html(report)
    assert 'class="harm ok"' in page and "No harmful drift" in page


def test_html_opens_with_harm_and_summary_then_segments_weak_slices_and_cards(
    shifted: dict[str, Any],
) -> None:
    page = render_html(_explained(shifted))
    marks = [
        page.index('class="harm bad"'),
        page.index('id="summary"'),
        page.index('id="segments"'),
        page.index('id="weak-slices"'),
        page.index('<div class="card"><h2>prediction'),
        page.index(f'<div class="card"><h2>{CAUSE}'),
    ]
    assert marks == sorted(marks), marks
    summary = page[marks[1] : marks[2]]
    names = re.findall(r"<tr><td>([^<]+)</td><td>(?:DRIFT|ok)</td>", summary)
    outputs = [shifted[k]["name"] for k in ("prediction", "multivariate") if shifted.get(k)]
    assert names[:3] == [CAUSE, SECOND, HARMLESS] and len(names) == len(shifted["features"]) + len(outputs)
    assert names[-len(outputs) :] == outputs  # every output too, after the features
    assert "80% [70%, 90%]" in summary and "harmless" in summary
    assert f"{HARMLESS} drifted 0.5 sd; it explains none of the estimated ROC AUC change" in summary
    assert "asked of the model itself" in summary
    segments = page[marks[2] : marks[3]]
    assert segments.count('<tr class="flag">') == 1 and "FLAGGED: estimated roc_auc 0.740" in segments
    assert segments.index("region=north") < segments.index("region=south")
    slices = page[marks[3] : marks[4]]
    assert "region=north &amp; loan_purpose=business" in slices and "[0.8, 1.02]" in slices
    assert "significant" in slices and "240 slices tried" in slices
    assert f"impact: {CAUSE} explains 80% of the estimated ROC AUC change" in page[marks[5] :]


def test_a_surrogate_says_so_and_how_well_it_fits(shifted: dict[str, Any]) -> None:
    data = explain(shifted)
    data["attribution"] |= {
        "method": "surrogate",
        "surrogate_fit": {"metric": "auc", "value": 0.97, "rows": 1000},
    }
    page = render_html(report_from_dict(data))
    assert "a surrogate of the model's answers (auc 0.97 on 1,000 reference rows)" in page


def test_an_old_report_renders_as_it_did(shifted: dict[str, Any]) -> None:
    shifted = _old(shifted)
    page = render_html(report_from_dict(shifted))
    for section in ('id="segments"', 'id="weak-slices"', 'class="harm', "impact:", "<th>impact</th>"):
        assert section not in page
    report = report_from_dict(shifted)
    extra = [x.name for x in (report.prediction, *report.outputs, report.multivariate) if x is not None]
    flagged = ["Data quality flags"] if any(q.flagged for q in report.quality) else []
    cards = ["Summary", *extra, "Performance", *flagged, *(f.name for f in report.features)]
    assert [t.strip() for t in re.findall(r"<h2>([^<]+)", page)] == cards  # the cards it had, in order
    out = _console(report_from_dict(shifted))
    assert "Summary" not in out and "causes:" not in out and "segment" not in out


def test_hostile_names_are_escaped_in_the_page_and_the_terminal(shifted: dict[str, Any]) -> None:
    report = _explained(shifted, names=HOSTILE)
    page = render_html(report)
    assert "<script>" not in page and "<img" not in page
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in page
    assert "&quot;&gt;&lt;img src=x onerror=alert(2)&gt;=[bold red]north[/]&amp;amp;" in page
    out = _console(report)
    assert "<script>alert(1)</script>" in out  # printed as it is, not read as markup
    assert '"><img src=x onerror=alert(2)>=[bold red]north[/]&amp;' in out
    assert "[red]loan[/red]" in out and "&lt;" not in out


def test_the_terminal_prints_harm_summary_causes_segments_and_weak_slices(shifted: dict[str, Any]) -> None:
    out = _console(_explained(shifted))
    lines = out.splitlines()

    def at(text: str) -> int:
        return next(i for i, line in enumerate(lines) if text in line)

    assert "HARMFUL DRIFT: estimated (CBPE) roc_auc 0.810 is below the reference 0.860" in out
    table = at("Summary: every feature, by impact then drift")
    rows = [line for line in lines[table:] if re.match(r"^\W*(credit_score|income|age)\W", line)]
    assert [r.split()[1] for r in rows[:3]] == [CAUSE, SECOND, HARMLESS]
    assert "80% [70%, 90%]" in rows[0] and "harmless" in rows[2]
    assert (
        "causes: credit_score 80% [70%, 90%] of the estimated (CBPE) roc_auc change; income 20% [10%, 30%]"
        in out
    )
    assert "segment FLAGGED region=north: roc_auc 0.740 vs 0.860 (-0.120, estimated (CBPE)), 1200 rows" in out
    assert "weak slice region=north & loan_purpose=business: log_loss 0.910 [0.800, 1.020] vs 0.420" in out
    assert (
        at("HARMFUL DRIFT")
        < table
        < at("causes:")
        < at("segment FLAGGED")
        < at("weak slice")
        < at("ATTENTION")
    )


@pytest.mark.parametrize(
    ("title", "cells"),
    [
        ("Drift", [("age", "0.12")]),  # narrower than the console
        ("Drift", [("a_feature_with_a_long_name_" * 4, "x" * 90)]),  # wider than it
        ("A title far wider than the columns under it, " * 4, [("a", "1")]),
    ],
)
def test_piped_tables_take_their_natural_width(title: str, cells: list[tuple[str, str]]) -> None:
    """Not on a terminal, a table prints as it does on a console exactly as wide as the table measures (what
    the command did before rendering on PIPED_WIDTH without measuring); on a terminal, at its width."""
    from rich.table import Table

    from monitors.console import PIPED_WIDTH, _print_table

    def table() -> Table:
        out = Table(title=title)
        out.add_column("feature")
        out.add_column("value", justify="right")
        for row in cells:
            out.add_row(*row)
        return out

    def console(width: int, *, terminal: bool = False) -> Console:
        return Console(file=io.StringIO(), width=width, force_terminal=terminal, color_system=None)

    piped = console(80)
    _print_table(piped, table())
    assert piped.width == 80
    natural = piped.measure(table(), options=piped.options.update_width(PIPED_WIDTH)).maximum
    measured = console(natural)
    measured.print(table())
    assert piped.file.getvalue() == measured.file.getvalue()  # type: ignore[attr-defined]
    terminal = console(80, terminal=True)
    _print_table(terminal, table())
    assert max(len(line) for line in terminal.file.getvalue().splitlines()) <= 80  # type: ignore[attr-defined]
