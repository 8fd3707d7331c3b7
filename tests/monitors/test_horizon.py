"""Error control over repeated runs: a scheduled run tests at the level its false-alarm budget allows over
30 days, a one-off comparison at ``alpha``; performance is worse beyond the reference chunks' variability."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pytest
from scipy.stats import chi2, norm

from monitors.config import MonitorConfig
from monitors.engine import evaluate, sketch_columns
from monitors.findings import report_findings
from monitors.horizon import (
    FAMILIES,
    MIN_PERFORMANCE_Z,
    performance_limits,
    performance_z,
    run_alpha,
    runs_per_30d,
    sd_allowance,
)
from monitors.profile import Profile, metric_sd, profile_from_dict
from tests.monitors.helpers import true_probability
from training.cluster.datagen import TARGET, generate


def test_the_budget_is_spent_over_the_runs_of_30_days() -> None:
    assert runs_per_30d(None) == 1.0 and runs_per_30d(300) == 8_640 and runs_per_30d(60) == 43_200
    assert runs_per_30d(90 * 86_400) == 1.0  # rarer than once a month: one look
    assert run_alpha(alpha=0.05, budget=0.5, every_s=None) == 0.05  # a one-off comparison keeps alpha
    assert run_alpha(alpha=0.05, budget=0.5, every_s=300) == pytest.approx(0.5 / FAMILIES / 8_640)
    assert run_alpha(alpha=0.05, budget=0.5, every_s=3_600) == pytest.approx(0.5 / FAMILIES / 720)
    assert run_alpha(alpha=0.001, budget=50, every_s=3_600) == 0.001  # never above alpha
    # the expected false alarms of one family over 30 days at the level: its share of the budget
    for every in (60, 300, 3_600):
        assert run_alpha(alpha=0.05, budget=0.5, every_s=every) * runs_per_30d(every) == pytest.approx(
            0.5 / FAMILIES
        )


def test_performance_is_worse_beyond_z_standard_deviations_of_the_reference_chunks() -> None:
    assert performance_z(0.05) == MIN_PERFORMANCE_Z  # 1.64 would flag one one-off report in 20
    level = 0.5 / FAMILIES / 8_640
    assert performance_z(level) == pytest.approx(norm.isf(level))
    sd = {"roc_auc": 0.01, "rmse": 0.2, "positive_rate": 0.02}
    spread = {"chunk_rows": 1_000, "chunks": 20, "labelled_rows": 20_000, "sd": sd}
    current = {"rows": 4_000.0, "roc_auc": 0.80, "rmse": 3.0, "positive_rate": 0.3}
    reference = {"roc_auc": 0.85, "rmse": 2.5, "positive_rate": 0.35}
    limits = performance_limits(current, reference=reference, spread=spread, level=1e-5)
    assert limits is not None and set(limits) == {"roc_auc", "rmse"}  # a positive rate is no quality
    z = norm.isf(1e-5 / 2)  # the level shared by the two metrics
    allowance = math.sqrt(19 / chi2.ppf(0.05, 19))  # the sd of 20 chunks, at its upper 95 % bound
    assert sd_allowance(20) == pytest.approx(allowance) and 1.3 < allowance < 1.4
    sd_auc = math.sqrt(0.01**2 * 1_000 / 4_000 + 0.01**2 * 1_000 / 20_000) * allowance
    assert limits["roc_auc"] == pytest.approx(0.85 - z * sd_auc)  # falls when worse: below
    sd_rmse = metric_sd(spread, "rmse", rows=4_000)
    assert sd_rmse is not None
    assert limits["rmse"] == pytest.approx(2.5 + z * sd_rmse * allowance)  # grows when worse: above
    assert performance_limits(current, reference=reference, spread=None, level=1e-5) is None
    unlabelled = {"rows": 0.0, "roc_auc": 0.8}
    assert performance_limits(unlabelled, reference=reference, spread=spread, level=1e-5) is None


@pytest.fixture(scope="module")
def credit_profile(profile_dict: dict[str, Any]) -> Profile:
    return profile_from_dict(profile_dict)


def _window(profile: Profile, *, shift: float = 0.0, flip: float = 0.0, rows: int = 3_000) -> Any:
    cur = dict(generate(rows, seed=9))
    cur["age"] = np.asarray(cur["age"], dtype=np.float64) + shift * 10.0
    labels = np.asarray(cur[TARGET], dtype=np.float64).copy()
    if flip:
        rng = np.random.default_rng(3)
        chosen = rng.random(rows) < flip
        labels[chosen] = 1.0 - labels[chosen]
    return sketch_columns(profile=profile, columns=cur, predictions=true_probability(cur), labels=labels)


def test_a_shift_a_one_off_comparison_flags_is_below_a_scheduled_runs_level(credit_profile: Profile) -> None:
    """The same window: drifted at alpha 0.05, not at the level of a run every 5 minutes, whose dataset
    verdict states the level it tested at; a larger shift is found at both."""
    sketch = _window(credit_profile, shift=0.07)
    once = evaluate(profile=credit_profile, sketch=sketch)
    scheduled = evaluate(profile=credit_profile, sketch=sketch, every_s=300)
    level = run_alpha(alpha=0.05, budget=MonitorConfig().false_alarms_per_30d, every_s=300)
    age_once = {f.name: f for f in once.features}["age"]
    age_scheduled = {f.name: f for f in scheduled.features}["age"]
    p = age_once.result.adjusted_p_value
    assert p is not None and level < p < 0.05, p  # significant once, not 8,640 times a month
    assert age_once.drifted and not age_scheduled.drifted
    assert once.dataset.alpha == 0.05 and scheduled.dataset.alpha == pytest.approx(level)
    big = _window(credit_profile, shift=0.5)
    for every in (None, 60.0):
        report = evaluate(profile=credit_profile, sketch=big, every_s=every)
        assert {f.name: f for f in report.features}["age"].drifted


def test_flipped_labels_fall_below_the_limit_and_clean_labels_do_not(credit_profile: Profile) -> None:
    clean = evaluate(profile=credit_profile, sketch=_window(credit_profile), every_s=300)
    assert clean.performance_limits is not None and clean.estimated_performance_limits is not None
    assert clean.reference_performance is not None and clean.performance is not None
    auc_limit = clean.performance_limits["roc_auc"]
    assert auc_limit < clean.reference_performance["roc_auc"] < 1.0
    assert clean.performance["roc_auc"] > auc_limit
    assert not [f for f in report_findings(clean) if f.kind == "performance"]
    flipped = evaluate(profile=credit_profile, sketch=_window(credit_profile, flip=0.2), every_s=300)
    below = [f for f in report_findings(flipped) if f.kind == "performance"]
    assert "roc_auc" in {f.subject for f in below}
    assert any("beyond its limit" in f.message for f in below)
    doc = flipped.as_dict()
    assert flipped.performance_limits is not None
    assert doc["performance_limits"]["roc_auc"] == pytest.approx(flipped.performance_limits["roc_auc"])
