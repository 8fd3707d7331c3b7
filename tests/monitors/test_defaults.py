"""The default verdicts: no false alarms beyond nominal, planted shifts caught at 5k and 1M rows."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from core.tabular import Columns
from monitors.config import MonitorConfig
from monitors.drift import (
    CategoricalCounts,
    CategoricalDefault,
    ChiSquare,
    KolmogorovSmirnov,
    NumericDefault,
)
from monitors.drift.base import Correction
from monitors.engine import compare
from monitors.profile import Profile, profile_from_dict
from tests.monitors.helpers import numeric_pair
from training.cluster.datagen import generate

ALPHA = 0.05
NUMERIC = [
    "age",
    "income",
    "debt_to_income",
    "credit_score",
    "loan_amount",
    "employment_years",
    "num_open_accounts",
]


@pytest.fixture(scope="module")
def profile(profile_dict: dict[str, Any]) -> Profile:
    return profile_from_dict(profile_dict)


def _false_alarm_rate(flags: list[bool]) -> float:
    return sum(flags) / len(flags)


def test_numeric_no_drift_false_alarm_rate_at_most_nominal() -> None:
    rng = np.random.default_rng(11)
    ref = rng.lognormal(3.0, 0.6, 40_000)
    r, _ = numeric_pair(ref, ref[:10])
    ks, default = [], []
    for seed in range(300):
        cur = np.random.default_rng(10_000 + seed).lognormal(3.0, 0.6, 5_000)
        _, c = numeric_pair(ref, cur)
        ks.append(KolmogorovSmirnov(alpha=ALPHA)(r, c).drifted)
        default.append(NumericDefault(alpha=ALPHA)(r, c).drifted)
    assert _false_alarm_rate(ks) <= ALPHA  # the p-value is valid (conservative on the grid)
    assert _false_alarm_rate(default) <= ALPHA


def test_categorical_no_drift_false_alarm_rate_at_most_nominal() -> None:
    cats = np.array(["a", "b", "c", "d", "e"])
    probs = [0.4, 0.25, 0.2, 0.1, 0.05]
    ref = CategoricalCounts(
        counts=dict(zip(cats, np.random.default_rng(12).multinomial(40_000, probs), strict=True))
    )
    chi, default = [], []
    for seed in range(300):
        counts = np.random.default_rng(20_000 + seed).multinomial(5_000, probs)
        cur = CategoricalCounts(counts=dict(zip(cats, counts, strict=True)))
        chi.append(ChiSquare(alpha=ALPHA)(ref, cur).drifted)
        default.append(CategoricalDefault(alpha=ALPHA)(ref, cur).drifted)
    assert _false_alarm_rate(chi) <= ALPHA
    assert _false_alarm_rate(default) <= ALPHA


def test_report_no_drift_false_alarms_per_feature(profile: Profile) -> None:
    flags = []
    for seed in range(40):
        report = compare(profile=profile, columns=generate(5_000, seed=500 + seed))
        flags += [f.drifted for f in report.features]
        assert not report.drifted
    assert _false_alarm_rate(flags) <= ALPHA


def test_huge_window_ignores_negligible_shift() -> None:
    rng = np.random.default_rng(13)
    ref = rng.normal(size=40_000)
    cur = rng.normal(0.02, 1.0, 1_000_000)  # significant at this size, far below the effect floor
    r, c = numeric_pair(ref, cur)
    p_value = KolmogorovSmirnov()(r, c).p_value
    assert p_value is not None and p_value < ALPHA  # a pure significance test would alarm
    assert not NumericDefault()(r, c).drifted


def _plant(cols: Columns, *, name: str, shift_sd: float, spread: float, ref: Columns) -> None:
    """Shift the mean by ``shift_sd`` reference sds and scale the spread around the mean by ``spread``."""
    x = cols[name].astype(np.float64)
    mu, sd = np.nanmean(ref[name]), np.nanstd(ref[name])
    cols[name] = mu + (x - mu) * spread + shift_sd * sd


def test_planted_shift_at_5k_window(profile: Profile, reference: Columns) -> None:
    cur = generate(5_000, seed=901)
    _plant(cur, name="income", shift_sd=0.2, spread=1.2, ref=reference)
    _plant(cur, name="age", shift_sd=0.2, spread=1.0, ref=reference)
    _plant(cur, name="debt_to_income", shift_sd=0.0, spread=1.2, ref=reference)
    report = compare(profile=profile, columns=cur)
    drifted = {f.name for f in report.features if f.drifted}
    assert drifted == {"income", "age", "debt_to_income"}


def test_planted_shift_at_1m_window(profile: Profile, reference: Columns) -> None:
    cur = generate(1_000_000, seed=902)
    _plant(cur, name="income", shift_sd=0.1, spread=1.1, ref=reference)
    _plant(cur, name="credit_score", shift_sd=0.1, spread=1.0, ref=reference)
    _plant(cur, name="employment_years", shift_sd=0.0, spread=1.1, ref=reference)
    report = compare(profile=profile, columns=cur)
    drifted = {f.name for f in report.features if f.drifted}
    assert drifted == {"income", "credit_score", "employment_years"}
    # the unshifted features are significantly different from nothing: their effects stay far below the floor
    for f in report.features:
        if f.name not in drifted:
            assert f.result.effect < 0.5 * f.result.threshold  # type: ignore[operator]


def test_changed_category_mix_and_new_category(profile: Profile) -> None:
    rng = np.random.default_rng(14)
    cur = generate(5_000, seed=903)
    n = 5_000
    cur["home_ownership"] = rng.choice(
        np.array(["RENT", "MORTGAGE", "OWN"], dtype=object), n, p=[0.33, 0.47, 0.2]
    )
    purpose = cur["loan_purpose"].copy()
    purpose[rng.random(n) < 0.05] = "crypto"
    cur["loan_purpose"] = purpose
    report = compare(profile=profile, columns=cur)
    by_name = {f.name: f for f in report.features}
    assert {f.name for f in report.features if f.drifted} == {"home_ownership", "loan_purpose"}
    assert by_name["loan_purpose"].statistics["unseen_categories"].drifted
    assert by_name["loan_purpose"].statistics["unseen_categories"].details["unseen"]["crypto"] > 200
    flags = {(q.feature, q.check) for q in report.quality if q.flagged}
    assert flags == {("loan_purpose", "unseen_category")}


def test_dataset_level_rule_and_overrides(profile: Profile) -> None:
    shifted = compare(profile=profile, columns=generate(5_000, scenario="covariate_shift", seed=904))
    assert shifted.drifted
    assert {f.name for f in shifted.features if f.drifted} == {"age", "income", "credit_score"}
    assert shifted.features[0].drifted and not shifted.features[-1].drifted  # sorted by severity
    strict = MonitorConfig(drift_share=0.5, correction=Correction.BONFERRONI)
    assert not compare(
        profile=profile, columns=generate(5_000, scenario="covariate_shift", seed=904), config=strict
    ).drifted
    off = MonitorConfig.model_validate(
        {"features": {"age": {"enabled": False}, "income": {"test": "psi", "threshold": 5}}}
    )
    report = compare(
        profile=profile, columns=generate(5_000, scenario="covariate_shift", seed=904), config=off
    )
    names = {f.name: f for f in report.features}
    assert "age" not in names
    assert names["income"].result.test == "psi" and not names["income"].drifted
