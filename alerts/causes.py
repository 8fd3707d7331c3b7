"""The top causes a report-based alert carries (pure): the drifted features that explain most of the
performance change (``report.attribution``, :func:`monitors.findings.top_causes`), and for a
``harmful_drift`` alert the harm figure (``report.harm``).

Every finding of a monitor-run rule passes through :func:`with_causes` (``alerts.flows.evaluate_model``), so
each such alert's ``evidence`` holds ``causes`` (a report with an attribution: ``[]`` when no drifted
feature explains the change), a per-feature alert's ``impact`` (that feature's share), and a harmful-drift
alert's ``harm``; the rendered annotations gain ``causes`` in one line
(:func:`alerts.rules.render_annotations`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from alerts.rules import Finding
from monitors.findings import harm_summary, top_causes

HARMFUL_DRIFT = "harmful_drift"  # the rule kind whose alerts also carry the harm figure


def _feature_impact(report: Mapping[str, Any], name: str) -> dict[str, Any] | None:
    """A feature's impact as the report holds it: its own ``impact``, else its attribution entry."""
    for f in report.get("features") or []:
        if f.get("name") == name and f.get("impact"):
            return dict(f["impact"])
    for e in (report.get("attribution") or {}).get("features") or []:
        if e.get("name") == name:
            return dict(e)
    return None


def with_causes(kind: str, report: Mapping[str, Any], findings: list[Finding] | None) -> list[Finding] | None:
    """``findings`` of a rule of ``kind`` on ``report`` with the report's top causes in their evidence (and
    the harm figure for a ``harmful_drift`` rule); unchanged for a report without an attribution."""
    if findings is None:
        return None
    attribution = report.get("attribution")
    harmful = kind == HARMFUL_DRIFT and bool(report.get("harm"))
    if not attribution and not harmful:
        return findings
    causes = top_causes(attribution)
    out = []
    for finding in findings:
        evidence = dict(finding.evidence)
        if attribution:
            evidence.setdefault("causes", causes)
            feature = finding.labels.get("feature")
            impact = _feature_impact(report, feature) if feature else None
            if impact is not None:
                evidence.setdefault("impact", impact)
        if harmful:
            evidence.setdefault("harm", harm_summary(report.get("harm")))
        out.append(replace(finding, evidence=evidence))
    return out
