"""A self-contained HTML drift report: per-feature reference vs current bars, statistics, verdicts."""

from __future__ import annotations

import html
import re
from typing import Any

from monitors.findings import (
    Headline,
    estimate_label,
    feature_summary,
    harm_line,
    headline,
)
from monitors.report import DriftReport, FeatureDrift

_CSS = """
body{font-family:system-ui,sans-serif;margin:2rem;color:#1b1f24;background:#fafbfc}
h1{font-size:1.5rem}h2{font-size:1.15rem;margin:0 0 .4rem}
.summary{padding:.8rem 1rem;border-radius:6px;margin-bottom:1.5rem;font-weight:600}
.summary ul{margin:.4rem 0;font-weight:400}.summary .detail{font-weight:400;font-size:.9rem}
.bad{background:#fde8e8;border:1px solid #f5a3a3}.ok{background:#e7f6ec;border:1px solid #9fd8b0}
.card{background:#fff;border:1px solid #d8dee4;border-radius:6px;padding:1rem;margin-bottom:1rem}
.tag{display:inline-block;padding:0 .5rem;border-radius:4px;font-size:.85rem;margin-left:.5rem}
.tag.bad{color:#a40e26}.tag.ok{color:#116329}
table{border-collapse:collapse;font-size:.85rem;margin-top:.5rem}
td,th{padding:.2rem .6rem;border-bottom:1px solid #eee;text-align:left}
.legend span{display:inline-block;width:.8rem;height:.8rem;margin:0 .3rem 0 1rem;vertical-align:middle}
.harm{padding:.6rem 1rem;border-radius:6px;margin-bottom:1rem}
tr.flag td{background:#fff1e5}td.num{text-align:right;font-variant-numeric:tabular-nums}
.note{font-size:.85rem;color:#57606a;margin:.4rem 0}
"""
_REF, _CUR = "#8c959f", "#0969da"
_IMPACT, _GAP = "#8250df", "#bc4c00"  # the impact bars of the summary, the gap bars of the weak slices


def _fmt(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:.3g}" if abs(value) < 1e4 else f"{value:.3e}"
    return html.escape(str(value))


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
        f'<svg width="{width}" height="{height + 40}" role="img" '
        f'aria-label="{html.escape(f.name)} histogram">'
    ]
    for i, (label, r, c) in enumerate(zip(h.labels, h.reference, h.current, strict=True)):
        x = i * slot + slot * 0.1
        for j, (v, color) in enumerate(((r, _REF), (c, _CUR))):
            bh = height * v / top
            parts.append(
                f'<rect x="{x + j * bar:.1f}" y="{height - bh:.1f}" width="{bar:.1f}" height="{bh:.1f}" '
                f'fill="{color}"><title>{html.escape(label)}: {v:.3%}</title></rect>'
            )
        parts.append(
            f'<text x="{x + bar:.1f}" y="{height + 14}" font-size="9" text-anchor="middle">'
            f"{html.escape(_axis_label(label))}</text>"
        )
    parts.append("</svg>")
    return "".join(parts)


def _card(f: FeatureDrift) -> str:
    verdict = '<span class="tag bad">DRIFT</span>' if f.drifted else '<span class="tag ok">no drift</span>'
    rows = "".join(
        f"<tr><td>{html.escape(name)}</td><td>{_fmt(r.statistic)}</td><td>{_fmt(r.p_value)}</td>"
        f"<td>{_fmt(r.effect)} ({html.escape(r.effect_name)})</td><td>{_fmt(r.threshold)}</td>"
        f"<td>{'drift' if r.drifted else ''}</td></tr>"
        for name, r in f.statistics.items()
    )
    r = f.result
    return (
        f'<div class="card"><h2>{html.escape(f.name)} <small>({html.escape(f.kind)})</small>{verdict}</h2>'
        f"<div>verdict by <b>{html.escape(r.test)}</b>: p = {_fmt(r.p_value)}, adjusted p = "
        f"{_fmt(r.adjusted_p_value)}, {html.escape(r.effect_name)} = {_fmt(r.effect)} "
        f"(threshold {_fmt(r.threshold)}); rows {f.rows}, missing {f.missing}</div>"
        + (
            f'<div class="note">impact: {html.escape(str((f.impact or {}).get("message")))}</div>'
            if _said(f.impact)
            else ""
        )
        + f'<div class="legend"><span style="background:{_REF}"></span>reference'
        f'<span style="background:{_CUR}"></span>current</div>{_bars(f)}'
        "<table><tr><th>test</th><th>statistic</th><th>p-value</th><th>effect</th><th>threshold</th>"
        f"<th></th></tr>{rows}</table></div>"
    )


def render_html(report: DriftReport, *, title: str = "Drift report", summary: Headline | None = None) -> str:
    """The report as one HTML page (no external assets); the headline is green only without findings."""
    d = report.dataset
    summary = summary or headline(report)
    cls = "ok" if summary.ok else "bad"
    listed = "".join(f"<li>{html.escape(f.message)}</li>" for f in summary.findings)
    head = (
        f"Dataset {'DRIFTED' if d.drifted else 'stable'}: {d.n_drifted} of {d.n_features} features drifted "
        f"(share {d.share:.0%}, rule >= {d.drift_share:.0%}, {d.correction} at alpha {d.alpha}); "
        f"{report.rows} current rows vs {report.reference_rows} reference rows."
    )
    quality = "".join(
        f"<tr><td>{html.escape(q.feature)}</td><td>{q.check}</td><td>{q.count}</td><td>{q.rate:.3%}</td>"
        f"<td>{q.expected_rate:.3%}</td></tr>"
        for q in report.quality
        if q.flagged
    )
    extra = [x for x in (report.prediction, *report.outputs, report.multivariate) if x is not None]
    perf = ""
    if report.performance or report.estimated_performance:
        keys = performance_keys(report)
        cells = "".join(
            f"<tr><td>{k}</td><td>{_fmt((report.reference_performance or {}).get(k))}</td>"
            f"<td>{_fmt((report.performance or {}).get(k))}</td>"
            f"<td>{_fmt((report.estimated_performance or {}).get(k))}</td></tr>"
            for k in keys
        )
        perf = (
            '<div class="card"><h2>Performance</h2><table><tr><th>metric</th><th>reference</th>'
            f"<th>realised (labels)</th><th>estimated ({report.estimate_method})</th></tr>{cells}"
            "</table></div>"
        )
    return (
        f'<!doctype html><html lang="en"><head><meta charset="utf-8"><title>{html.escape(title)}</title>'
        f"<style>{_CSS}</style></head><body><h1>{html.escape(title)}</h1>"
        f'<div class="summary {cls}"><div>{html.escape(summary.text)}</div>'
        + (f'<ul class="findings">{listed}</ul>' if listed else "")
        + f'<div class="detail">{html.escape(head)}</div></div>'
        + _harm(report)
        + _summary_table(report)
        + _segments(report)
        + _weak_slices(report)
        + "".join(_card(f) for f in extra)
        + perf
        + (
            f'<div class="card"><h2>Data quality flags</h2><table><tr><th>feature</th><th>check</th>'
            f"<th>count</th><th>rate</th><th>expected</th></tr>{quality}</table></div>"
            if quality
            else ""
        )
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
        f"{html.escape(str(h.get('metric')))} {_fmt(h.get('value'))}{bounds}): {html.escape(line)}</div>"
    )


def _attribution_note(report: DriftReport) -> str:
    a = report.attribution
    if not a:
        return ""
    fit = a.get("surrogate_fit") or {}
    how = (
        f"a surrogate of the model's answers ({html.escape(str(fit.get('metric')))} "
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
        f"{html.escape(str(a.get('metric')))} change ({_fmt(a.get('change'))}) each drifted feature's shift "
        f"explains, with bounds from {_fmt(a.get('resamples'))} resamples, asked of {how}.</div>"
    )


def _summary_table(report: DriftReport) -> str:
    """Every feature: verdict, effect, impact (when the report has an attribution), by impact then drift; not
    on a report stored before harm, attribution, segments and weak slices (it renders as it did)."""
    explained = report.harm or report.attribution or report.segments or report.weak_slices
    rows = feature_summary(report) if explained else []
    if not rows:
        return ""
    attributed = report.attribution is not None
    cells = "".join(
        f"<tr><td>{html.escape(r['name'])}</td><td>{'DRIFT' if r['drifted'] else 'ok'}</td>"
        f'<td class="num">{_fmt(r["effect"])}</td><td>{html.escape(str(r["effect_name"]))}</td>'
        + (f"<td>{_impact_cell(r)}</td>" if attributed else "")
        + "</tr>"
        for r in rows
    )
    harmless = "".join(
        f"<li>{html.escape(str(r['impact']['message']))}</li>"
        for r in rows
        if r["drifted"] and r["impact"] is not None and r["impact"]["harmless"] and _said(r["impact"])
    )
    return (
        '<div class="card" id="summary"><h2>Features</h2>'
        + _attribution_note(report)
        + "<table><tr><th>feature</th><th>verdict</th><th>effect</th><th>effect size</th>"
        + ("<th>impact</th>" if attributed else "")
        + f"</tr>{cells}</table>"
        + (f'<div class="note">Harmless drift:</div><ul class="harmless">{harmless}</ul>' if harmless else "")
        + "</div>"
    )


def _segment_row(s: dict[str, Any]) -> str:
    flagged = bool(s.get("flagged"))
    drifted = ", ".join(map(str, (s.get("drift") or {}).get("features") or [])) or "-"
    reasons = "; ".join(map(str, s.get("reasons") or []))
    return (
        ('<tr class="flag">' if flagged else "<tr>") + f"<td>{html.escape(str(s.get('segment')))}</td>"
        f'<td class="num">{_fmt(s.get("rows"))}</td><td class="num">{_pct(s.get("share"))}</td>'
        f"<td>{html.escape(str(s.get('metric')))} ({html.escape(estimate_label(s.get('estimate')))})</td>"
        f'<td class="num">{_fmt(s.get("reference"))}</td><td class="num">{_fmt(s.get("current"))}</td>'
        f'<td class="num">{_fmt(s.get("change"))}</td><td>{html.escape(drifted)}</td>'
        f"<td>{('FLAGGED: ' + html.escape(reasons)) if flagged else ''}</td></tr>"
    )


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
        f'<tr><td>{html.escape(str(x.get("slice")))}</td><td class="num">{_fmt(x.get("rows"))}</td>'
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
        f"{html.escape(str(w.get('metric')))} by slice against its overall {_fmt(w.get('overall'))}, from "
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
