"""The data-quality finding for values beyond the allowed range: only when their rate is significantly above
the contract's chance per value, at the run's level (monitors/quality.py, monitors/engine.py)."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from monitors.engine import evaluate, sketch_columns
from monitors.profile import NumericProfile, Profile, build_reference_profile, profile_from_dict
from monitors.quality import violation_check
from registry.schema import ModelSchema, OutputSpec, infer_feature

EVERY_5_MIN = 300.0
ROWS = 100_000


@pytest.fixture(scope="module")
def profile() -> Profile:
    rng = np.random.default_rng(40)
    columns = {"amount": rng.lognormal(3.0, 1.5, 20_000), "income": rng.lognormal(10.0, 0.8, 20_000)}
    schema = ModelSchema(
        features=tuple(infer_feature(name, values) for name, values in columns.items()),
        outputs=(OutputSpec("probability"),),
        target="y",
    )
    return profile_from_dict(build_reference_profile(columns, schema))


def _violations(profile: Profile, beyond: int) -> list[tuple[str, int, bool]]:
    rng = np.random.default_rng(41)
    window = {"amount": rng.lognormal(3.0, 1.5, ROWS), "income": rng.lognormal(10.0, 0.8, ROWS)}
    amount = profile.features["amount"]
    assert isinstance(amount, NumericProfile) and amount.allowed_max is not None
    window["amount"][:beyond] = 2 * amount.allowed_max  # beyond the allowed range
    sketch = sketch_columns(profile=profile, columns=window)
    report = evaluate(profile=profile, sketch=sketch, every_s=EVERY_5_MIN)
    return [(q.feature, q.count, q.flagged) for q in report.quality if q.check == "contract_violation"]


def test_a_rare_value_beyond_the_range_is_no_finding_on_its_own(profile: Profile) -> None:
    assert ("amount", 1, False) in _violations(profile, 1)  # today's main: flagged from the first one


def test_values_beyond_the_range_at_a_rate_above_its_chance_are_a_finding(profile: Profile) -> None:
    assert ("amount", 5, True) in _violations(profile, 5)
    assert ("income", 0, False) in _violations(profile, 5)


def test_a_contract_without_a_chance_flags_the_first_value_as_before(profile: Profile) -> None:
    old = {
        name: replace(f, allowed_chance=None) if isinstance(f, NumericProfile) else f
        for name, f in profile.features.items()
    }
    assert ("amount", 1, True) in _violations(replace(profile, features=old), 1)


def test_the_violation_check_is_a_binomial_test_at_the_chance() -> None:
    quiet = violation_check(feature="x", count=1, rows=ROWS, expected_rate=1e-9, alpha=1e-7)
    assert not quiet.flagged and quiet.p_value == pytest.approx(1 - (1 - 1e-9) ** ROWS, rel=1e-6)
    assert violation_check(feature="x", count=2, rows=ROWS, expected_rate=1e-9, alpha=1e-7).flagged
    assert violation_check(feature="x", count=1, rows=ROWS, expected_rate=None, alpha=1e-7).flagged
    assert not violation_check(feature="x", count=0, rows=ROWS, expected_rate=None, alpha=1e-7).flagged


def test_one_far_legitimate_value_does_not_make_the_joint_distribution_drift(profile: Profile) -> None:
    rng = np.random.default_rng(42)
    window = {"amount": rng.lognormal(3.0, 1.5, ROWS), "income": rng.lognormal(10.0, 0.8, ROWS)}
    amount = profile.features["amount"]
    assert isinstance(amount, NumericProfile) and amount.allowed_max is not None
    window["amount"][0] = amount.allowed_max / 10  # far beyond the reference, inside the allowed range
    report = evaluate(
        profile=profile, sketch=sketch_columns(profile=profile, columns=window), every_s=EVERY_5_MIN
    )
    assert report.multivariate is not None and not report.multivariate.drifted
    assert not any(f.drifted for f in report.features)
