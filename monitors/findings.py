"""Every finding of a drift report in one list, and the headline that summarises them (pure).

A report is "green" only when nothing stands: no drifted feature, prediction or multivariate detector, no
flagged data-quality check, no realised or estimated metric below the reference beyond its limit (the
variability of the reference's own chunks, :mod:`monitors.horizon`; the margin for a profile without it),
no harmful drift (``report.harm``), no flagged segment, no concept-drift alarm, and no extra finding a
caller adds (the firing alerts of the model, from ``alerts/``). The HTML report, ``GET
/v1/models/{name}/drift`` and the terminal table all use this one summary, so they can never disagree; it
also holds every feature's line (verdict, effect, impact), the harm verdict and the top causes.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass, field
from typing import Any

from monitors.horizon import worse_than
from monitors.report import DriftReport

METRICS = ("accuracy", "precision", "recall", "f1", "roc_auc")
DEFAULT_MARGIN = 0.05  # a metric this far below the reference is a finding


@dataclass(frozen=True)
class Finding:
    """One thing an on-call engineer should look at."""

    kind: str  # feature_drift | prediction_drift | multivariate_drift | data_quality | performance |
    # estimated_performance | harmful_drift | segment | concept_drift | alert
    subject: str  # the feature, metric or alert name
    message: str  # one line, with the figures

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def _below(
    kind: str,
    label: str,
    current: Mapping[str, Any] | None,
    reference: Mapping[str, Any] | None,
    margin: float,
    limits: Mapping[str, float] | None = None,
) -> list[Finding]:
    """Metrics below the reference: beyond the report's limit of the metric (the reference chunks'
    variability) when it has one, else by more than ``margin``."""
    out: list[Finding] = []
    if not current or not reference:
        return out
    for metric in METRICS:
        now, ref = current.get(metric), reference.get(metric)
        if not isinstance(now, int | float) or not isinstance(ref, int | float) or now != now or ref != ref:
            continue
        limit = (limits or {}).get(metric)
        if limit is not None:
            if worse_than(metric, now, limit):
                out.append(
                    Finding(
                        kind,
                        metric,
                        f"{label} {metric} {now:.3f} is below the reference {ref:.3f} by {ref - now:.3f} "
                        f"(beyond its limit {limit:.3f})",
                    )
                )
            continue
        if ref - now > margin:
            out.append(
                Finding(
                    kind,
                    metric,
                    f"{label} {metric} {now:.3f} is below the reference {ref:.3f} by {ref - now:.3f} "
                    f"(margin {margin:g})",
                )
            )
    return out


def report_findings(report: DriftReport, *, margin: float = DEFAULT_MARGIN) -> list[Finding]:
    """The findings of one report, most important first: drift, quality, performance, concept drift."""
    out = [
        Finding(
            "feature_drift",
            f.name,
            f"{f.name} drifted ({f.result.test}: statistic {f.result.statistic:.3g}, "
            f"{f.result.effect_name} {f.result.effect:.3g})",
        )
        for f in report.features
        if f.drifted
    ]
    if report.prediction is not None and report.prediction.drifted:
        out.append(
            Finding("prediction_drift", report.prediction.name, "the prediction's distribution drifted")
        )
    if report.multivariate is not None and report.multivariate.drifted:
        out.append(
            Finding(
                "multivariate_drift", report.multivariate.name, "the joint distribution drifted (PCA error)"
            )
        )
    out += [
        Finding(
            "data_quality",
            f"{q.feature}:{q.check}",
            f"{q.check.replace('_', ' ')} in {q.feature}: {q.rate:.1%} of {q.rows} rows "
            f"(expected {q.expected_rate:.1%})",
        )
        for q in report.quality
        if q.flagged
    ]
    out += _below(
        "performance",
        "realised",
        report.performance,
        report.reference_performance,
        margin,
        report.performance_limits,
    )
    out += _below(
        "estimated_performance",
        "estimated",
        report.estimated_performance,
        report.reference_performance,
        margin,
        report.estimated_performance_limits,
    )
    if report.harm and report.harm.get("harmful"):
        subject = str(report.harm.get("metric", "performance"))
        out.append(Finding("harmful_drift", subject, harm_line(report) or "the drift hurts the model"))
    out += [
        Finding("segment", str(s.get("segment")), _segment_message(s))
        for s in report.segments
        if s.get("flagged")
    ]
    if report.concept_drift and report.concept_drift.get("drifted"):
        out.append(
            Finding("concept_drift", "errors", "the error rate changed (concept drift detector alarm)")
        )
    return out


ESTIMATES = {"realised": "realised (labels)", "cbpe": "estimated (CBPE)", "dle": "estimated (DLE)"}
MAX_CAUSES = 3  # the causes a headline, an alert and a webhook message carry


def _num(value: Any) -> float | None:
    """A finite number, else None (NaN, infinities, text, booleans)."""
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        return None
    return float(value)


def _g(value: Any, fmt: str = ".3f") -> str:
    n = _num(value)
    return "?" if n is None else format(n, fmt)


def estimate_label(estimate: Any) -> str:
    """How a figure was measured: ``realised (labels)``, ``estimated (CBPE)``, ``estimated (DLE)``;
    ``not measured`` without one (a segment with neither labels nor an estimate)."""
    if estimate is None:
        return "not measured"
    return ESTIMATES.get(str(estimate), str(estimate))


def harm_line(report: DriftReport) -> str | None:
    """One line on whether the drift hurts the model (``report.harm``'s message, else its figures); None
    without a harm verdict."""
    h = report.harm
    if not h:
        return None
    message = h.get("message")
    if isinstance(message, str) and message:
        return message
    verdict = "harmful" if h.get("harmful") else "not harmful"
    return (
        f"{verdict}: {estimate_label(h.get('estimate'))} {h.get('metric')} {_g(h.get('value'))} vs the "
        f"reference {_g(h.get('reference'))} (change {_g(h.get('change'), '+.3f')}, tolerance "
        f"{_g(h.get('tolerance'), 'g')})"
    )


def _segment_message(segment: Mapping[str, Any]) -> str:
    reasons = "; ".join(str(r) for r in segment.get("reasons") or [])
    return (
        f"segment {segment.get('segment')}: {estimate_label(segment.get('estimate'))} "
        f"{segment.get('metric')} "
        f"{_g(segment.get('current'))} vs the reference {_g(segment.get('reference'))} (change "
        f"{_g(segment.get('change'), '+.3f')})" + (f": {reasons}" if reasons else "")
    )


def _share_bounds(entry: Mapping[str, Any], change: float | None) -> tuple[float | None, float | None]:
    """The bounds of a feature's share: its effect's bounds over the whole change."""
    lower, upper = _num(entry.get("lower")), _num(entry.get("upper"))
    if change is None or change == 0 or lower is None or upper is None:
        return None, None
    a, b = sorted((lower / change, upper / change))
    return a, b


def _impacts(report: DriftReport) -> dict[str, dict[str, Any]]:
    """Each attributed feature's entry by name: its own ``impact``, else ``report.attribution``'s."""
    out = {str(e.get("name")): dict(e) for e in (report.attribution or {}).get("features") or []}
    out.update({f.name: dict(f.impact) for f in report.features if f.impact})
    return out


def _impact_summary(entry: Mapping[str, Any] | None, change: float | None) -> dict[str, Any] | None:
    if entry is None:
        return None
    low, high = _share_bounds(entry, change)
    return {
        "share": _num(entry.get("impact")),
        "share_lower": low,
        "share_upper": high,
        "effect": _num(entry.get("effect")),
        "lower": _num(entry.get("lower")),
        "upper": _num(entry.get("upper")),
        "harmless": bool(entry.get("harmless")),
        "message": entry.get("message"),
    }


def feature_summary(report: DriftReport) -> list[dict[str, Any]]:
    """Every feature in one line, ranked by impact (its signed share of the performance change) then drift:
    name, kind, verdict, effect size and its name, impact (None: not attributed), grouped (attributed with
    the rest)."""
    impacts = _impacts(report)
    attribution = report.attribution or {}
    change, grouped = _num(attribution.get("change")), set(attribution.get("grouped") or [])
    rows = [
        {
            "name": f.name,
            "kind": f.kind,
            "drifted": f.drifted,
            "effect": _num(f.result.effect),
            "effect_name": f.result.effect_name,
            "impact": _impact_summary(impacts.get(f.name), change),
            "grouped": f.name in grouped,
        }
        for f in report.features
    ]
    order = {id(r): i for i, r in enumerate(rows)}

    def rank(row: dict[str, Any]) -> tuple[float, bool, int]:
        share = (row["impact"] or {}).get("share")
        return (-(share or 0.0), not row["drifted"], order[id(row)])

    return sorted(rows, key=rank)


def top_causes(attribution: Mapping[str, Any] | None, *, n: int = MAX_CAUSES) -> list[dict[str, Any]]:
    """The ``n`` drifted features that explain most of the performance change (a positive share, not
    harmless), with their share, their part of the change and its bounds; [] without an attribution."""
    if not attribution:
        return []
    change = _num(attribution.get("change"))
    ranked = sorted(
        (
            e
            for e in attribution.get("features") or []
            if not e.get("harmless") and (_num(e.get("impact")) or 0.0) > 0
        ),
        key=lambda e: -(_num(e.get("impact")) or 0.0),
    )
    out = []
    for e in ranked[:n]:
        low, high = _share_bounds(e, change)
        out.append(
            {
                "feature": str(e.get("name")),
                "impact": _num(e.get("impact")),
                "impact_lower": low,
                "impact_upper": high,
                "effect": _num(e.get("effect")),
                "lower": _num(e.get("lower")),
                "upper": _num(e.get("upper")),
                "metric": attribution.get("metric"),
                "estimate": attribution.get("estimate"),
            }
        )
    return out


def causes_text(causes: Iterable[Mapping[str, Any]]) -> str:
    """The causes in one line: ``income 93% [80%, 100%] of the estimated (CBPE) roc_auc change; ...``."""
    parts = []
    for c in causes:
        low, high = _num(c.get("impact_lower")), _num(c.get("impact_upper"))
        bounds = f" [{low:.0%}, {high:.0%}]" if low is not None and high is not None else ""
        parts.append(
            f"{c.get('feature')} {_g(c.get('impact'), '.0%')}{bounds} of the "
            f"{estimate_label(c.get('estimate'))} {c.get('metric')} change"
        )
    return "; ".join(parts)


def harm_summary(harm: Mapping[str, Any] | None) -> dict[str, Any] | None:
    """The harm verdict in brief: harmful or not, the estimate, the metric's value, reference, change and
    bounds, the tolerance, the message."""
    if not harm:
        return None
    keys = ("estimate", "metric", "value", "reference", "change", "tolerance", "lower", "upper")
    return {
        "harmful": bool(harm.get("harmful")),
        **{k: harm.get(k) if k in ("estimate", "metric") else _num(harm.get(k)) for k in keys},
        "message": harm.get("message"),
    }


@dataclass(frozen=True)
class Headline:
    """The one-line verdict of a report: ``ok`` only when no finding stands; with the summary of every
    feature (verdict, effect, impact), the harm verdict and the top causes."""

    ok: bool
    text: str
    findings: list[Finding]
    features: list[dict[str, Any]] = field(default_factory=list)
    harm: dict[str, Any] | None = None
    causes: list[dict[str, Any]] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        return {
            "ok": self.ok,
            "text": self.text,
            "findings": [f.as_dict() for f in self.findings],
            "features": self.features,
            "harm": self.harm,
            "causes": self.causes,
        }


def headline(
    report: DriftReport, *, extra: Iterable[Finding] = (), margin: float = DEFAULT_MARGIN
) -> Headline:
    """Summarise the report and any ``extra`` findings (e.g. firing alerts) in one line: each finding counted
    once, the firing alerts (which restate findings, or add what the report cannot see) counted apart."""
    findings = [*report_findings(report, margin=margin), *extra]
    summary: dict[str, Any] = {
        "features": feature_summary(report),
        "harm": harm_summary(report.harm),
        "causes": top_causes(report.attribution),
    }
    d = report.dataset
    dataset = (
        f"dataset {'DRIFTED' if d.drifted else 'stable'} ({d.n_drifted} of {d.n_features} features drifted)"
    )
    if not findings:
        return Headline(
            True, f"No findings: {dataset}; data quality, performance and alerts clear.", [], **summary
        )
    own = [f for f in findings if f.kind != "alert"]  # a firing alert restates a finding: counted apart
    alerts = len(findings) - len(own)
    counts: dict[str, int] = {}
    for f in own:
        counts[f.kind] = counts.get(f.kind, 0) + 1
    words = {
        "feature_drift": ("drifted feature", "drifted features"),
        "prediction_drift": ("prediction drift", "prediction drift"),
        "multivariate_drift": ("multivariate drift", "multivariate drift"),
        "data_quality": ("data-quality alarm", "data-quality alarms"),
        "performance": ("realised metric below the reference", "realised metrics below the reference"),
        "estimated_performance": (
            "estimated metric below the reference",
            "estimated metrics below the reference",
        ),
        "harmful_drift": ("harmful drift", "harmful drift"),
        "segment": ("flagged segment", "flagged segments"),
        "concept_drift": ("concept-drift alarm", "concept-drift alarms"),
        "alert": ("firing alert", "firing alerts"),
    }
    parts = [f"{n} {words.get(k, (k, k))[n > 1]}" for k, n in counts.items()]
    said = f"{len(own)} finding{'s' if len(own) != 1 else ''}: {', '.join(parts)}; " if own else ""
    firing = f"; {alerts} {words['alert'][alerts > 1]}" if alerts else ""
    return Headline(False, f"Attention, {said}{dataset}{firing}.", findings, **summary)


def finding_from_dict(data: Mapping[str, Any]) -> Finding:
    """A finding as another package hands it over (``kind``, ``subject``, ``message``)."""
    return Finding(str(data["kind"]), str(data["subject"]), str(data["message"]))
