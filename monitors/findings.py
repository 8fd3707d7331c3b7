"""Every finding of a drift report in one list, and the headline that summarises them (pure).

A report is "green" only when nothing stands: no drifted feature, prediction or multivariate detector, no
flagged data-quality check, no realised or estimated metric below the reference beyond its limit (the
variability of the reference's own chunks, :mod:`monitors.horizon`; the margin for a profile without it),
no concept-drift alarm, and no extra finding a caller adds (the firing alerts of the model, from
``alerts/``). The HTML report, ``GET /v1/models/{name}/drift`` and the terminal table all use this one
summary, so they can never disagree.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass
from typing import Any

from monitors.horizon import worse_than
from monitors.report import DriftReport

METRICS = ("accuracy", "precision", "recall", "f1", "roc_auc")
DEFAULT_MARGIN = 0.05  # a metric this far below the reference is a finding


@dataclass(frozen=True)
class Finding:
    """One thing an on-call engineer should look at."""

    kind: str  # feature_drift | prediction_drift | multivariate_drift | data_quality | performance |
    # estimated_performance | concept_drift | alert
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
    if report.concept_drift and report.concept_drift.get("drifted"):
        out.append(
            Finding("concept_drift", "errors", "the error rate changed (concept drift detector alarm)")
        )
    return out


@dataclass(frozen=True)
class Headline:
    """The one-line verdict of a report: ``ok`` only when no finding stands."""

    ok: bool
    text: str
    findings: list[Finding]

    def as_dict(self) -> dict[str, Any]:
        return {"ok": self.ok, "text": self.text, "findings": [f.as_dict() for f in self.findings]}


def headline(
    report: DriftReport, *, extra: Iterable[Finding] = (), margin: float = DEFAULT_MARGIN
) -> Headline:
    """Summarise the report and any ``extra`` findings (e.g. firing alerts) in one line."""
    findings = [*report_findings(report, margin=margin), *extra]
    d = report.dataset
    dataset = (
        f"dataset {'DRIFTED' if d.drifted else 'stable'} ({d.n_drifted} of {d.n_features} features drifted)"
    )
    if not findings:
        return Headline(True, f"No findings: {dataset}; data quality, performance and alerts clear.", [])
    counts: dict[str, int] = {}
    for f in findings:
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
        "concept_drift": ("concept-drift alarm", "concept-drift alarms"),
        "alert": ("firing alert", "firing alerts"),
    }
    parts = [f"{n} {words.get(k, (k, k))[n > 1]}" for k, n in counts.items()]
    return Headline(False, f"Attention, {len(findings)} finding(s): {', '.join(parts)}; {dataset}.", findings)


def finding_from_dict(data: Mapping[str, Any]) -> Finding:
    """A finding as another package hands it over (``kind``, ``subject``, ``message``)."""
    return Finding(str(data["kind"]), str(data["subject"]), str(data["message"]))
