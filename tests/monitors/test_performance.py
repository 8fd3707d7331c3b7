"""Performance with and without labels, prediction drift and the error-stream detector."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from scipy import stats

from monitors.engine import compare, evaluate
from monitors.performance import (
    classification_metrics,
    estimate_classification_metrics,
    regression_metrics,
    roc_auc,
    roc_auc_from_counts,
)
from monitors.profile import Profile, profile_from_dict
from monitors.sketch import WindowSketch
from tests.monitors.helpers import true_probability
from training.cluster.datagen import TARGET, generate

REL = 1e-9


@pytest.fixture(scope="module")
def profile(profile_dict: dict[str, Any]) -> Profile:
    return profile_from_dict(profile_dict)


def test_classification_metrics_match_direct_computation() -> None:
    rng = np.random.default_rng(21)
    p = np.round(rng.random(3_000), 2)  # ties on purpose
    y = (rng.random(3_000) < p).astype(int)
    m = classification_metrics(y_true=y, y_prob=p)
    pred = p >= 0.5
    tp, fp = np.sum(pred & (y == 1)), np.sum(pred & (y == 0))
    fn, tn = np.sum(~pred & (y == 1)), np.sum(~pred & (y == 0))
    assert m.accuracy == pytest.approx((tp + tn) / y.size, rel=REL)
    assert m.precision == pytest.approx(tp / (tp + fp), rel=REL)
    assert m.recall == pytest.approx(tp / (tp + fn), rel=REL)
    assert m.f1 == pytest.approx(2 * tp / (2 * tp + fp + fn), rel=REL)
    u = stats.mannwhitneyu(p[y == 1], p[y == 0]).statistic
    assert m.roc_auc == pytest.approx(u / (np.sum(y == 1) * np.sum(y == 0)), rel=REL)
    pos, neg = p[y == 1], p[y == 0]
    pairs = (pos[:, None] > neg[None, :]).mean() + 0.5 * (pos[:, None] == neg[None, :]).mean()
    assert roc_auc(y_true=y, y_score=p) == pytest.approx(pairs, rel=REL)
    # the binned form equals it when each bin holds one score value
    values = np.unique(p)
    pos_c = np.array([np.sum(pos == v) for v in values])
    neg_c = np.array([np.sum(neg == v) for v in values])
    assert roc_auc_from_counts(positive=pos_c, negative=neg_c) == pytest.approx(pairs, rel=REL)


def test_regression_metrics() -> None:
    y, yhat = np.array([1.0, 2.0, 3.0, 4.0]), np.array([1.5, 2.0, 2.0, 6.0])
    m = regression_metrics(y_true=y, y_pred=yhat)
    assert m.mae == pytest.approx(np.mean(np.abs(yhat - y)), rel=REL)
    assert m.rmse == pytest.approx(np.sqrt(np.mean((yhat - y) ** 2)), rel=REL)


def test_cbpe_estimates_realised_metrics_of_a_calibrated_model() -> None:
    rng = np.random.default_rng(22)
    p = rng.beta(0.7, 1.4, 60_000)
    y = (rng.random(p.size) < p).astype(int)
    real = classification_metrics(y_true=y, y_prob=p)
    est = estimate_classification_metrics(y_prob=p)
    for name in ("accuracy", "precision", "recall", "f1", "roc_auc"):
        assert getattr(est, name) == pytest.approx(getattr(real, name), abs=0.01), name
    # weights stand for repeated rows
    values, counts = np.unique(np.round(p, 3), return_counts=True)
    a = estimate_classification_metrics(y_prob=np.repeat(values, counts))
    b = estimate_classification_metrics(y_prob=values, weights=counts)
    assert a.accuracy == pytest.approx(b.accuracy, rel=REL) and a.roc_auc == pytest.approx(b.roc_auc, rel=REL)


def _run(profile: Profile, scenario: str, seed: int, rows: int = 20_000) -> Any:
    cur = generate(rows, scenario=scenario, seed=seed)
    return compare(profile=profile, columns=cur, predictions=true_probability(cur), labels=cur[TARGET])


def test_baseline_window_is_quiet(profile: Profile) -> None:
    report = _run(profile, "baseline", 31)
    assert report.prediction is not None and not report.prediction.drifted
    assert not report.concept_drift["drifted"]
    ref = report.reference_performance
    assert report.performance["roc_auc"] == pytest.approx(ref["roc_auc"], abs=0.01)
    assert report.estimated_performance["accuracy"] == pytest.approx(
        report.performance["accuracy"],
        abs=0.01,
    )
    assert report.performance["label_coverage"] == 1.0


def test_concept_drift_shows_in_labels_and_error_stream_not_in_confidence(profile: Profile) -> None:
    # the monitor's sketch lives across windows: baseline traffic, then the planted concept drift
    base, cur = generate(10_000, seed=36), generate(10_000, scenario="concept_drift", seed=32)
    sketch = WindowSketch()
    sketch.update(profile, base, predictions=true_probability(base), labels=base[TARGET])
    assert not sketch.errors.drifted
    fresh = WindowSketch(errors=sketch.errors)  # next window, same stream detector
    fresh.update(profile, cur, predictions=true_probability(cur), labels=cur[TARGET])
    report = evaluate(profile=profile, sketch=fresh)
    ref = report.reference_performance
    assert ref is not None and report.performance is not None and report.estimated_performance is not None
    assert report.performance["roc_auc"] < ref["roc_auc"] - 0.2
    assert report.performance["accuracy"] < ref["accuracy"] - 0.15
    assert report.concept_drift is not None and report.concept_drift["drifted"]
    assert 10_000 < report.concept_drift["alarms"][0] < 11_000
    # P(x) is unchanged, so neither the inputs nor the model's outputs move; CBPE, which assumes a fixed
    # P(y | x), keeps estimating the reference performance: its documented blind spot.
    assert report.prediction is not None and not report.prediction.drifted
    assert not report.drifted
    assert report.estimated_performance["roc_auc"] == pytest.approx(ref["roc_auc"], abs=0.01)


def test_covariate_shift_moves_predictions_and_cbpe_follows(profile: Profile) -> None:
    report = _run(profile, "covariate_shift", 33)
    assert report.prediction is not None and report.prediction.drifted
    real, est, ref = report.performance, report.estimated_performance, report.reference_performance
    assert real is not None and est is not None and ref is not None
    assert real["positive_rate"] > ref["positive_rate"] + 0.1  # the shift really changed the outcome mix
    for name in ("positive_rate", "accuracy", "f1", "roc_auc"):
        assert est[name] == pytest.approx(real[name], abs=0.015), name


def test_prior_shift_moves_predictions(profile: Profile) -> None:
    report = _run(profile, "prior_shift", 34)
    assert report.prediction is not None and report.prediction.drifted
    assert report.performance is not None and report.reference_performance is not None
    assert report.performance["positive_rate"] > report.reference_performance["positive_rate"] + 0.15


def test_partial_labels_give_coverage(profile: Profile) -> None:
    cur = generate(10_000, seed=35)
    labels = cur[TARGET].astype(np.float64)
    labels[::4] = np.nan
    report = compare(profile=profile, columns=cur, predictions=true_probability(cur), labels=labels)
    assert report.performance is not None
    assert report.performance["label_coverage"] == pytest.approx(0.75)
    assert report.performance["rows"] == 7_500
