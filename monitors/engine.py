"""Monitor operations: sketch a window against a profile and evaluate it into a drift report."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from monitors.binning import cell_points
from monitors.config import FeatureOverride, MonitorConfig
from monitors.drift.base import DriftTest, Measurement, TestResult, adjust_p_values
from monitors.drift.categorical import (
    CategoricalCounts,
    CategoricalDefault,
    CategoricalJensenShannon,
    CategoricalPSI,
    ChiSquare,
    UnseenCategories,
    aligned,
)
from monitors.drift.numeric import (
    KolmogorovSmirnov,
    NumericCounts,
    NumericDefault,
    NumericJensenShannon,
    NumericPSI,
    Wasserstein,
)
from monitors.performance import estimate_classification_metrics, metrics_from_counts
from monitors.profile import CategoricalProfile, NumericProfile, Profile
from monitors.quality import QualityCheck, good_turing_unseen, rate_check, violation_check
from monitors.report import DatasetDrift, DriftReport, FeatureDrift, Histogram
from monitors.window import WindowSketch, split_missing

NUMERIC_TESTS: dict[str, type[DriftTest[NumericCounts]]] = {
    "default": NumericDefault,
    "ks": KolmogorovSmirnov,
    "wasserstein": Wasserstein,
    "psi": NumericPSI,
    "jensen_shannon": NumericJensenShannon,
}
CATEGORICAL_TESTS: dict[str, type[DriftTest[CategoricalCounts]]] = {
    "default": CategoricalDefault,
    "chi_square": ChiSquare,
    "jensen_shannon": CategoricalJensenShannon,
    "psi": CategoricalPSI,
    "unseen_categories": UnseenCategories,
}
CHUNK_ROWS = 1_000_000


def sketch_columns(
    *,
    profile: Profile,
    columns: Mapping[str, np.ndarray],
    predictions: np.ndarray | None = None,
    labels: np.ndarray | None = None,
    threshold: float = 0.5,
    chunk_rows: int = CHUNK_ROWS,
) -> WindowSketch:
    """Sketch in-memory columns chunk by chunk (memory bounded by ``chunk_rows``)."""
    sketch = WindowSketch(threshold=threshold)
    n = len(next(iter(columns.values()))) if columns else (0 if predictions is None else len(predictions))
    for start in range(0, max(n, 1), chunk_rows):
        part = {k: v[start : start + chunk_rows] for k, v in columns.items()}
        p = None if predictions is None else predictions[start : start + chunk_rows]
        y = None if labels is None else labels[start : start + chunk_rows]
        sketch.update(profile, part, predictions=p, labels=y)
    return sketch


def _test_for(*, kind: str, override: FeatureOverride | None, config: MonitorConfig) -> DriftTest[Any]:
    """The configured test instance of one feature."""
    numeric = kind == "numeric"
    registry: Mapping[str, type[DriftTest[Any]]] = NUMERIC_TESTS if numeric else CATEGORICAL_TESTS
    name = (override.test if override and override.test else None) or (
        config.numeric_test if numeric else config.categorical_test
    )
    if name not in registry:
        raise ValueError(f"unknown {kind} test {name!r}; choose from {sorted(registry)}")
    cls = registry[name]
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
        labels=cats, reference=(r / max(r.sum(), 1)).tolist(), current=(c / max(c.sum(), 1)).tolist()
    )


def _numeric_pair(fp: NumericProfile, sketch_counts: Any) -> tuple[NumericCounts, NumericCounts]:
    ref = NumericCounts.from_profile(fp)
    return ref, NumericCounts.from_grid_counts(sketch_counts, reference=ref)


def _all_numeric(ref: NumericCounts, cur: NumericCounts) -> dict[str, TestResult]:
    return {
        t.name: t(ref, cur)
        for t in (KolmogorovSmirnov(), Wasserstein(), NumericPSI(), NumericJensenShannon())
    }


def _all_categorical(ref: CategoricalCounts, cur: CategoricalCounts) -> dict[str, TestResult]:
    tests = (ChiSquare(), CategoricalJensenShannon(), CategoricalPSI(), UnseenCategories())
    return {t.name: t(ref, cur) for t in tests}


def evaluate(*, profile: Profile, sketch: WindowSketch, config: MonitorConfig | None = None) -> DriftReport:
    """Compare a window's sketch with the reference profile under ``config``."""
    config = config or MonitorConfig()
    pending: list[
        tuple[str, str, DriftTest[Any], Measurement, dict[str, TestResult], int, int, Histogram]
    ] = []
    quality: list[QualityCheck] = []
    q_args = {"alpha": config.alpha, "min_increase": config.quality_min_increase}
    for name, fp in profile.features.items():
        override = config.features.get(name)
        if override is not None and not override.enabled:
            continue
        if isinstance(fp, NumericProfile) and name in sketch.numeric:
            counts = sketch.numeric[name]
            ref_n, cur_n = _numeric_pair(fp, counts)
            test = _test_for(kind="numeric", override=override, config=config)
            total = counts.count + counts.missing
            pending.append(
                (
                    name,
                    "numeric",
                    test,
                    test.measure(ref_n, cur_n),
                    _all_numeric(ref_n, cur_n),
                    counts.count,
                    counts.missing,
                    _numeric_histogram(ref_n, cur_n),
                )
            )
            quality.append(
                rate_check(
                    feature=name,
                    check="missing",
                    count=counts.missing,
                    rows=total,
                    expected_rate=fp.missing_rate,
                    **q_args,
                )
            )
            outside = int(counts.cells[0] + counts.cells[-1])
            quality.append(
                rate_check(
                    feature=name,
                    check="out_of_range",
                    count=outside,
                    rows=counts.count,
                    expected_rate=2.0 / (fp.count + 1),
                    **q_args,
                )
            )
            quality.append(violation_check(feature=name, count=counts.outside, rows=total))
        elif isinstance(fp, CategoricalProfile) and name in sketch.categorical:
            cats, missing = split_missing(sketch.categorical[name])
            ref_c, cur_c = CategoricalCounts.from_profile(fp), CategoricalCounts(counts=cats)
            test = _test_for(kind="categorical", override=override, config=config)
            stats = _all_categorical(ref_c, cur_c)
            n = cur_c.n
            pending.append(
                (
                    name,
                    "categorical",
                    test,
                    test.measure(ref_c, cur_c),
                    stats,
                    n,
                    missing,
                    _categorical_histogram(ref_c, cur_c),
                )
            )
            quality.append(
                rate_check(
                    feature=name,
                    check="missing",
                    count=missing,
                    rows=n + missing,
                    expected_rate=fp.missing_rate,
                    **q_args,
                )
            )
            unseen = sum(v for k, v in cats.items() if k not in fp.categories)
            quality.append(
                rate_check(
                    feature=name,
                    check="unseen_category",
                    count=unseen,
                    rows=n,
                    expected_rate=good_turing_unseen(fp.categories),
                    **q_args,
                )
            )
    raw = np.array([np.nan if m.p_value is None else m.p_value for *_, m, _s, _r, _mi, _h in pending])
    adjusted = adjust_p_values(raw, method=config.correction) if raw.size else raw
    features: list[FeatureDrift] = []
    for (name, kind, test, m, stats, rows, missing, hist), adj in zip(pending, adjusted, strict=True):
        result = test.result(m, adjusted_p_value=None if np.isnan(adj) else float(adj))
        features.append(
            FeatureDrift(
                name=name,
                kind=kind,
                result=result,
                statistics=stats,
                rows=rows,
                missing=missing,
                histogram=hist,
            )
        )
    features.sort(key=_severity_key)
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
        reference_performance=profile.performance,
    )
    _add_prediction(report=report, profile=profile, sketch=sketch, config=config)
    _add_multivariate(report=report, profile=profile, sketch=sketch, config=config)
    return report


def _severity_key(f: FeatureDrift) -> tuple[bool, float, float]:
    p = f.result.adjusted_p_value if f.result.adjusted_p_value is not None else f.result.p_value
    return (not f.drifted, -f.result.severity, p if p is not None else 1.0)


def _add_prediction(
    *, report: DriftReport, profile: Profile, sketch: WindowSketch, config: MonitorConfig
) -> None:
    fp = profile.prediction
    if fp is None or sketch.prediction is None or not config.prediction.enabled:
        return
    ref, cur = _numeric_pair(fp, sketch.prediction)
    test = _test_for(kind="numeric", override=config.prediction, config=config)
    report.prediction = FeatureDrift(
        name="prediction",
        kind="numeric",
        result=test(ref, cur),
        statistics=_all_numeric(ref, cur),
        rows=sketch.prediction.count,
        missing=sketch.prediction.missing,
        histogram=_numeric_histogram(ref, cur),
    )
    c = sketch.prediction.cells
    points = cell_points(fp.grid, cells=c, sums=sketch.prediction.sums)
    est = estimate_classification_metrics(
        y_prob=points, weights=c, threshold=sketch.threshold, calibration=profile.calibration
    )
    report.estimated_performance = est.as_dict()
    lab = sketch.labels
    if lab.rows and lab.positive_cells is not None and lab.negative_cells is not None:
        real = metrics_from_counts(
            tp=lab.tp,
            fp=lab.fp,
            fn=lab.fn,
            tn=lab.tn,
            positive=lab.positive_cells,
            negative=lab.negative_cells,
        )
        report.performance = {**real.as_dict(), "label_coverage": lab.rows / max(sketch.prediction.count, 1)}
        report.concept_drift = {
            "detector": "page_hinkley",
            "drifted": sketch.errors.drifted,
            "alarms": sketch.errors.alarms[:20],
            "observed": sketch.errors.seen,
            "delta": sketch.errors.delta,
            "threshold": sketch.errors.threshold,
        }


def _add_multivariate(
    *, report: DriftReport, profile: Profile, sketch: WindowSketch, config: MonitorConfig
) -> None:
    pca = profile.multivariate
    if pca is None or sketch.pca_error is None or not config.multivariate:
        return
    ref, cur = _numeric_pair(pca.error, sketch.pca_error)
    report.multivariate = FeatureDrift(
        name="pca_reconstruction_error",
        kind="multivariate",
        result=NumericDefault(alpha=config.alpha)(ref, cur),
        statistics=_all_numeric(ref, cur),
        rows=sketch.pca_error.count,
        missing=sketch.pca_error.missing,
        histogram=_numeric_histogram(ref, cur),
    )


def compare(
    *,
    profile: Profile,
    columns: Mapping[str, np.ndarray],
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
