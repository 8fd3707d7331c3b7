"""Rule kinds as pure functions: a drift report (``DriftReport.as_dict()``) or health results in, findings.

:func:`evaluate` answers, for one rule, a list of :class:`Finding` (one per alert the rule can raise:
one for most kinds, one per feature for ``feature_drift``/``data_quality`` with ``feature: "*"``), or
``None`` when the report cannot say (no labels yet for a realised-performance rule, no such feature, no
such health check): the rule's alerts then keep their state. :data:`DEFAULT_RULES` apply to every model
without rules of its own (documented in docs/alerts.md).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from alerts.specs import LOWER_IS_BETTER, Kind, RuleSpec, rule_params
from core.numbers import finite_float
from monitors.findings import causes_text
from monitors.harm import NAMES as HARM_NAMES
from monitors.horizon import worse_than

if TYPE_CHECKING:
    from core.health import CheckResult


@dataclass(frozen=True)
class Finding:
    """What one rule found for one alert: active or not, the measured value, the evidence, extra labels."""

    active: bool
    value: float | None
    evidence: dict[str, Any]
    labels: dict[str, str] = field(default_factory=dict)  # feature / check of per-item alerts


def _rule(name: str, kind: Kind, **values: Any) -> RuleSpec:
    spec = RuleSpec(name=name, kind=kind, **values)
    return spec.model_copy(update={"params": rule_params(kind, spec.params)})


DEFAULT_RULES: tuple[RuleSpec, ...] = (
    _rule("harmful_drift", Kind.HARMFUL_DRIFT, severity="critical", actions=["notify", "retrain"]),
    _rule("dataset_drift", Kind.DATASET_DRIFT, severity="warning"),
    _rule("feature_drift", Kind.FEATURE_DRIFT, severity="info", params={"feature": "*"}),
    _rule("prediction_drift", Kind.PREDICTION_DRIFT, severity="warning"),
    _rule(
        "performance_drop",
        Kind.PERFORMANCE,
        severity="critical",
        params={"metric": "roc_auc"},
    ),
    _rule(
        "estimated_performance_drop",
        Kind.ESTIMATED_PERFORMANCE,
        severity="warning",
        params={"metric": "roc_auc"},
    ),
    _rule(
        "unseen_categories",
        Kind.DATA_QUALITY,
        severity="warning",
        params={"check": "unseen_category", "feature": "*"},
    ),
    _rule("concept_drift", Kind.CONCEPT_DRIFT, severity="warning"),
    _rule("model_unhealthy", Kind.HEALTH, severity="critical", for_runs=2, params={"check": "model:{model}"}),
    _rule("prediction_log_loss", Kind.HEALTH, severity="critical", params={"check": "prediction_log"}),
    _rule("retrain_rejected", Kind.RETRAIN_REJECTED, severity="warning"),
)


def _test_evidence(item: Mapping[str, Any]) -> dict[str, Any]:
    r = item.get("result") or {}
    return {
        "feature": item.get("name"),
        "test": r.get("test"),
        "statistic": r.get("statistic"),
        "p_value": r.get("p_value"),
        "adjusted_p_value": r.get("adjusted_p_value"),
        "effect": r.get("effect"),
        "effect_name": r.get("effect_name"),
        "threshold": r.get("threshold"),
        "alpha": r.get("alpha"),
    }


def _dataset(report: Mapping[str, Any]) -> list[Finding] | None:
    d = report.get("dataset")
    if not d:
        return None
    drifted = [f.get("name") for f in report.get("features") or [] if f.get("drifted")]
    evidence = {
        "share": d.get("share"),
        "n_drifted": d.get("n_drifted"),
        "n_features": d.get("n_features"),
        "drift_share": d.get("drift_share"),
        "drifted_features": drifted[:20],
    }
    return [Finding(bool(d.get("drifted")), finite_float(d.get("share")), evidence)]


def _feature(report: Mapping[str, Any], params: Mapping[str, Any]) -> list[Finding] | None:
    features = report.get("features") or []
    wanted = params.get("feature", "*")
    if wanted != "*":
        features = [f for f in features if f.get("name") == wanted]
        if not features:
            return None
    return [
        Finding(
            bool(f.get("drifted")),
            finite_float((f.get("result") or {}).get("statistic")),
            _test_evidence(f),
            {"feature": str(f.get("name"))},
        )
        for f in features
    ]


def _prediction(report: Mapping[str, Any]) -> list[Finding] | None:
    p = report.get("prediction")
    if not p:
        return None
    evidence = _test_evidence(p)
    evidence.pop("feature")
    return [Finding(bool(p.get("drifted")), finite_float((p.get("result") or {}).get("statistic")), evidence)]


def _performance(
    current: Mapping[str, Any] | None,
    reference: Mapping[str, Any] | None,
    params: Mapping[str, Any],
    limits: Mapping[str, Any] | None,
) -> list[Finding] | None:
    if not current:
        return None
    metric = str(params.get("metric", "roc_auc"))
    if metric == "roc_auc" and metric not in current:  # the default on a model of another task: its own
        metric = next((m for m in TASK_METRICS if m in current), metric)
    value = finite_float(current.get(metric))
    if value is None:
        return None
    ref = finite_float((reference or {}).get(metric))
    evidence: dict[str, Any] = {
        "metric": metric,
        "value": value,
        "reference": ref,
        "drop": None if ref is None else ref - value,
        "rows": current.get("rows"),
    }
    if "label_coverage" in current:
        evidence["label_coverage"] = current.get("label_coverage")
    below, above = finite_float(params.get("below")), finite_float(params.get("above"))
    if below is not None:
        evidence["below"] = below
        return [Finding(value < below, value, evidence)]
    if above is not None:
        evidence["above"] = above
        return [Finding(value > above, value, evidence)]
    margin = finite_float(params.get("margin"))
    limit = finite_float((limits or {}).get(metric)) if margin is None else None
    if ref is None:
        return None
    if limit is not None:  # beyond the variability of the reference's own chunks (monitors/horizon.py)
        evidence["limit"] = limit
        return [Finding(worse_than(metric, value, limit), value, evidence)]
    margin = DEFAULT_MARGIN if margin is None else margin
    evidence["margin"] = margin
    if metric in LOWER_IS_BETTER:  # worse is higher; the margin is a share of the reference's value
        evidence["drop"] = ref - value
        return [Finding(value - ref > margin * abs(ref), value, evidence)]
    return [Finding(ref - value > margin, value, evidence)]


DEFAULT_MARGIN = 0.05
"""A rule without a bound compares with the report's limits; on a report without them (a profile built before
the reference's chunks were measured) it allows this margin."""
TASK_METRICS = ("macro_f1", "rmse")
"""What the default ``roc_auc`` stands for on a multi-class or regression model (the first its report has)."""


def _quality(report: Mapping[str, Any], params: Mapping[str, Any]) -> list[Finding] | None:
    check, wanted = params.get("check"), params.get("feature", "*")
    above = finite_float(params.get("above"))  # None: the report's verdict (flagged)
    checks = [q for q in report.get("quality") or [] if q.get("check") == check]
    if wanted != "*":
        checks = [q for q in checks if q.get("feature") == wanted]
        if not checks:
            return None
    out = []
    for q in checks:
        rate = finite_float(q.get("rate")) or 0.0
        evidence = {**q, "above": above}
        active = bool(q.get("flagged")) if above is None else rate > above
        out.append(Finding(active, rate, evidence, {"feature": str(q.get("feature")), "check": str(check)}))
    return out


def _concept(report: Mapping[str, Any]) -> list[Finding] | None:
    c = report.get("concept_drift")
    if not c:
        return None
    alarms = list(c.get("alarms") or [])
    evidence = {**c, "alarms": alarms[:5], "n_alarms": len(alarms)}
    return [Finding(bool(c.get("drifted")), float(len(alarms)), evidence)]


SEGMENT_ESTIMATES = {
    Kind.PERFORMANCE: frozenset({"realised"}),
    Kind.ESTIMATED_PERFORMANCE: frozenset({"cbpe", "dle"}),
}
"""The segment figures a performance rule reads (a ``harmful_drift`` rule reads either)."""


def _segment_evidence(row: Mapping[str, Any]) -> dict[str, Any]:
    keys = ("segment", "feature", "value", "low", "high", "rows", "share", "metric", "estimate")
    evidence = {k: row.get(k) for k in keys if k in row}
    evidence.update(
        {k: row.get(k) for k in ("reference", "current", "change")},
        drifted_features=list((row.get("drift") or {}).get("own") or [])[:20],
        p_value=(row.get("drift") or {}).get("p_value"),
        reasons="; ".join(str(r) for r in row.get("reasons") or []),
    )
    return evidence


def _segment_active(kind: Kind, row: Mapping[str, Any], params: Mapping[str, Any]) -> bool | None:
    """Whether a segment's own change is what the rule watches; None: the segment has no such figure."""
    own = list((row.get("drift") or {}).get("own") or [])
    if kind is Kind.DATASET_DRIFT:
        return bool(own)
    if kind is Kind.FEATURE_DRIFT:
        wanted = params.get("feature", "*")
        return bool(own) if wanted == "*" else wanted in own
    if kind in SEGMENT_ESTIMATES and row.get("estimate") not in SEGMENT_ESTIMATES[kind]:
        return None
    metric, asked = str(row.get("metric")), str(params.get("metric", "roc_auc"))
    if row.get("estimate") is None or (
        asked != metric and not (asked == "roc_auc" and metric in TASK_METRICS)
    ):
        return None  # the segments measure their task's metric (monitors/segments.py) only
    if any(params.get(k) is not None for k in ("below", "above", "margin")):
        found = _performance(
            {"rows": row.get("rows"), metric: row.get("current")},
            {metric: row.get("reference")},
            {**params, "metric": metric},
            None,
        )
        return None if not found else found[0].active
    return bool(row.get("worse"))


def _segments(spec: RuleSpec, report: Mapping[str, Any]) -> list[Finding] | None:
    """One finding per judged segment (``segment: "*"``) or for the one named, from ``report["segments"]``;
    None when the report has no such segment."""
    wanted = spec.params.get("segment")
    rows = [r for r in report.get("segments") or [] if r.get("judged")]
    if wanted != "*":
        rows = [r for r in rows if r.get("segment") == wanted]
    if not rows:
        return None
    out = []
    for row in rows:
        active = _segment_active(spec.kind, row, spec.params)
        if active is None:
            continue
        drifted = float(len((row.get("drift") or {}).get("own") or []))
        value = (
            finite_float(row.get("current"))
            if spec.kind not in (Kind.DATASET_DRIFT, Kind.FEATURE_DRIFT)
            else drifted
        )
        labels = {"segment": str(row.get("segment"))}
        if spec.kind is Kind.FEATURE_DRIFT and spec.params.get("feature", "*") != "*":
            labels["feature"] = str(spec.params["feature"])
        out.append(Finding(active, value, _segment_evidence(row), labels))
    return out or None


HARM_EVIDENCE = (
    "estimate", "metric", "value", "reference", "change", "tolerance", "limit", "lower", "upper", "level",
    "rows", "message",
)  # fmt: skip
"""What a ``harmful_drift`` alert's evidence carries of the report's ``harm`` (monitors/harm.py)."""


def _harm(report: Mapping[str, Any]) -> list[Finding] | None:
    h = report.get("harm")
    if not isinstance(h, Mapping) or "harmful" not in h:
        return None
    evidence = {key: h.get(key) for key in HARM_EVIDENCE}
    return [Finding(bool(h.get("harmful")), finite_float(h.get("value")), evidence)]


def evaluate(spec: RuleSpec, report: Mapping[str, Any]) -> list[Finding] | None:
    """The findings of a monitor-run rule on a report dict; None when the report cannot say. A rule with a
    ``segment`` param reads the report's segments (:func:`_segments`)."""
    p = spec.params
    if p.get("segment") is not None:
        return _segments(spec, report)
    match spec.kind:
        case Kind.DATASET_DRIFT:
            return _dataset(report)
        case Kind.FEATURE_DRIFT:
            return _feature(report, p)
        case Kind.PREDICTION_DRIFT:
            return _prediction(report)
        case Kind.PERFORMANCE:
            return _performance(
                report.get("performance"),
                report.get("reference_performance"),
                p,
                report.get("performance_limits"),
            )
        case Kind.ESTIMATED_PERFORMANCE:
            return _performance(
                report.get("estimated_performance"),
                report.get("reference_performance"),
                p,
                report.get("estimated_performance_limits"),
            )
        case Kind.DATA_QUALITY:
            return _quality(report, p)
        case Kind.CONCEPT_DRIFT:
            return _concept(report)
        case Kind.HARMFUL_DRIFT:
            return _harm(report)
    return None


def health_check_name(spec: RuleSpec, model_name: str) -> str:
    """The health check a ``health`` rule watches for ``model_name``."""
    return str(spec.params.get("check", "model:{model}")).replace("{model}", model_name)


def evaluate_health(
    spec: RuleSpec, results: Mapping[str, CheckResult], model_name: str
) -> list[Finding] | None:
    """The finding of a ``health`` rule on a health pass (results: name -> CheckResult); None without it."""
    if spec.kind is not Kind.HEALTH:
        return None
    name = health_check_name(spec, model_name)
    r = results.get(name)
    if r is None:
        return None
    evidence = {"check": name, "ok": bool(r.ok), "detail": str(r.detail), "value": finite_float(r.value)}
    return [Finding(not r.ok, finite_float(r.value), evidence, {"check": name})]


# --- annotations --------------------------------------------------------------------------------------------


def _pct(v: Any) -> str:
    n = finite_float(v)
    return "?" if n is None else f"{n:.0%}"


def _g(v: Any, fmt: str = ".3g") -> str:
    n = finite_float(v)
    return "?" if n is None else format(n, fmt)


def default_summary(spec: RuleSpec, model_name: str, finding: Finding) -> str:
    """A one-line summary of a finding when the rule has no ``summary`` annotation."""
    e = finding.evidence
    if "segment" in finding.labels:
        return f"{model_name}: segment {finding.labels['segment']}: {e.get('reasons') or spec.name}"
    match spec.kind:
        case Kind.DATASET_DRIFT:
            return (
                f"{model_name}: the input data drifted ({_pct(e.get('share'))} of features: "
                f"{', '.join(map(str, e.get('drifted_features') or [])) or 'none'})"
            )
        case Kind.FEATURE_DRIFT:
            return (
                f"{model_name}: feature {e.get('feature')} drifted ({e.get('test')} {_g(e.get('statistic'))})"
            )
        case Kind.PREDICTION_DRIFT:
            return f"{model_name}: the predictions drifted ({e.get('test')} {_g(e.get('statistic'))})"
        case Kind.PERFORMANCE | Kind.ESTIMATED_PERFORMANCE:
            which = "realized" if spec.kind is Kind.PERFORMANCE else "estimated"
            if "below" in e or "above" in e:
                side = "below" if "below" in e else "above"
                bound = f"{side} {_g(e.get(side))}"
            elif e.get("metric") in LOWER_IS_BETTER:
                rise = -(finite_float(e.get("drop")) or 0.0)
                bound = f"{_g(rise, '.3g')} above the reference {_g(e.get('reference'), '.4g')}"
            else:
                bound = f"{_g(e.get('drop'), '.3f')} below the reference {_g(e.get('reference'), '.3f')}"
            return f"{model_name}: {which} {e.get('metric')} {_g(e.get('value'), '.3f')}, {bound}"
        case Kind.DATA_QUALITY:
            return f"{model_name}: {_pct(e.get('rate'))} of {e.get('feature')} fail {e.get('check')} " + (
                f"(expected {_pct(e.get('expected_rate'))})"
                if e.get("above") is None
                else f"(above {_pct(e.get('above'))})"
            )
        case Kind.CONCEPT_DRIFT:
            return f"{model_name}: concept drift ({e.get('detector')}: {e.get('n_alarms')} alarms)"
        case Kind.HARMFUL_DRIFT:
            change = finite_float(e.get("change"))
            side = "above" if (change or 0.0) > 0 else "below"
            return (
                f"{model_name}: harmful drift: {HARM_NAMES.get(str(e.get('estimate')), e.get('estimate'))} "
                f"{e.get('metric')} {_g(e.get('value'), '.3f')}, {_g(abs(change or 0.0), '.3f')} {side} the "
                f"reference {_g(e.get('reference'), '.3f')} (tolerance {_g(e.get('tolerance'))})"
            )
        case Kind.HEALTH:
            return f"{model_name}: health check {e.get('check')} fails: {e.get('detail')}"
        case Kind.RETRAIN_REJECTED:
            return f"{model_name}: the validation gate rejected a retrained candidate ({e.get('check')})"
    return f"{model_name}: {spec.name}"


class _Keep(dict[str, Any]):
    def __missing__(self, key: str) -> str:
        return "{" + key + "}"


MAX_RENDERED = 4096  # characters of one rendered annotation (a long label value is cut, not carried)


def render(template: str, context: Mapping[str, Any]) -> str:
    """``template`` with ``{name}`` (and ``{value:.3f}``) filled from ``context``; unknown names stay; at
    most :data:`MAX_RENDERED` characters."""
    try:
        text = template.format_map(_Keep(context))
    except (ValueError, TypeError, IndexError, KeyError, AttributeError):
        text = template
    return text if len(text) <= MAX_RENDERED else text[: MAX_RENDERED - 1] + "…"


def render_annotations(spec: RuleSpec, model_name: str, finding: Finding) -> dict[str, str]:
    """The rule's annotations rendered for a finding; ``summary`` defaults to :func:`default_summary`."""
    context: dict[str, Any] = {
        k: v for k, v in finding.evidence.items() if isinstance(v, str | int | float) or v is None
    }
    causes = causes_text(finding.evidence.get("causes") or [])  # the report's top causes (alerts/causes.py)
    context.update(finding.labels, causes=causes)
    context.update(model=model_name, rule=spec.name, severity=spec.severity, value=finding.value)
    out = {k: render(v, context) for k, v in spec.annotations.items()}
    out.setdefault("summary", default_summary(spec, model_name, finding))
    if causes:  # client text (feature names): cut, never read as a template
        out.setdefault("causes", causes if len(causes) <= MAX_RENDERED else causes[: MAX_RENDERED - 1] + "…")
    return out
