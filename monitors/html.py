"""A self-contained HTML drift report, for reading at a glance (no external assets: CSS and charts inline).

Top to bottom: the verdict in words (what drifted, whether it hurts the model), the findings counted once,
the window and the level each test ran at in words; the summary table of every feature and output (verdict,
effect, p-value, a sparkline of its effect over the last runs); the history charts of the stored runs (drift
share, the drifted features' effects, realised and estimated performance with their limits, rows by
source); then the harm, segment, weak-slice, output, performance and quality sections and the per-feature
cards. Times read ``4 Dec 2026 17:37 UTC``, figures carry at most 4 significant digits, per-class metrics
carry their class names. Readable from 390 to 1,400 pixels wide: tables scroll inside their card, charts
scale to it.
"""

from __future__ import annotations

import html
import re
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from core.durations import in_words
from monitors.charts import PALETTE, Axis, Series, line_chart, number, sparkline, stacked_bars
from monitors.findings import (
    Finding,
    Headline,
    estimate_label,
    feature_summary,
    harm_line,
    headline,
)
from monitors.history import History
from monitors.horizon import FAMILIES, HORIZON_S
from monitors.humane import age, short, span, when
from monitors.report import DriftReport, FeatureDrift

_CSS = """
*{box-sizing:border-box}
body{font-family:system-ui,sans-serif;margin:0 auto;padding:1.5rem;max-width:1200px;color:#1b1f24;
background:#fafbfc;line-height:1.4}
.summary,.note,.meta,.harm,h1,h2,li{overflow-wrap:anywhere}
h1{font-size:1.45rem;margin:0 0 .3rem}h2{font-size:1.1rem;margin:0 0 .4rem}
.meta{color:#57606a;font-size:.9rem;margin-bottom:1rem}
.summary{padding:.8rem 1rem;border-radius:6px;margin-bottom:1.2rem}
.summary .verdict{font-weight:600;font-size:1.05rem}
.summary ul{margin:.4rem 0}.summary .detail{font-size:.9rem}
.bad{background:#fde8e8;border:1px solid #f5a3a3}.ok{background:#e7f6ec;border:1px solid #9fd8b0}
.card{background:#fff;border:1px solid #d8dee4;border-radius:6px;padding:1rem;margin-bottom:1rem;
max-width:100%;overflow:hidden}
.scroll{overflow-x:auto;max-width:100%}
.tag{display:inline-block;padding:0 .5rem;border-radius:4px;font-size:.85rem;margin-left:.5rem}
.tag.bad{color:#a40e26}.tag.ok{color:#116329}
table{border-collapse:collapse;font-size:.85rem;margin-top:.5rem}
td,th{padding:.2rem .6rem;border-bottom:1px solid #eee;text-align:left;vertical-align:middle;
white-space:nowrap}
.legend span{display:inline-block;width:.8rem;height:.8rem;margin:0 .3rem 0 1rem;vertical-align:middle}
.harm{padding:.6rem 1rem;border-radius:6px;margin-bottom:1rem}
tr.flag td{background:#fff1e5}td.num{text-align:right;font-variant-numeric:tabular-nums}
.note{font-size:.85rem;color:#57606a;margin:.4rem 0}
.charts{display:grid;grid-template-columns:repeat(auto-fit,minmax(min(100%,480px),1fr));gap:1rem}
.charts figure{margin:0;min-width:0}.charts figcaption{font-weight:600;font-size:.9rem}
svg.chart{width:100%;height:auto;display:block}svg.hist{width:100%;max-width:640px;height:auto}
.keys{font-size:.8rem;color:#57606a}.keys .key{margin-right:.8rem;white-space:nowrap}
.keys svg{margin-right:.25rem;vertical-align:middle}
@media (max-width:600px){body{padding:.6rem}.card{padding:.6rem}td,th{padding:.15rem .35rem}}
"""
_REF, _CUR = "#8c959f", "#0969da"
_IMPACT, _GAP = "#8250df", "#bc4c00"  # the impact bars of the summary, the gap bars of the weak slices
NAME_OF = {
    "roc_auc": "ROC AUC",
    "macro_f1": "macro F1",
    "rmse": "RMSE",
    "mae": "MAE",
    "r2": "R\u00b2",
    "log_loss": "log loss",
    "f1": "F1",
}


def _fmt(value: Any) -> str:
    """A value as the page prints it: numbers in at most 4 significant digits, nothing as a dash."""
    if value is None:
        return "\u2014"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, int | float):
        return number(float(value))
    return html.escape(str(value))


def _text(value: Any) -> str:
    """A stored word, escaped; a dash for none."""
    return "\u2014" if value is None else html.escape(str(value))


def _percent(share: Any) -> str:
    """A share as a percentage in at most 4 significant digits (``1.234%``)."""
    if isinstance(share, bool) or not isinstance(share, int | float) or share != share:
        return "\u2014"
    return f"{number(float(share) * 100)}%"


def metric_name(key: str) -> str:
    """A metric as people name it: ``ROC AUC``, ``macro F1``, ``recall[low]`` as it is."""
    return NAME_OF.get(key, key)


@dataclass(frozen=True)
class RunInfo:
    """What the page says of the stored run it shows: which run, its window, when it was evaluated, and the
    false-alarm budget the model's level was spent from (None: not known, e.g. an offline comparison)."""

    model_name: str
    model_version: int
    run_id: int
    created_at: datetime
    window_start: datetime | None = None
    window_end: datetime | None = None
    backfill: bool = False
    budget: float | None = None  # false alarms per 30 days (the model's monitor settings)
    alpha: float | None = None  # the model's per-test level before the budget (monitor settings)


def _axis_label(label: str) -> str:
    """A short tick: an interval ``(a, b]`` shows as ``<= b`` (the full interval is in the bar's tooltip)."""
    if label.startswith("(") and label.endswith("]") and ", " in label:
        label = "<= " + label[1:-1].split(", ", 1)[1]
    return label[:12]


def _bars(f: FeatureDrift, width: int = 640, height: int = 160) -> str:
    h = f.histogram
    n = max(len(h.labels), 1)
    top = max([*h.reference, *h.current, 1e-9])
    slot = width / n
    bar = slot * 0.38
    parts = [
        f'<svg class="hist" viewBox="0 0 {width} {height + 40}" width="{width}" height="{height + 40}" '
        f'role="img" aria-label="{html.escape(f.name)} histogram">'
    ]
    for i, (label, r, c) in enumerate(zip(h.labels, h.reference, h.current, strict=True)):
        x = i * slot + slot * 0.1
        for j, (v, color) in enumerate(((r, _REF), (c, _CUR))):
            bh = height * v / top
            parts.append(
                f'<rect x="{x + j * bar:.1f}" y="{height - bh:.1f}" width="{bar:.1f}" height="{bh:.1f}" '
                f'fill="{color}"><title>{html.escape(label)}: {_percent(v)}</title></rect>'
            )
        parts.append(
            f'<text x="{x + bar:.1f}" y="{height + 14}" font-size="9" text-anchor="middle">'
            f"{html.escape(_axis_label(label))}</text>"
        )
    parts.append("</svg>")
    return "".join(parts)


def _card(f: FeatureDrift) -> str:
    """One feature or output: its verdict (the one test that decides it, with its threshold), its bars, and
    the other statistics measured beside it (for comparison: they decide nothing, so carry no threshold)."""
    verdict = '<span class="tag bad">DRIFT</span>' if f.drifted else '<span class="tag ok">no drift</span>'
    rows = "".join(
        f'<tr><td>{html.escape(name)}</td><td class="num">{_fmt(r.statistic)}</td>'
        f'<td class="num">{_fmt(r.p_value)}</td>'
        f'<td class="num">{_fmt(r.effect)}</td><td>{html.escape(r.effect_name)}</td></tr>'
        for name, r in f.statistics.items()
    )
    r = f.result
    return (
        f'<div class="card"><h2>{html.escape(f.name)} <small>({html.escape(f.kind)})</small>{verdict}</h2>'
        f"<div>verdict by <b>{html.escape(r.test)}</b>: p = {_fmt(r.p_value)}, adjusted p = "
        f"{_fmt(r.adjusted_p_value)}, {html.escape(r.effect_name)} = {_fmt(r.effect)} "
        f"(threshold {_fmt(r.threshold)}); rows {_fmt(f.rows)}, missing {_fmt(f.missing)}</div>"
        + (
            f'<div class="note">impact: {html.escape(str((f.impact or {}).get("message")))}</div>'
            if _said(f.impact)
            else ""
        )
        + f'<div class="legend"><span style="background:{_REF}"></span>reference'
        f'<span style="background:{_CUR}"></span>current</div>{_bars(f)}'
        + (
            '<div class="note">Other statistics, measured for comparison (only the verdict\'s test decides '
            'drift):</div><div class="scroll"><table><tr><th>test</th><th>statistic</th><th>p-value</th>'
            f"<th>effect</th><th>effect size</th></tr>{rows}</table></div>"
            if rows
            else ""
        )
        + "</div>"
    )


def _named_classes(report: DriftReport) -> list[str]:
    """The classes of a multi-class report, in the model's order, from its outputs' names
    (``prediction[low]``); [] for another task."""
    return [
        m.group(1) for f in report.outputs if (m := re.fullmatch(r"prediction\[(.+)\]", f.name)) is not None
    ]


def _metric_label(key: str, classes: list[str]) -> str:
    """A metric's name on the page: ``recall_<k>`` of a report stored before class names as
    ``recall[<class k>]``."""
    found = re.fullmatch(r"recall_(\d+)", key)
    if found is not None and int(found.group(1)) < len(classes):
        return f"recall[{classes[int(found.group(1))]}]"
    return metric_name(key)


def _performance(report: DriftReport) -> str:
    if not (report.performance or report.estimated_performance):
        return ""
    keys, classes = performance_keys(report), _named_classes(report)
    limits = {**(report.estimated_performance_limits or {}), **(report.performance_limits or {})}
    cells = "".join(
        f"<tr><td>{html.escape(_metric_label(k, classes))}</td>"
        f'<td class="num">{_fmt((report.reference_performance or {}).get(k))}</td>'
        f'<td class="num">{_fmt((report.performance or {}).get(k))}</td>'
        f'<td class="num">{_fmt((report.estimated_performance or {}).get(k))}</td>'
        f'<td class="num">{_fmt(limits.get(k))}</td></tr>'
        for k in keys
    )
    return (
        '<div class="card" id="performance"><h2>Performance</h2><div class="scroll"><table><tr>'
        "<th>metric</th><th>reference</th><th>realised (labels)</th>"
        f"<th>estimated ({report.estimate_method})</th><th>limit</th></tr>{cells}</table></div></div>"
    )


def _quality(report: DriftReport) -> str:
    rows = "".join(
        f"<tr><td>{html.escape(q.feature)}</td><td>{html.escape(q.check.replace('_', ' '))}</td>"
        f'<td class="num">{_fmt(q.count)}</td><td class="num">{_percent(q.rate)}</td>'
        f'<td class="num">{_percent(q.expected_rate)}</td></tr>'
        for q in report.quality
        if q.flagged
    )
    if not rows:
        return ""
    return (
        '<div class="card"><h2>Data quality flags</h2><div class="scroll"><table><tr><th>feature</th>'
        f"<th>check</th><th>count</th><th>rate</th><th>expected</th></tr>{rows}</table></div></div>"
    )


def _plural(n: int, one: str, many: str | None = None) -> str:
    return f"{number(n)} {one if n == 1 else (many or one + 's')}"


def verdict_line(report: DriftReport) -> str:
    """The report in one sentence (plain text): what drifted, whether the dataset did, whether the drift hurts
    (``3 of 25 features drifted \u2014 the dataset drifted; the drift is harmful: ROC AUC 0.81 [0.79, 0.83]
    vs 0.86``)."""
    d = report.dataset
    outputs = [x for x in (report.prediction, *report.outputs) if x is not None and x.drifted]
    said = f"{number(d.n_drifted)} of {_plural(d.n_features, 'feature')} drifted \u2014 " + (
        "the dataset drifted" if d.drifted else "the dataset is stable"
    )
    if outputs:
        said += f"; the model's output drifted ({', '.join(x.name for x in outputs)})"
    h = report.harm
    if h:
        value, ref = h.get("value"), h.get("reference")
        bounds = f" [{_fmt(h.get('lower'))}, {_fmt(h.get('upper'))}]" if h.get("lower") is not None else ""
        said += (
            f"; the drift is {'harmful' if h.get('harmful') else 'not harmful'}: "
            f"{estimate_label(h.get('estimate'))} {metric_name(str(h.get('metric')))} "
            f"{_fmt(value)}{bounds} vs {_fmt(ref)}"
        )
    return said + "."


def level_words(report: DriftReport, *, budget: float | None = None, alpha: float | None = None) -> str:
    """The level each test ran at, in words. A stored run (``budget``, ``alpha``: the model's monitor
    settings) tests at its false-alarm budget's share (``each test at 8.3e-6: a false-alarm budget of 0.5 per
    30 days over 8,640 runs``: the runs are the budget over the families and the level), or at the model's
    alpha when the budget allows more; an offline comparison at the one-off level."""
    d = report.dataset
    level = d.alpha
    how = {"bh": "adjusted across features by Benjamini\u2013Hochberg", "bonferroni": "Bonferroni-corrected"}
    corrected = f"p-values {how.get(d.correction, 'not adjusted across features')}"
    if budget is not None and budget > 0 and level > 0:  # a stored run, with its model's settings
        if alpha is None or level < alpha * 0.999:
            runs = budget / FAMILIES / level
            return (
                f"each test at {number(level)}: a false-alarm budget of {number(budget)} per 30 days over "
                f"{number(round(runs))} runs (one every {in_words(HORIZON_S / runs)}), shared by {FAMILIES} "
                f"detector families; {corrected}"
            )
        return (
            f"each test at {number(level)}, the model's alpha (its runs are few enough that the false-alarm "
            f"budget of {number(budget)} per 30 days allows it); {corrected}"
        )
    if level >= 0.01:
        return (
            f"each test at {number(level)}, the level of a one-off comparison (no schedule to spread a "
            f"false-alarm budget over); {corrected}"
        )
    return (
        f"each test at {number(level)}, the level of a scheduled run (a false-alarm budget per 30 days "
        f"spread over its runs); {corrected}"
    )


def _findings(summary: Headline) -> str:
    """The findings, each once, then the firing alerts (which restate them, or add what the report cannot
    see) in a list of their own."""
    own = [f for f in summary.findings if f.kind != "alert"]
    alerts = [f for f in summary.findings if f.kind == "alert"]
    out = ""
    if own:
        out += (
            f'<div class="count">{_plural(len(own), "finding")}:</div><ul class="findings">'
            + "".join(f"<li>{html.escape(f.message)}</li>" for f in own)
            + "</ul>"
        )
    if alerts:
        out += (
            f'<div class="count">{_plural(len(alerts), "firing alert")}:</div><ul class="alerts">'
            + "".join(f"<li>{html.escape(_alert_message(f))}</li>" for f in alerts)
            + "</ul>"
        )
    return out


_ISO = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d(?::\d\d(?:\.\d+)?)?(?:Z|[+-]\d\d:\d\d)?")


def _alert_message(f: Finding) -> str:
    """An alert's line with its times in words."""

    def human(m: re.Match[str]) -> str:
        try:
            at = datetime.fromisoformat(m.group(0).replace("Z", "+00:00"))
        except ValueError:
            return m.group(0)
        return when(at if at.tzinfo else at.replace(tzinfo=UTC))

    return _ISO.sub(human, f.message)


def _meta(run: RunInfo | None, now: datetime) -> str:
    if run is None:
        return ""
    parts = [f"run {run.run_id} of version {run.model_version}"]
    if run.window_start is not None and run.window_end is not None:
        parts.append(f"window {span(run.window_start, run.window_end)}")
    parts.append(f"evaluated {when(run.created_at)} ({age(run.created_at, now=now)})")
    if run.backfill:
        parts.append("backfilled (a past window evaluated later)")
    joined = " \u00b7 ".join(parts)
    return f'<div class="meta">{html.escape(joined)}</div>'


def render_html(
    report: DriftReport,
    *,
    title: str = "Drift report",
    summary: Headline | None = None,
    history: History | None = None,
    run: RunInfo | None = None,
    now: datetime | None = None,
) -> str:
    """The report as one HTML page (no external assets); the headline is green only without findings.
    ``history`` (the model's stored runs) adds the sparklines and the history charts; ``run`` says which
    stored run it is and the model's false-alarm budget."""
    now = now or datetime.now(UTC)
    d = report.dataset
    summary = summary or headline(report)
    cls = "ok" if summary.ok else "bad"
    detail = (
        f"{_plural(report.rows, 'current row')} vs {_plural(report.reference_rows, 'reference row')}; "
        f"the dataset drifts when at least {_percent(d.drift_share)} of its features do "
        f"({_percent(d.share)} did); "
        + level_words(report, budget=run.budget if run else None, alpha=run.alpha if run else None)
        + "."
    )
    extra = [x for x in (report.prediction, *report.outputs, report.multivariate) if x is not None]
    return (
        f'<!doctype html><html lang="en"><head><meta charset="utf-8">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        f"<title>{html.escape(title)}</title>"
        f"<style>{_CSS}</style></head><body><h1>{html.escape(title)}</h1>"
        + _meta(run, now)
        + f'<div class="summary {cls}"><div class="verdict">{html.escape(verdict_line(report))}</div>'
        + _findings(summary)
        + f'<div class="detail">{html.escape(detail)}</div></div>'
        + _harm(report)
        + _summary_table(report, history)
        + _history(history, now)
        + _segments(report)
        + _weak_slices(report)
        + "".join(_card(f) for f in extra)
        + _performance(report)
        + _quality(report)
        + "".join(_card(f) for f in report.features)
        + "</body></html>"
    )


def _said(entry: Any) -> bool:
    return isinstance(entry, dict) and isinstance(entry.get("message"), str) and bool(entry["message"])


def _bar(share: float | None, color: str, *, width: int = 80) -> str:
    """A small horizontal bar of ``share`` (0..1, clipped) for a table cell."""
    if share is None or share != share:
        return ""
    w = max(0.0, min(1.0, abs(share))) * width
    return (
        f'<svg width="{width}" height="10" role="img" aria-label="{share:.0%}">'
        f'<rect x="0" y="1" width="{w:.1f}" height="8" fill="{color}"></rect></svg>'
    )


def _pct(value: Any) -> str:
    return "-" if not isinstance(value, int | float) or value != value else f"{value:.0%}"


def _impact_cell(row: dict[str, Any]) -> str:
    imp = row["impact"]
    if imp is None:
        return "grouped" if row["grouped"] else "\u2014"
    if imp["harmless"]:
        return "harmless"
    bounds = (
        f" [{_pct(imp['share_lower'])}, {_pct(imp['share_upper'])}]" if imp["share_lower"] is not None else ""
    )
    effect = (
        f" ({_fmt(imp['effect'])} [{_fmt(imp['lower'])}, {_fmt(imp['upper'])}])"
        if imp["effect"] is not None
        else ""
    )
    return f"{_bar(imp['share'], _IMPACT)} {_pct(imp['share'])}{bounds}{effect}"


def _harm(report: DriftReport) -> str:
    """The harm verdict above the summary: harmful or not, by which estimate, with its bounds."""
    line = harm_line(report)
    if line is None or report.harm is None:
        return ""
    h = report.harm
    cls, word = ("bad", "Harmful drift") if h.get("harmful") else ("ok", "No harmful drift")
    bounds = f" [{_fmt(h.get('lower'))}, {_fmt(h.get('upper'))}]" if h.get("lower") is not None else ""
    return (
        f'<div class="harm {cls}"><b>{word}</b> ({html.escape(estimate_label(h.get("estimate")))} '
        f"{html.escape(metric_name(str(h.get('metric'))))} {_fmt(h.get('value'))}{bounds}): "
        f"{html.escape(line)}</div>"
    )


def _attribution_note(report: DriftReport) -> str:
    a = report.attribution
    if not a:
        return ""
    fit = a.get("surrogate_fit") or {}
    how = (
        f"a surrogate of the model's answers ({_text(fit.get('metric'))} "
        f"{_fmt(fit.get('value'))} on {_fmt(fit.get('rows'))} reference rows)"
        if a.get("method") == "surrogate"
        else "the model itself"
    )
    said = str(a["message"]).rstrip() if _said(a) else ""
    message = html.escape(said if not said or said.endswith((".", "!", "?")) else said + ".") + " " * bool(
        said
    )
    which = html.escape(estimate_label(a.get("estimate")))
    return (
        f'<div class="note">{message}Impact: the share of the {which} '
        f"{_text(a.get('metric'))} change ({_fmt(a.get('change'))}) each drifted feature's shift "
        f"explains, with bounds from {_fmt(a.get('resamples'))} resamples, asked of {how}.</div>"
    )


def _p_value(f: FeatureDrift) -> float | None:
    r = f.result
    return r.adjusted_p_value if r.adjusted_p_value is not None else r.p_value


def _summary_table(report: DriftReport, history: History | None) -> str:
    """Every feature (by impact, then drift) and every output: verdict, effect with its name and threshold,
    p-value, impact (when the report has an attribution), and the effect over the last runs (with a
    history)."""
    rows = feature_summary(report)
    by_name = {f.name: f for f in report.features}
    outputs = [x for x in (report.prediction, *report.outputs, report.multivariate) if x is not None]
    attributed = report.attribution is not None
    trend = history is not None and len(history.points) > 1  # a line needs two runs

    def line(f: FeatureDrift, impact: str | None) -> str:
        r = f.result
        spark = (
            sparkline(
                history.effects(f.name) if history is not None else [],
                label=f"{f.name}: {r.effect_name} over the last {len(history.points) if history else 0} runs",
                threshold=r.threshold,
            )
            if trend
            else ""
        )
        return (
            f"<tr><td>{html.escape(f.name)}</td><td>{'DRIFT' if f.drifted else 'ok'}</td>"
            f'<td class="num">{_fmt(r.effect)}</td><td>{html.escape(r.effect_name)}</td>'
            f'<td class="num">{_fmt(r.threshold)}</td><td class="num">{_fmt(_p_value(f))}</td>'
            + (f"<td>{impact}</td>" if attributed else "")
            + (f'<td class="trend">{spark}</td>' if trend else "")
            + "</tr>"
        )

    cells = "".join(line(by_name[r["name"]], _impact_cell(r)) for r in rows if r["name"] in by_name)
    cells += "".join(line(f, "\u2014") for f in outputs)
    harmless = "".join(
        f"<li>{html.escape(str(r['impact']['message']))}</li>"
        for r in rows
        if r["drifted"] and r["impact"] is not None and r["impact"]["harmless"] and _said(r["impact"])
    )
    return (
        '<div class="card" id="summary"><h2>Summary</h2>'
        + _attribution_note(report)
        + '<div class="scroll"><table><tr><th>feature or output</th><th>verdict</th><th>effect</th>'
        "<th>effect size</th><th>threshold</th><th>p-value (adjusted)</th>"
        + ("<th>impact</th>" if attributed else "")
        + (f"<th>effect, last {_plural(len(history.points), 'run')}</th>" if trend and history else "")
        + f"</tr>{cells}</table></div>"
        + (f'<div class="note">Harmless drift:</div><ul class="harmless">{harmless}</ul>' if harmless else "")
        + "</div>"
    )


def _axis(history: History) -> Axis:
    """The runs' window ends as x (seconds), each labelled, with up to four ticks."""
    xs = [p.at.timestamp() for p in history.points]
    labels = [
        f"run {p.run_id}, window "
        + (span(p.start, p.at) if p.start is not None else f"ending {when(p.at)}")
        + (", backfilled" if p.backfill else "")
        for p in history.points
    ]
    lo, hi = min(xs), max(xs)
    ticks = [lo + (hi - lo) * i / 3 for i in range(4)] if hi > lo else [lo]
    named: dict[str, float] = {}  # runs minutes apart: one tick per distinct label
    for t in ticks:
        named.setdefault(short(datetime.fromtimestamp(t, tz=UTC)), t)
    return Axis(xs=xs, labels=labels, ticks=[(t, text) for text, t in named.items()])


def _history(history: History | None, now: datetime) -> str:
    """The charts of the stored runs: drift share, the drifted features' effects, performance with its
    limits, rows by source; one point per run, at its window's end."""
    if history is None or len(history.points) < 2:  # one run: nothing over time yet
        return ""
    axis, points = _axis(history), history.points
    first, last = points[0].at, points[-1].at
    charts = [
        (
            "Share of drifted features",
            line_chart(
                axis,
                [Series("share drifted", [p.share for p in points], PALETTE[1])],
                title="drift share",
                floor=0,
            ),
        )
    ]
    drifted = history.ever_drifted()[: len(PALETTE)]
    if drifted:
        charts.append(
            (
                "Effect of each feature that drifted",
                line_chart(
                    axis,
                    [Series(n, history.effects(n), PALETTE[i % len(PALETTE)]) for i, n in enumerate(drifted)],
                    title="effects of the drifted features",
                    floor=0,
                ),
            )
        )
    if history.metric is not None:
        name = metric_name(history.metric)
        perf = [
            Series(f"realised {name}", history.series("performance"), PALETTE[0]),
            Series("its limit", history.series("performance_limits"), PALETTE[0], dashed=True, points=False),
            Series(f"estimated {name}", history.series("estimated_performance"), PALETTE[3]),
            Series(
                "its limit",
                history.series("estimated_performance_limits"),
                PALETTE[3],
                dashed=True,
                points=False,
            ),
            Series(
                "reference", history.series("reference_performance"), PALETTE[4], dashed=True, points=False
            ),
        ]
        drawn = line_chart(axis, [s for s in perf if any(v is not None for v in s.values)], title=name)
        if drawn:
            charts.append((f"{name}: realised and estimated, with their limits", drawn))
    sources = history.sources()
    if sources:
        rows = [
            Series(src, [p.rows_by_source.get(src) for p in points], PALETTE[i % len(PALETTE)])
            for i, src in enumerate(sources)
        ]
    else:
        rows = [Series("rows", [p.rows for p in points], PALETTE[4])]
    charts.append(("Rows by source", stacked_bars(axis, rows, title="rows per window")))
    figures = "".join(
        f"<figure><figcaption>{html.escape(t)}</figcaption>{c}</figure>" for t, c in charts if c
    )
    backfilled = history.backfilled
    note = (
        f"{_plural(len(points), 'run')} from {when(first)} to {when(last)} ({age(last, now=now)}), "
        f"{number(backfilled)} of them backfilled; one point per run at its window's end."
    )
    return (
        f'<div class="card" id="history"><h2>Over time</h2><div class="note">{html.escape(note)}</div>'
        f'<div class="charts">{figures}</div></div>'
    )


def _segment_row(s: dict[str, Any]) -> str:
    flagged = bool(s.get("flagged"))
    drifted = ", ".join(map(str, (s.get("drift") or {}).get("features") or [])) or "-"
    reasons = "; ".join(map(str, s.get("reasons") or []))
    return (
        ('<tr class="flag">' if flagged else "<tr>") + f"<td>{_text(s.get('segment'))}</td>"
        f'<td class="num">{_fmt(s.get("rows"))}</td><td class="num">{_pct(s.get("share"))}</td>'
        f"<td>{html.escape(_measured(s.get('metric'), s.get('estimate')))}</td>"
        f'<td class="num">{_fmt(s.get("reference"))}</td><td class="num">{_fmt(s.get("current"))}</td>'
        f'<td class="num">{_fmt(s.get("change"))}</td><td>{html.escape(drifted)}</td>'
        f"<td>{('FLAGGED: ' + html.escape(reasons)) if flagged else ''}</td></tr>"
    )


def _measured(metric: Any, estimate: Any) -> str:
    """``ROC AUC (estimated (CBPE))``; without a figure (too few rows): the metric alone."""
    if metric is None:
        return "\u2014"
    name = metric_name(str(metric))
    return name if estimate is None else f"{name} ({estimate_label(estimate)})"


def _segments(report: DriftReport) -> str:
    """Per segment, ranked by the worst change; flagged ones marked."""
    if not report.segments:
        return ""
    return (
        '<div class="card" id="segments"><h2>Segments</h2><table><tr><th>segment</th><th>rows</th>'
        "<th>share</th><th>metric</th><th>reference</th><th>current</th><th>change</th>"
        f"<th>drifted features</th><th></th></tr>{''.join(_segment_row(s) for s in report.segments)}"
        "</table></div>"
    )


def _weak_slices(report: DriftReport) -> str:
    """Where the model is worst: slice, rows, value with its bounds, the gap to the overall metric."""
    w = report.weak_slices
    if not w or not w.get("slices"):
        return ""
    top = max([abs(float(x["gap"])) for x in w["slices"] if isinstance(x.get("gap"), int | float)] or [1.0])
    rows = "".join(
        f'<tr><td>{_text(x.get("slice"))}</td><td class="num">{_fmt(x.get("rows"))}</td>'
        f'<td class="num">{_fmt(x.get("value"))}</td>'
        f'<td class="num">[{_fmt(x.get("lower"))}, {_fmt(x.get("upper"))}]</td>'
        f'<td class="num">{_fmt(x.get("gap"))}</td>'
        f"<td>{_bar(x['gap'] / top if isinstance(x.get('gap'), int | float) and top else None, _GAP)}</td>"
        f"<td>{'significant' if x.get('significant') else ''}</td></tr>"
        for x in w["slices"]
    )
    source = "labels" if w.get("source") == "labels" else "the estimated per-row loss"
    return (
        f'<div class="card" id="weak-slices"><h2>Weak slices</h2><div class="note">'
        f"{_text(w.get('metric'))} by slice against its overall {_fmt(w.get('overall'))}, from "
        f"{source}; slices of at least {_fmt(w.get('min_rows'))} rows, bounds corrected for the "
        f"{_fmt(w.get('tried'))} slices tried (level {_fmt(w.get('level'))}).</div>"
        "<table><tr><th>slice</th><th>rows</th><th>value</th><th>bounds</th><th>gap</th><th></th><th></th>"
        f"</tr>{rows}</table></div>"
    )


BINARY_KEYS = ("accuracy", "precision", "recall", "f1", "roc_auc")
MULTICLASS_KEYS = ("accuracy", "macro_f1", "log_loss")
REGRESSION_KEYS = ("mae", "rmse", "r2")


def performance_keys(report: DriftReport) -> tuple[str, ...]:
    """The metrics a report's performance table shows: its task's (read from the metrics it holds)."""
    known = {
        **(report.reference_performance or {}),
        **(report.performance or {}),
        **(report.estimated_performance or {}),
    }
    if "rmse" in known:
        return REGRESSION_KEYS
    if "macro_f1" in known:
        # by class: recall[<class>] in the report's order; a report stored before names them recall_<k>
        named = tuple(k for k in known if k.startswith("recall["))
        indexed = sorted((k for k in known if re.fullmatch(r"recall_\d+", k)), key=lambda k: int(k[7:]))
        recalls = named or tuple(indexed)
        return (*MULTICLASS_KEYS, *recalls)
    return BINARY_KEYS
