"""Properties of every drift statistic on arbitrary finite data (hypothesis).

Finite inputs give finite statistics and effects and p-values in [0, 1]; identical samples measure zero
drift and are never called drifted; the symmetric measures (PSI, Jensen-Shannon, total variation,
chi-square, 1-D Wasserstein on counts) do not depend on which side is the reference; no result depends
on the order of the rows.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

from monitors.drift import (
    CategoricalCounts,
    CategoricalJensenShannon,
    CategoricalPSI,
    ChiSquare,
    KolmogorovSmirnov,
    NumericJensenShannon,
    NumericPSI,
    UnseenCategories,
    Wasserstein,
)
from monitors.drift.base import DriftTest
from monitors.drift.categorical import CategoricalDefault, aligned, total_variation
from monitors.drift.numeric import NumericDefault, js_distance, psi, wasserstein_1d
from tests.monitors.helpers import numeric_pair

NUMERIC_TESTS: list[type[DriftTest[Any]]] = [
    KolmogorovSmirnov,
    Wasserstein,
    NumericPSI,
    NumericJensenShannon,
    NumericDefault,
]
CATEGORICAL_TESTS: list[type[DriftTest[Any]]] = [
    ChiSquare,
    CategoricalJensenShannon,
    CategoricalPSI,
    UnseenCategories,
    CategoricalDefault,
]


def _close(expected: float) -> Any:
    """``expected`` to within rounding (relative 1e-9, absolute 1e-12)."""
    return pytest.approx(expected, rel=1e-9, abs=1e-12)


finite = st.floats(min_value=-1e9, max_value=1e9, allow_nan=False, allow_infinity=False, width=64)
samples = arrays(np.float64, st.integers(2, 150), elements=finite)
# few distinct values too: ties, constant columns and grids of a handful of cells are where edge cases live
few_values = arrays(np.float64, st.integers(2, 150), elements=st.sampled_from([-3.0, 0.0, 0.5, 7.0, 1e6]))
numeric = st.one_of(samples, few_values)
categories = st.lists(st.sampled_from(["a", "b", "c", "d", "é", "RENT"]), min_size=1, max_size=150)
count_vectors = st.integers(1, 12).flatmap(
    lambda k: st.tuples(
        arrays(np.float64, k, elements=st.integers(0, 10_000).map(float)),
        arrays(np.float64, k, elements=st.integers(0, 10_000).map(float)),
    )
)
SETTINGS = settings(max_examples=60, deadline=None)


def _finite_result(result: object) -> None:
    statistic, effect, p = result.statistic, result.effect, result.p_value  # type: ignore[attr-defined]
    assert math.isfinite(statistic) and math.isfinite(effect), result
    assert p is None or 0.0 <= p <= 1.0, result


@SETTINGS
@given(reference=numeric, current=numeric)
def test_numeric_statistics_are_finite(reference: np.ndarray, current: np.ndarray) -> None:
    r, c = numeric_pair(reference, current)
    for test in NUMERIC_TESTS:
        _finite_result(test()(r, c))


@SETTINGS
@given(values=numeric)
def test_identical_numeric_samples_show_no_drift(values: np.ndarray) -> None:
    r, c = numeric_pair(values, values)
    for test in NUMERIC_TESTS:
        result = test()(r, c)
        assert result.statistic == pytest.approx(0.0, abs=1e-9), (test.name, result)
        assert not result.drifted, (test.name, result)


@SETTINGS
@given(reference=numeric, current=numeric, seed=st.integers(0, 2**32 - 1))
def test_numeric_results_ignore_row_order(reference: np.ndarray, current: np.ndarray, seed: int) -> None:
    rng = np.random.default_rng(seed)
    r, c = numeric_pair(reference, current)
    r2, c2 = numeric_pair(rng.permutation(reference), rng.permutation(current))
    for test in NUMERIC_TESTS:
        a, b = test()(r, c), test()(r2, c2)
        assert a.statistic == _close(b.statistic), test.name
        assert a.effect == _close(b.effect), test.name
        assert a.drifted == b.drifted, test.name


@SETTINGS
@given(pair=count_vectors)
def test_count_distances_are_symmetric_and_zero_on_equal_counts(pair: tuple[np.ndarray, np.ndarray]) -> None:
    a, b = pair
    assert psi(a, b) == _close(psi(b, a))
    assert js_distance(a, b) == _close(js_distance(b, a))
    assert total_variation(a, b) == _close(total_variation(b, a))
    for x in (a, b):
        assert psi(x, x) == pytest.approx(0.0, abs=1e-12)
        assert js_distance(x, x) == pytest.approx(0.0, abs=1e-7)  # sqrt of a rounding error
        assert total_variation(x, x) == pytest.approx(0.0, abs=1e-12)
    for value in (psi(a, b), js_distance(a, b), total_variation(a, b)):
        assert math.isfinite(value) and value >= 0.0
    if a.sum() > 0 and b.sum() > 0:
        points = np.arange(a.size, dtype=np.float64)
        w = wasserstein_1d(points, points, a, b)
        assert math.isfinite(w) and w == _close(wasserstein_1d(points, points, b, a))


@SETTINGS
@given(reference=categories, current=categories)
def test_categorical_statistics_are_finite_and_symmetric(reference: list[str], current: list[str]) -> None:
    r = CategoricalCounts.from_values(np.asarray(reference, dtype=object))
    c = CategoricalCounts.from_values(np.asarray(current, dtype=object))
    for test in CATEGORICAL_TESTS:
        _finite_result(test()(r, c))
    for test in (ChiSquare, CategoricalJensenShannon, CategoricalPSI):  # UnseenCategories is one-sided
        assert test()(r, c).statistic == _close(test()(c, r).statistic), test.name
    _, rv, cv = aligned(r, c)
    assert total_variation(rv, cv) == _close(total_variation(cv, rv))


@SETTINGS
@given(values=categories, seed=st.integers(0, 2**32 - 1))
def test_identical_categorical_samples_show_no_drift_in_any_order(values: list[str], seed: int) -> None:
    shuffled = list(np.random.default_rng(seed).permutation(np.asarray(values, dtype=object)))
    r = CategoricalCounts.from_values(np.asarray(values, dtype=object))
    c = CategoricalCounts.from_values(np.asarray(shuffled, dtype=object))
    assert r == c  # counting ignores the row order
    for test in CATEGORICAL_TESTS:
        result = test()(r, c)
        assert result.statistic == pytest.approx(0.0, abs=1e-7), (test.name, result)
        assert not result.drifted, (test.name, result)
