"""The pure engine: sketch a window against a profile and evaluate it into a drift report.

:func:`evaluate` measures each feature with the function of its kind (:func:`_numeric_feature`,
:func:`_categorical_feature`), adjusts the p-values of all features together, then adds the prediction
(drift and performance) and the multivariate detector. Tests come from :mod:`monitors.drift.catalog`.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from core.config import Settings
from core.tabular import CodedColumn, Column, as_coded
from monitors.binning import GridCounts, cell_points
from monitors.config import FeatureOverride, MonitorConfig
from monitors.drift import catalog
from monitors.drift.base import DriftTest, Measurement, TestResult, adjust_p_values
from monitors.drift.categorical import CategoricalCounts, aligned, shown_category
from monitors.drift.numeric import NumericCounts, NumericDefault
from monitors.harm import assess
from monitors.horizon import performance_limits, run_alpha
from monitors.performance import (
    class_named,
    estimate_classification_metrics,
    estimate_regression_from_design,
    mean_design,
    metrics_from_counts,
    multiclass_estimate_from_counts,
    multiclass_from_counts,
)
from monitors.profile import OTHER_LEVELS, WORKERS, CategoricalProfile, NumericProfile, Profile
from monitors.quality import QualityCheck, good_turing_unseen, rate_check, violation_check
from monitors.report import DatasetDrift, DriftReport, FeatureDrift, Histogram
from monitors.sketch import MulticlassCounts, WindowSketch, split_missing
from registry.schema import FeatureKind, Task

CHUNK_ROWS: int = Settings.model_fields["monitor_chunk_rows"].default
"""Rows per chunk of :func:`sketch_columns`: the log readers' chunk (``predictions.windows.CHUNK_ROWS``), not
imported from there because that module loads SQLAlchemy, which the offline command needs not."""


def sketch_columns(
    *,
    profile: Profile,
    columns: Mapping[str, Column],
    predictions: np.ndarray | None = None,
    labels: np.ndarray | None = None,
    threshold: float = 0.5,
    chunk_rows: int = CHUNK_ROWS,
) -> WindowSketch:
    """Sketch in-memory columns chunk by chunk (memory bounded by ``chunk_rows``); text may be codes (text
    held as objects is coded once first, :func:`core.tabular.as_coded`).

    Each chunk's features (and the PCA error) are counted on up to :data:`monitors.profile.WORKERS` threads,
    each on its own (numpy's passes release the GIL): the same counts as one thread.

    A multi-class model's ``predictions`` are its ``[rows, K]`` vectors (``labels``: class indexes): the
    sketch counts the predicted class's probability as the prediction, and the vectors apart."""
    sketch = WindowSketch(threshold=threshold)
    columns = {k: as_coded(v if isinstance(v, CodedColumn) else np.asarray(v)) for k, v in columns.items()}
    n = len(next(iter(columns.values()))) if columns else (0 if predictions is None else len(predictions))
    vectors = predictions is not None and np.ndim(predictions) == 2
    if vectors and predictions is not None:
        sketch.multiclass = MulticlassCounts(int(np.shape(predictions)[1]))
    with ThreadPoolExecutor(max_workers=WORKERS, thread_name_prefix="sketch") as pool:
        for start in range(0, max(n, 1), chunk_rows):
            part = {k: v[start : start + chunk_rows] for k, v in columns.items()}
            p = None if predictions is None else predictions[start : start + chunk_rows]
            y = None if labels is None else labels[start : start + chunk_rows]
            if vectors and p is not None and sketch.multiclass is not None:
                sketch.multiclass.add(profile, p, np.full(len(p), np.nan) if y is None else y, sketch.errors)
                p = np.max(p, axis=1) if len(p) else np.zeros(0)
            sketch.update(profile, part, predictions=p, labels=y, pool=pool)
    return sketch


def _test_for(
    *, kind: FeatureKind, override: FeatureOverride | None, config: MonitorConfig
) -> DriftTest[Any]:
    """The configured test instance of one feature."""
    numeric = kind is FeatureKind.NUMERIC
    name = (override.test if override and override.test else None) or (
        config.numeric_test if numeric else config.categorical_test
    )
    cls = catalog.lookup(kind, name)
    threshold = override.threshold if override and override.threshold is not None else None
    if threshold is None:
        threshold = config.numeric_threshold if numeric else config.categorical_threshold
    alpha = override.alpha if override and override.alpha is not None else config.alpha
    return cls(alpha=alpha if cls.default_alpha is not None else None, threshold=threshold)


def _numeric_histogram(ref: NumericCounts, cur: NumericCounts) -> Histogram:
    r, c = ref.coarse().astype(np.float64), cur.coarse().astype(np.float64)
    edges = [f"{v:.4g}" for v in ref.cuts]
    labels = [f"<= {edges[0]}"] if edges else ["all"]
    labels += [f"({a}, {b}]" for a, b in zip(edges[:-1], edges[1:], strict=True)]
    if edges:
        labels.append(f"> {edges[-1]}")
    return Histogram(
        labels=labels,
        reference=(r / max(r.sum(), 1)).tolist(),
        current=(c / max(c.sum(), 1)).tolist(),
    )


def _categorical_histogram(ref: CategoricalCounts, cur: CategoricalCounts) -> Histogram:
    cats, r, c = aligned(ref, cur)
    return Histogram(
        labels=[shown_category(str(cat)) for cat in cats],
        reference=(r / max(r.sum(), 1)).tolist(),
        current=(c / max(c.sum(), 1)).tolist(),
    )


def _numeric_pair(ref_profile: NumericProfile, counts: GridCounts) -> tuple[NumericCounts, NumericCounts]:
    ref = NumericCounts.from_profile(ref_profile)
    return ref, NumericCounts.from_grid_counts(counts, reference=ref)


@dataclass(frozen=True)
class FeatureMeasurement:
    """One feature measured, before the p-values of all features are adjusted together."""

    name: str
    kind: FeatureKind
    test: DriftTest[Any]
    measurement: Measurement
    statistics: dict[str, TestResult]
    rows: int
    missing: int
    histogram: Histogram
    quality: tuple[QualityCheck, ...]

    def verdict(self, adjusted_p_value: float | None) -> FeatureDrift:
        """The feature's result once its p-value is adjusted."""
        return FeatureDrift(
            name=self.name,
            kind=self.kind.value,
            result=self.test.result(self.measurement, adjusted_p_value=adjusted_p_value),
            statistics=self.statistics,
            rows=self.rows,
            missing=self.missing,
            histogram=self.histogram,
        )


def _numeric_feature(
    *,
    name: str,
    ref_profile: NumericProfile,
    counts: GridCounts,
    override: FeatureOverride | None,
    config: MonitorConfig,
    quality_alpha: float,
) -> FeatureMeasurement:
    """A numeric feature's test, statistics and quality checks (missing, out of range, contract)."""
    ref, cur = _numeric_pair(ref_profile, counts)
    test = _test_for(kind=FeatureKind.NUMERIC, override=override, config=config)
    total = counts.count + counts.missing
    rate = {"alpha": quality_alpha, "min_increase": config.quality_min_increase}
    return FeatureMeasurement(
        name=name,
        kind=FeatureKind.NUMERIC,
        test=test,
        measurement=test.measure(ref, cur),
        statistics=catalog.statistics(FeatureKind.NUMERIC, ref, cur),
        rows=counts.count,
        missing=counts.missing,
        histogram=_numeric_histogram(ref, cur),
        quality=(
            rate_check(
                feature=name,
                check="missing",
                count=counts.missing,
                rows=total,
                expected_rate=ref_profile.missing_rate,
                **rate,
            ),
            rate_check(
                feature=name,
                check="out_of_range",
                count=int(counts.cells[0] + counts.cells[-1]),
                rows=counts.count,
                expected_rate=2.0 / (ref_profile.count + 1),
                **rate,
            ),
            violation_check(
                feature=name,
                count=counts.outside,
                rows=total,
                expected_rate=ref_profile.allowed_chance,
                alpha=quality_alpha,
            ),
        ),
    )


def _categorical_feature(
    *,
    name: str,
    ref_profile: CategoricalProfile,
    counts: Counter[str | None],
    override: FeatureOverride | None,
    config: MonitorConfig,
    quality_alpha: float,
) -> FeatureMeasurement:
    """A categorical feature's test, statistics and quality checks (missing, unseen categories)."""
    cats, missing = split_missing(counts)
    ref, cur = CategoricalCounts.from_profile(ref_profile), CategoricalCounts(counts=cats)
    test = _test_for(kind=FeatureKind.CATEGORICAL, override=override, config=config)
    statistics = catalog.statistics(FeatureKind.CATEGORICAL, ref, cur)
    rate = {"alpha": quality_alpha, "min_increase": config.quality_min_increase}
    unseen = sum(v for k, v in cats.items() if k not in ref_profile.categories)
    return FeatureMeasurement(
        name=name,
        kind=FeatureKind.CATEGORICAL,
        test=test,
        measurement=test.measure(ref, cur),
        statistics=statistics,
        rows=cur.n,
        missing=missing,
        histogram=_categorical_histogram(ref, cur),
        quality=(
            rate_check(
                feature=name,
                check="missing",
                count=missing,
                rows=cur.n + missing,
                expected_rate=ref_profile.missing_rate,
                **rate,
            ),
            rate_check(
                feature=name,
                check="unseen_category",
                count=unseen,
                rows=cur.n,
                expected_rate=good_turing_unseen(ref_profile.categories, folded=OTHER_LEVELS),
                **rate,
            ),
        ),
    )


QUALITY_CHECKS = {FeatureKind.NUMERIC: 3, FeatureKind.CATEGORICAL: 2}
"""The quality checks of a feature: missing, out of range and contract violations; missing and unseen."""


def _measure_features(
    *, profile: Profile, sketch: WindowSketch, config: MonitorConfig
) -> list[FeatureMeasurement]:
    """Every enabled input feature the window has values for, in profile order; the quality checks of all
    features share the level (Bonferroni)."""
    out: list[FeatureMeasurement] = []
    checks = sum(QUALITY_CHECKS[f.kind] for f in profile.features.values())
    quality_alpha = config.alpha / max(1, checks)
    for name, feature in profile.features.items():
        override = config.features.get(name)
        if override is not None and not override.enabled:
            continue
        if isinstance(feature, NumericProfile) and name in sketch.numeric:
            out.append(
                _numeric_feature(
                    name=name,
                    ref_profile=feature,
                    counts=sketch.numeric[name],
                    override=override,
                    config=config,
                    quality_alpha=quality_alpha,
                )
            )
        elif isinstance(feature, CategoricalProfile) and name in sketch.categorical:
            out.append(
                _categorical_feature(
                    name=name,
                    ref_profile=feature,
                    counts=sketch.categorical[name],
                    override=override,
                    config=config,
                    quality_alpha=quality_alpha,
                )
            )
    return out


def evaluate(
    *,
    profile: Profile,
    sketch: WindowSketch,
    config: MonitorConfig | None = None,
    every_s: float | None = None,
) -> DriftReport:
    """Compare a window's sketch with the reference profile under ``config``; a run scheduled every
    ``every_s`` seconds tests at the level its false-alarm budget allows (:mod:`monitors.horizon`), a one-off
    comparison (None) at ``config.alpha``."""
    config = config or MonitorConfig()
    level = run_alpha(alpha=config.alpha, budget=config.false_alarms_per_30d, every_s=every_s)
    config = config.model_copy(update={"alpha": level})
    measured = _measure_features(profile=profile, sketch=sketch, config=config)
    raw = np.array([np.nan if m.measurement.p_value is None else m.measurement.p_value for m in measured])
    adjusted = adjust_p_values(raw, method=config.correction) if raw.size else raw
    features = [
        m.verdict(None if np.isnan(adj) else float(adj)) for m, adj in zip(measured, adjusted, strict=True)
    ]
    features.sort(key=_severity_key)
    quality = [check for m in measured for check in m.quality]
    n_drifted = sum(f.drifted for f in features)
    share = n_drifted / len(features) if features else 0.0
    dataset = DatasetDrift(
        drifted=bool(features) and n_drifted > 0 and share >= config.drift_share,
        n_features=len(features),
        n_drifted=n_drifted,
        share=share,
        drift_share=config.drift_share,
        correction=config.correction.value,
        alpha=config.alpha,
    )
    report = DriftReport(
        rows=sketch.rows,
        reference_rows=profile.rows,
        dataset=dataset,
        features=features,
        quality=sorted(quality, key=lambda q: (not q.flagged, -q.rate)),
        reference_performance=_class_named(profile.performance, profile),
    )
    prediction = _prediction(profile=profile, sketch=sketch, config=config)
    if prediction is not None:
        report.prediction = prediction.drift
        report.estimated_performance = prediction.estimated_performance
        report.performance = prediction.performance
        report.concept_drift = prediction.concept_drift
        report.outputs = prediction.outputs
        spread, reference = profile.performance_spread, profile.performance
        report.performance_limits = performance_limits(
            prediction.performance, reference=reference, spread=spread, level=level
        )
        report.estimated_performance_limits = performance_limits(
            prediction.estimated_performance, reference=reference, spread=spread, level=level
        )
    report.multivariate = _multivariate(profile=profile, sketch=sketch, config=config)
    report.harm = assess(report, profile=profile, config=config, level=level)
    return report


def _class_named(performance: dict[str, Any] | None, profile: Profile) -> dict[str, Any] | None:
    """A multi-class reference's metrics named by class as the window's are (a profile stored before
    :func:`~monitors.performance.class_named` holds ``recall_<k>``)."""
    if performance is None or profile.task is not Task.MULTICLASS:
        return performance
    return class_named(performance, list(profile.class_probabilities))


def _severity_key(f: FeatureDrift) -> tuple[bool, float, float]:
    p = f.result.adjusted_p_value if f.result.adjusted_p_value is not None else f.result.p_value
    return (not f.drifted, -f.result.severity, p if p is not None else 1.0)


@dataclass(frozen=True)
class PredictionFindings:
    """The model output's drift, its estimated performance, and with labels its realised performance."""

    drift: FeatureDrift
    estimated_performance: dict[str, Any]
    performance: dict[str, Any] | None = None
    concept_drift: dict[str, Any] | None = None
    outputs: list[FeatureDrift] = field(default_factory=list)  # multi-class: per class, predicted classes


def _prediction(
    *, profile: Profile, sketch: WindowSketch, config: MonitorConfig
) -> PredictionFindings | None:
    """The prediction's drift and performance (None without a profiled prediction or when disabled)."""
    ref_profile, counts = profile.prediction, sketch.prediction
    if ref_profile is None or counts is None or not config.prediction.enabled:
        return None
    ref, cur = _numeric_pair(ref_profile, counts)
    test = _test_for(kind=FeatureKind.NUMERIC, override=config.prediction, config=config)
    drift = FeatureDrift(
        name="prediction",
        kind=FeatureKind.NUMERIC.value,
        result=test(ref, cur),
        statistics=catalog.statistics(FeatureKind.NUMERIC, ref, cur),
        rows=counts.count,
        missing=counts.missing,
        histogram=_numeric_histogram(ref, cur),
    )
    if profile.task is Task.REGRESSION:
        return _regression(profile=profile, sketch=sketch, drift=drift)
    if profile.task is Task.MULTICLASS:
        return _multiclass(profile=profile, sketch=sketch, drift=drift, config=config)
    points = cell_points(ref_profile.grid, cells=counts.cells, sums=counts.sums)
    estimated = estimate_classification_metrics(
        y_prob=points, weights=counts.cells, threshold=sketch.threshold, calibration=profile.calibration
    )
    lab = sketch.labels
    if not (lab.rows and lab.positive_cells is not None and lab.negative_cells is not None):
        return PredictionFindings(drift=drift, estimated_performance=estimated.as_dict())
    realised = metrics_from_counts(
        true_pos=lab.true_pos,
        false_pos=lab.false_pos,
        false_neg=lab.false_neg,
        true_neg=lab.true_neg,
        positive=lab.positive_cells,
        negative=lab.negative_cells,
    )
    return PredictionFindings(
        drift=drift,
        estimated_performance=estimated.as_dict(),
        performance={**realised.as_dict(), "label_coverage": lab.rows / max(counts.count, 1)},
        concept_drift=_concept(sketch),
    )


def _concept(sketch: WindowSketch) -> dict[str, Any]:
    """The error stream's detector: its verdict, alarms and settings."""
    return {
        "detector": "page_hinkley",
        "drifted": sketch.errors.drifted,
        "alarms": sketch.errors.alarms[:20],
        "observed": sketch.errors.seen,
        "delta": sketch.errors.delta,
        "threshold": sketch.errors.threshold,
    }


def _regression(*, profile: Profile, sketch: WindowSketch, drift: FeatureDrift) -> PredictionFindings:
    """A regression's value drift, its direct loss estimate (from the window's histograms) and, with labels,
    its MAE, RMSE and R² and the error stream."""
    estimated: dict[str, Any] = {}
    model, counts = profile.loss_model, sketch.prediction
    if model is not None and counts is not None and profile.prediction is not None:
        design = mean_design(
            model,
            rows=sketch.rows,
            numeric={
                name: _cells(profile.features[name], g)
                for name, g in sketch.numeric.items()
                if isinstance(profile.features.get(name), NumericProfile)
            },
            categorical={name: {str(k): v for k, v in c.items()} for name, c in sketch.categorical.items()},
            prediction=_cells(profile.prediction, counts),
        )
        estimated = estimate_regression_from_design(model, design, rows=sketch.rows)
    sums = sketch.regression
    if not sums.rows:
        return PredictionFindings(drift=drift, estimated_performance=estimated)
    coverage = sums.rows / max(drift.rows, 1)
    return PredictionFindings(
        drift=drift,
        estimated_performance=estimated,
        performance={**sums.metrics(), "label_coverage": coverage},
        concept_drift=_concept(sketch),
    )


def _cells(reference: Any, counts: GridCounts) -> tuple[np.ndarray, np.ndarray, int]:
    """A numeric histogram as representative points, their counts and the missing count."""
    points = cell_points(reference.grid, cells=counts.cells, sums=counts.sums)
    return points, counts.cells, counts.missing


def _multiclass(
    *, profile: Profile, sketch: WindowSketch, drift: FeatureDrift, config: MonitorConfig
) -> PredictionFindings:
    """A multi-class model's confidence drift, each class probability's and the predicted classes' drift,
    the confidence-based estimate and, with labels, its realised metrics and the error stream."""
    mc = sketch.multiclass
    if mc is None:
        return PredictionFindings(drift=drift, estimated_performance={})
    names = list(profile.class_probabilities)
    measured: list[FeatureMeasurement] = []
    for k, name in enumerate(names):
        counts = mc.probabilities[k] if k < len(mc.probabilities) else None
        if counts is not None:
            measured.append(
                _numeric_feature(
                    name=f"prediction[{name}]",
                    ref_profile=profile.class_probabilities[name],
                    counts=counts,
                    override=config.prediction,
                    config=config,
                    quality_alpha=config.alpha,  # an output's quality checks are not reported
                )
            )
    if profile.predicted_class is not None:
        predicted: Counter[str | None] = Counter(
            {names[k]: int(n) for k, n in enumerate(mc.predicted) if n and k < len(names)}
        )
        measured.append(
            _categorical_feature(
                name="predicted_class",
                ref_profile=profile.predicted_class,
                counts=predicted,
                override=None,
                config=config,
                quality_alpha=config.alpha,
            )
        )
    raw = np.array([np.nan if m.measurement.p_value is None else m.measurement.p_value for m in measured])
    adjusted = adjust_p_values(raw, method=config.correction) if raw.size else raw
    outputs = [m.verdict(None if np.isnan(a) else float(a)) for m, a in zip(measured, adjusted, strict=True)]
    estimated = multiclass_estimate_from_counts(
        rows=mc.rows,
        expected_correct=mc.expected_correct,
        true_pos=mc.expected_true_pos,
        false_pos=mc.expected_false_pos,
        false_neg=mc.expected_false_neg,
    )
    if not mc.labelled:
        return PredictionFindings(drift=drift, estimated_performance=estimated, outputs=outputs)
    realised = class_named(multiclass_from_counts(confusion=mc.confusion, log_loss_sum=mc.log_loss), names)
    return PredictionFindings(
        drift=drift,
        estimated_performance=estimated,
        performance={**realised, "label_coverage": mc.labelled / max(mc.rows, 1)},
        concept_drift=_concept(sketch),
        outputs=outputs,
    )


def _multivariate(*, profile: Profile, sketch: WindowSketch, config: MonitorConfig) -> FeatureDrift | None:
    """The PCA reconstruction error's drift (None without a PCA in the profile or when disabled)."""
    pca = profile.multivariate
    if pca is None or sketch.pca_error is None or not config.multivariate:
        return None
    ref, cur = _numeric_pair(pca.error, sketch.pca_error)
    return FeatureDrift(
        name="pca_reconstruction_error",
        kind="multivariate",
        result=NumericDefault(alpha=config.alpha)(ref, cur),
        statistics=catalog.statistics(FeatureKind.NUMERIC, ref, cur),
        rows=sketch.pca_error.count,
        missing=sketch.pca_error.missing,
        histogram=_numeric_histogram(ref, cur),
    )


def compare(
    *,
    profile: Profile,
    columns: Mapping[str, Column],
    predictions: np.ndarray | None = None,
    labels: np.ndarray | None = None,
    config: MonitorConfig | None = None,
) -> DriftReport:
    """Sketch in-memory columns and evaluate them in one call."""
    config = config or MonitorConfig()
    sketch = sketch_columns(
        profile=profile,
        columns=columns,
        predictions=predictions,
        labels=labels,
        threshold=config.classification_threshold,
    )
    return evaluate(profile=profile, sketch=sketch, config=config)
