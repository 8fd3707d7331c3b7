"""The drift report: per-feature results sorted by severity, dataset verdict, quality, performance."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from monitors.drift.base import Rule, TestResult, _json_number
from monitors.drift.catalog import reported_names
from monitors.quality import QualityCheck
from registry.schema import FeatureKind


@dataclass(frozen=True)
class Histogram:
    """Reference and current proportions on shared bins (for display)."""

    labels: list[str]
    reference: list[float]
    current: list[float]


@dataclass(frozen=True)
class FeatureDrift:
    """The verdict of one feature (or of the prediction, or of the multivariate detector)."""

    name: str
    kind: str
    result: TestResult
    statistics: dict[str, TestResult]
    rows: int
    missing: int
    histogram: Histogram
    impact: dict[str, Any] | None = None  # its share of the performance change (monitors/attribution.py)

    @property
    def drifted(self) -> bool:
        return self.result.drifted

    def as_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "kind": self.kind,
            "drifted": self.drifted,
            "result": self.result.as_dict(),
            "statistics": {k: v.as_dict() for k, v in self.statistics.items()},
            "rows": self.rows,
            "missing": self.missing,
            "histogram": _json_number(self.histogram.__dict__),
            **({"impact": self.impact} if self.impact is not None else {}),
        }


@dataclass(frozen=True)
class DatasetDrift:
    """Dataset-level verdict: share of drifted features against ``drift_share``."""

    drifted: bool
    n_features: int
    n_drifted: int
    share: float
    drift_share: float
    correction: str
    alpha: float


@dataclass
class DriftReport:
    """Everything one monitor run found."""

    rows: int
    reference_rows: int
    dataset: DatasetDrift
    features: list[FeatureDrift]
    prediction: FeatureDrift | None = None
    multivariate: FeatureDrift | None = None
    quality: list[QualityCheck] = field(default_factory=list)
    performance: dict[str, Any] | None = None
    estimated_performance: dict[str, Any] | None = None
    reference_performance: dict[str, Any] | None = None
    concept_drift: dict[str, Any] | None = None
    outputs: list[FeatureDrift] = field(default_factory=list)  # multi-class: each class's probability, the
    # predicted-class distribution
    performance_limits: dict[str, float] | None = None  # per metric, the realised value worse than the
    # reference beyond its chunks' variability (monitors/horizon.py); None: a profile without that spread
    estimated_performance_limits: dict[str, float] | None = None  # the same for the estimated metrics
    ignored_columns: list[str] = field(default_factory=list)  # offline: CURRENT's columns not compared
    harm: dict[str, Any] | None = None  # is the window's performance worse than the reference's beyond the
    # tolerance (monitors/harm.py); None: no performance figure to judge
    attribution: dict[str, Any] | None = None  # the performance change split between the drifted features
    # (monitors/attribution.py); None: nothing drifted, or no model or surrogate to ask
    segments: list[dict[str, Any]] = field(default_factory=list)  # per segment, ranked by the worst change
    # (monitors/segments.py)
    weak_slices: dict[str, Any] | None = None  # where the model is worst (monitors/slices.py)

    @property
    def estimate_method(self) -> str:
        """How the label-free figures were estimated: DLE for a regression, CBPE for a classifier."""
        return "DLE" if "rmse" in (self.estimated_performance or self.performance or {}) else "CBPE"

    @property
    def drifted(self) -> bool:
        return self.dataset.drifted

    def as_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "rows": self.rows,
            "reference_rows": self.reference_rows,
            "dataset": self.dataset.__dict__,
            "features": [f.as_dict() for f in self.features],
            "prediction": self.prediction.as_dict() if self.prediction else None,
            "multivariate": self.multivariate.as_dict() if self.multivariate else None,
            "quality": [q.as_dict() for q in self.quality],
            "performance": self.performance,
            "estimated_performance": self.estimated_performance,
            "reference_performance": self.reference_performance,
            "concept_drift": self.concept_drift,
        }
        if self.performance_limits:
            out["performance_limits"] = self.performance_limits
        if self.estimated_performance_limits:
            out["estimated_performance_limits"] = self.estimated_performance_limits
        if self.outputs:
            out["outputs"] = [f.as_dict() for f in self.outputs]
        if self.ignored_columns:
            out["ignored_columns"] = list(self.ignored_columns)
        for key in ("harm", "attribution", "weak_slices"):
            if getattr(self, key) is not None:
                out[key] = getattr(self, key)
        if self.segments:
            out["segments"] = list(self.segments)
        return dict(_json_number(out))


def _result_from_dict(d: dict[str, Any]) -> TestResult:
    def num(v: Any) -> float:
        return float("nan") if v is None else float(v)

    return TestResult(
        test=str(d["test"]),
        statistic=num(d.get("statistic")),
        p_value=d.get("p_value"),
        effect=num(d.get("effect")),
        effect_name=str(d.get("effect_name", "")),
        rule=Rule(d["rule"]),
        alpha=d.get("alpha"),
        threshold=d.get("threshold"),
        drifted=bool(d["drifted"]),
        adjusted_p_value=d.get("adjusted_p_value"),
        details=dict(d.get("details") or {}),
    )


def _feature_from_dict(d: dict[str, Any]) -> FeatureDrift:
    h = d["histogram"]
    # the order the engine reports them in (the prediction and the multivariate detector are numeric)
    kind = d["kind"] if d["kind"] in tuple(FeatureKind) else FeatureKind.NUMERIC
    order = reported_names(kind)

    def rank(name: str) -> tuple[int, str]:  # JSONB does not keep key order
        return (order.index(name) if name in order else len(order), name)

    return FeatureDrift(
        name=str(d["name"]),
        kind=str(d["kind"]),
        result=_result_from_dict(d["result"]),
        # JSONB does not keep key order: restore the order the engine reports them in
        statistics={k: _result_from_dict(d["statistics"][k]) for k in sorted(d["statistics"], key=rank)},
        rows=int(d["rows"]),
        missing=int(d["missing"]),
        histogram=Histogram(
            labels=list(h["labels"]),
            reference=[0.0 if v is None else float(v) for v in h["reference"]],
            current=[0.0 if v is None else float(v) for v in h["current"]],
        ),
        impact=d.get("impact"),
    )


def report_from_dict(data: dict[str, Any]) -> DriftReport:
    """Rebuild a report from :meth:`DriftReport.as_dict` output (e.g. a stored run)."""
    return DriftReport(
        rows=int(data["rows"]),
        reference_rows=int(data["reference_rows"]),
        dataset=DatasetDrift(**data["dataset"]),
        features=[_feature_from_dict(f) for f in data["features"]],
        prediction=_feature_from_dict(data["prediction"]) if data.get("prediction") else None,
        multivariate=_feature_from_dict(data["multivariate"]) if data.get("multivariate") else None,
        quality=[QualityCheck(**q) for q in data.get("quality", [])],
        performance=data.get("performance"),
        estimated_performance=data.get("estimated_performance"),
        reference_performance=data.get("reference_performance"),
        concept_drift=data.get("concept_drift"),
        outputs=[_feature_from_dict(f) for f in data.get("outputs") or []],
        performance_limits=data.get("performance_limits"),
        estimated_performance_limits=data.get("estimated_performance_limits"),
        ignored_columns=list(data.get("ignored_columns") or []),
        harm=data.get("harm"),
        attribution=data.get("attribution"),
        segments=list(data.get("segments") or []),
        weak_slices=data.get("weak_slices"),
    )
