"""The allowed range of a numeric feature from a tail estimate of its reference (registry/tails.py)."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import astuple

import numpy as np
import pytest

from registry.contracts import ContractViolation, check_inputs
from registry.schema import FeatureKind, ModelSchema, OutputSpec, infer_feature
from registry.tails import DEFAULT_CHANCE, MIN_SAMPLE, allowed_range, fit_gpd, gpd_excess

Draw = Callable[[np.random.Generator, int], np.ndarray]
HEAVY: dict[str, Draw] = {
    "lognormal": lambda rng, n: rng.lognormal(10.0, 1.0, n),  # an income
    "lognormal_wide": lambda rng, n: rng.lognormal(3.0, 2.0, n),  # an amount
    "pareto": lambda rng, n: 100.0 * (rng.pareto(1.5, n) + 1.0),  # Pareto, tail index 1.5
}


@pytest.mark.parametrize(("shape", "scale"), [(-0.2, 2.0), (0.0, 1.0), (0.3, 5.0), (0.7, 2.0)])
def test_the_fit_recovers_a_generalized_pareto(shape: float, scale: float) -> None:
    rng = np.random.default_rng(7)
    fitted_scale, fitted_shape = fit_gpd(gpd_excess(rng.random(20_000), scale=scale, shape=shape))
    assert fitted_shape == pytest.approx(shape, abs=0.05)
    assert fitted_scale == pytest.approx(scale, rel=0.06)


@pytest.mark.parametrize("name", sorted(HEAVY))
@pytest.mark.parametrize("seed", [1, 2, 3])
def test_fresh_heavy_tailed_values_are_refused_at_most_at_the_stated_chance(name: str, seed: int) -> None:
    rng = np.random.default_rng(seed)
    reference = HEAVY[name](rng, 20_000)
    fresh = HEAVY[name](rng, 1_000_000)
    # a chance large enough to count: at most its expected refusals plus four Poisson standard deviations
    chance = 1e-4
    wide = allowed_range(reference, chance=chance)
    expected = chance * fresh.size
    assert wide.chance in {chance / 2, chance}  # half of it on a side bounded at 0 instead
    assert ((fresh < wide.low) | (fresh > wide.high)).sum() <= expected + 4 * math.sqrt(expected)
    # the default chance: 1e6 fresh values expect 0.001 refusals
    spec = infer_feature("x", reference)
    assert spec.allowed_chance in {DEFAULT_CHANCE / 2, DEFAULT_CHANCE}
    assert spec.allowed_min is not None and spec.allowed_max is not None
    assert not ((fresh < spec.allowed_min) | (fresh > spec.allowed_max)).any()


def test_a_rare_legitimate_lognormal_value_passes_the_contract() -> None:
    """Today's 'maximum plus one span' refused this: the largest of a million incomes from the same law."""
    rng = np.random.default_rng(11)
    reference = rng.lognormal(10.0, 1.0, 10_000)
    rare = float(rng.lognormal(10.0, 1.0, 1_000_000).max())
    spec = infer_feature("income", reference)
    schema = ModelSchema(features=(spec,), outputs=(OutputSpec("probability"),), target="y")
    assert rare > 2 * reference.max() - reference.min()  # beyond the old allowed maximum
    check_inputs(schema, {"income": [rare]}, 1)
    with pytest.raises(ContractViolation) as info:
        check_inputs(schema, {"income": [-1.0]}, 1)  # an income is never negative: its natural bound
    assert info.value.violations[0].rule == "allowed_range"


def test_a_light_tailed_feature_keeps_a_narrow_range() -> None:
    rng = np.random.default_rng(5)
    for _ in range(5):
        x = rng.normal(0.0, 1.0, 10_000)
        r = allowed_range(x)
        # the normal's 0.5e-9 quantiles are +-6.1 sd: wider, but not absurdly (the old rule: about +-11.5 sd)
        assert 6.1 < r.high < 11.0 and -11.0 < r.low < -6.1
        assert r.lower is not None and r.upper is not None


def test_fallbacks_small_discrete_constant_and_natural_bound() -> None:
    rng = np.random.default_rng(3)
    small = rng.normal(5.0, 1.0, MIN_SAMPLE - 1)
    r = allowed_range(small)
    span = small.max() - small.min()
    assert (r.low, r.high, r.chance) == (0.0, pytest.approx(small.max() + max(span, small.max())), 0.0)
    counts = rng.integers(0, 8, 5_000).astype(np.float64)  # a bounded count: both sides by the span rule
    r = allowed_range(counts)
    assert (r.low, r.high, r.chance, r.lower, r.upper) == (0.0, 14.0, 0.0, None, None)
    r = allowed_range(np.full(1_000, -3.0))
    assert (r.low, r.high, r.chance) == (-6.0, 0.0, 0.0)
    amounts = rng.exponential(50.0, 5_000)  # >= 0: never allowed below 0, and no chance is spent there
    r = allowed_range(amounts)
    assert r.low == 0.0 and r.chance == pytest.approx(DEFAULT_CHANCE / 2) and r.upper is not None
    assert r.high > amounts.max()
    with pytest.raises(ValueError, match="range chance"):
        allowed_range(amounts, chance=0.0)


def test_the_chance_is_stored_and_an_old_contract_reads_as_before() -> None:
    rng = np.random.default_rng(0)
    spec = infer_feature("x", rng.lognormal(0.0, 1.0, 2_000), range_chance=1e-6)
    schema = ModelSchema(features=(spec,), outputs=(OutputSpec("probability"),), target="y")
    doc = schema.to_dict()
    assert doc["features"][0]["allowed_chance"] == pytest.approx(0.5e-6)
    assert ModelSchema.from_dict(doc) == schema
    del doc["features"][0]["allowed_chance"]
    old = ModelSchema.from_dict(doc).features[0]
    assert old.kind is FeatureKind.NUMERIC and old.allowed_chance is None
    assert (old.allowed_min, old.allowed_max) == (spec.allowed_min, spec.allowed_max)


def _columns() -> dict[str, np.ndarray]:
    """Columns of every shape the inference meets: heavy and light tails, missing values and infinities,
    integers, a constant, too few values, a zero at either end (and both signs of zero)."""
    rng = np.random.default_rng(11)
    normal = rng.normal(size=30_000)
    holes = normal.copy()
    holes[rng.integers(0, holes.size, 500)] = np.nan
    holes[:3] = [np.inf, -np.inf, np.inf]
    zeros = np.abs(normal)
    zeros[:50] = -0.0
    zeros[100:150] = 0.0  # zeros of both signs at the low end
    return {
        **{name: draw(rng, 30_000) for name, draw in HEAVY.items()},
        "normal": normal,
        "holes": holes,
        "integers": rng.poisson(40.0, 30_000).astype(np.int64),
        "negative_integers": -rng.poisson(40.0, 30_000).astype(np.int64) - 1,
        "constant": np.full(1_000, 3.5),
        "few": rng.normal(size=MIN_SAMPLE - 1),
        "zero_low": zeros,
        "zero_high": -zeros,
        "positive_zero_low": np.maximum(normal, 0.0),
        "negative_zero_high": np.minimum(normal, -0.0),
        "counts": rng.poisson(1.0, 30_000).astype(np.int64),
        "all_missing": np.full(300, np.nan),
        "empty": np.zeros(0),
    }


@pytest.mark.parametrize("name", sorted(_columns()))
def test_a_sorted_column_gives_the_same_spec_and_range(name: str) -> None:
    values = _columns()[name]
    ordered = np.sort(values.astype(np.float64))
    assert infer_feature(name, values, ordered=ordered) == infer_feature(name, values)
    present = values[~np.isnan(values)] if values.dtype.kind == "f" else values
    zeros = np.signbit(values[values == 0])
    if not (zeros.any() and not zeros.all()):  # zeros of both signs: an extreme's sign is the order's
        assert allowed_range(ordered, ordered=True) == allowed_range(present)
    got_spec, want_spec = infer_feature(name, values, ordered=ordered), infer_feature(name, values)
    for got, want in zip(astuple(got_spec), astuple(want_spec), strict=True):  # each sign too: -0.0 == 0.0
        assert not isinstance(got, float) or math.copysign(1.0, got) == math.copysign(1.0, want)
