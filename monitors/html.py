"""A self-contained HTML drift report: per-feature reference vs current bars, statistics, verdicts."""

from __future__ import annotations

import html
import re
from typing import Any

from monitors.findings import Headline, headline
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
"""
_REF, _CUR = "#8c959f", "#0969da"


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
        f'<div class="card"><h2>{html.escape(f.name)} <small>({f.kind})</small>{verdict}</h2>'
        f"<div>verdict by <b>{html.escape(r.test)}</b>: p = {_fmt(r.p_value)}, adjusted p = "
        f"{_fmt(r.adjusted_p_value)}, {html.escape(r.effect_name)} = {_fmt(r.effect)} "
        f"(threshold {_fmt(r.threshold)}); rows {f.rows}, missing {f.missing}</div>"
        f'<div class="legend"><span style="background:{_REF}"></span>reference'
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
