"""Every statistic against a direct scipy/numpy computation on the same inputs."""

from __future__ import annotations

import numpy as np
import pytest
from scipy import stats
from scipy.spatial.distance import jensenshannon

from monitors.drift import (
    CategoricalCounts,
    CategoricalJensenShannon,
    CategoricalPSI,
    ChiSquare,
    KolmogorovSmirnov,
    NumericCounts,
    NumericJensenShannon,
    NumericPSI,
    UnseenCategories,
    Wasserstein,
    adjust_p_values,
)
from monitors.drift.numeric import ks_p_value
from tests.monitors.helpers import numeric_pair

REL = 1e-9


def test_ks_is_exact_on_discrete_data() -> None:
    rng = np.random.default_rng(1)
    ref = rng.integers(0, 40, 20_000).astype(np.float64)
    cur = rng.integers(2, 44, 5_000).astype(np.float64)  # also beyond the reference range
    r, c = numeric_pair(ref, cur)
    assert r.grid.size == np.unique(ref).size  # the sketch holds every reference value
    got = KolmogorovSmirnov()(r, c)
    want = stats.ks_2samp(ref, cur, method="asymp")
    assert got.statistic == pytest.approx(want.statistic, rel=REL)
    assert got.p_value == pytest.approx(want.pvalue, rel=REL)


def test_ks_on_continuous_data_is_within_one_grid_cell() -> None:
    rng = np.random.default_rng(2)
    ref, cur = rng.normal(size=30_000), rng.normal(0.05, 1.0, 4_000)
    r, c = numeric_pair(ref, cur)
    got = KolmogorovSmirnov()(r, c)
    want = stats.ks_2samp(ref, cur, method="asymp")
    max_open_cell = r.cells[0::2].max() / r.n
    assert want.statistic - max_open_cell <= got.statistic <= want.statistic + 1e-12
    # same statistic formula -> same p-value formula
    assert got.p_value == pytest.approx(
        stats.kstwo.sf(got.statistic, round(30_000 * 4_000 / 34_000)), rel=REL
    )


def test_ks_p_value_large_samples_uses_stephens_form() -> None:
    n, m, d = 200_000, 1_000_000, 0.004
    en = n * m / (n + m)
    e = np.sqrt(en)
    assert ks_p_value(d, n=n, m=m) == pytest.approx(stats.kstwobign.sf((e + 0.12 + 0.11 / e) * d), rel=REL)
    assert ks_p_value(d, n=n, m=m) == pytest.approx(stats.kstwo.sf(d, round(en)), rel=0.01)


def test_wasserstein_is_exact_on_discrete_data() -> None:
    rng = np.random.default_rng(3)
    ref = rng.integers(0, 30, 20_000).astype(np.float64)
    cur = np.concatenate([rng.integers(3, 30, 4_000), [35.0, 41.0, -4.0]])  # out-of-range tails both sides
    r, c = numeric_pair(ref, cur)
    got = Wasserstein()(r, c)
    want = stats.wasserstein_distance(ref, cur)
    assert got.statistic == pytest.approx(want, rel=REL)
    assert got.effect == pytest.approx(want / ref.std(), rel=REL)
    assert got.p_value is None


@pytest.mark.filterwarnings("error")  # no NaN or overflow on the way
def test_wasserstein_counts_an_infinity_as_the_most_extreme_finite_value() -> None:
    """Infinities on either side: the distance is scipy's with each -inf and inf at the lowest and highest
    finite value of both samples (finite, not NaN), and grows with the share of values gone to infinity."""
    rng = np.random.default_rng(5)
    ref = rng.integers(0, 30, 20_000).astype(np.float64)
    ref[:3], ref[3] = np.inf, -np.inf
    cur = rng.integers(3, 30, 4_000).astype(np.float64)
    cur = np.concatenate([cur, [35.0, 35.0], [np.inf] * 40, [-np.inf] * 2])  # one value per cell: exact
    r, c = numeric_pair(ref, cur)
    got = Wasserstein()(r, c)
    both = np.concatenate([ref, cur])
    low, high = both[np.isfinite(both)].min(), both[np.isfinite(both)].max()
    finite_at_ends = [np.nan_to_num(x, neginf=low, posinf=high) for x in (ref, cur)]
    assert got.statistic == pytest.approx(stats.wasserstein_distance(*finite_at_ends), rel=REL)
    assert got.effect == pytest.approx(got.statistic / ref[np.isfinite(ref)].std(), rel=REL)
    more = cur.copy()
    more[:1_000] = np.inf  # a quarter of the window gone to infinity
    assert Wasserstein()(r, NumericCounts.from_values(more, reference=r)).statistic > 3 * got.statistic


def test_wasserstein_on_continuous_data_is_close() -> None:
    rng = np.random.default_rng(4)
    ref, cur = rng.lognormal(0, 0.5, 30_000), rng.lognormal(0.1, 0.55, 5_000)
    r, c = numeric_pair(ref, cur)
    assert Wasserstein()(r, c).statistic == pytest.approx(stats.wasserstein_distance(ref, cur), rel=1e-3)


def _decile_counts(ref: np.ndarray, cur: np.ndarray, cuts: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    k = cuts.size + 1
    rc = np.bincount(np.searchsorted(cuts, ref, side="left"), minlength=k)
    cc = np.bincount(np.searchsorted(cuts, cur, side="left"), minlength=k)
    return rc.astype(float), cc.astype(float)


def test_numeric_psi_and_js_match_direct_formula() -> None:
    rng = np.random.default_rng(5)
    ref, cur = rng.gamma(2.0, 1.0, 25_000), rng.gamma(2.3, 1.0, 6_000)
    r, c = numeric_pair(ref, cur)
    cuts = np.quantile(ref, np.arange(1, 10) / 10, method="inverted_cdf")
    assert np.allclose(r.cuts, cuts)
    rc, cc = _decile_counts(ref, cur, cuts)
    rp, cp = np.maximum(rc / rc.sum(), 1e-4), np.maximum(cc / cc.sum(), 1e-4)
    want_psi = float(np.sum((cp - rp) * np.log(cp / rp)))
    assert NumericPSI()(r, c).statistic == pytest.approx(want_psi, rel=REL)
    assert NumericJensenShannon()(r, c).statistic == pytest.approx(jensenshannon(rc, cc, base=2), rel=REL)
    # a direct base-2 JS divergence gives the same number
    p, q = rc / rc.sum(), cc / cc.sum()
    m = (p + q) / 2
    jsd = 0.5 * np.sum(p * np.log2(p / m)) + 0.5 * np.sum(q * np.log2(q / m))
    assert NumericJensenShannon()(r, c).statistic == pytest.approx(np.sqrt(jsd), rel=REL)


def test_psi_epsilon_keeps_empty_bins_finite() -> None:
    rng = np.random.default_rng(6)
    ref, cur = rng.normal(size=20_000), rng.normal(5.0, 0.1, 1_000)  # all current rows in the last bin
    r, c = numeric_pair(ref, cur)
    value = NumericPSI()(r, c).statistic
    rp = r.coarse() / r.n
    cp = np.maximum(np.r_[np.zeros(rp.size - 1), 1.0], 1e-4)
    assert value == pytest.approx(np.sum((cp - rp) * np.log(cp / rp)), rel=REL)
    assert np.isfinite(value) and value > 1


CATS = np.array(["a", "b", "c", "d"], dtype=object)


def _cat_counts(values: np.ndarray) -> CategoricalCounts:
    keys, n = np.unique(values.astype(str), return_counts=True)
    return CategoricalCounts(counts=dict(zip(keys.tolist(), n.tolist(), strict=True)))


def test_chi_square_matches_scipy_and_the_formula() -> None:
    rng = np.random.default_rng(7)
    ref = rng.choice(CATS, 20_000, p=[0.4, 0.3, 0.2, 0.1])
    cur = np.concatenate(
        [rng.choice(CATS, 3_000, p=[0.35, 0.3, 0.25, 0.1]), np.array(["e"] * 40, dtype=object)]
    )
    got = ChiSquare()(_cat_counts(ref), _cat_counts(cur))
    cats = ["a", "b", "c", "d", "e"]
    table = np.array([[np.sum(ref == k) for k in cats], [np.sum(cur == k) for k in cats]], dtype=float)
    want = stats.chi2_contingency(table, correction=False)
    assert got.statistic == pytest.approx(want.statistic, rel=REL)
    assert got.p_value == pytest.approx(want.pvalue, rel=REL)
    expected = table.sum(axis=1, keepdims=True) * table.sum(axis=0, keepdims=True) / table.sum()
    assert got.statistic == pytest.approx(np.sum((table - expected) ** 2 / expected), rel=REL)
    assert got.p_value == pytest.approx(stats.chi2.sf(got.statistic, 4), rel=REL)
    tv = 0.5 * np.abs(table[0] / table[0].sum() - table[1] / table[1].sum()).sum()
    assert got.effect == pytest.approx(tv, rel=REL)


def test_categorical_js_psi_unseen_match_direct_formula() -> None:
    rng = np.random.default_rng(8)
    ref = rng.choice(CATS, 10_000, p=[0.4, 0.3, 0.2, 0.1])
    cur = np.concatenate(
        [rng.choice(CATS[:3], 2_000, p=[0.5, 0.3, 0.2]), np.array(["new"] * 100, dtype=object)]
    )
    cats = ["a", "b", "c", "d", "new"]
    rc = np.array([np.sum(ref == k) for k in cats], dtype=float)
    cc = np.array([np.sum(cur == k) for k in cats], dtype=float)
    r, c = _cat_counts(ref), _cat_counts(cur)
    assert CategoricalJensenShannon()(r, c).statistic == pytest.approx(jensenshannon(rc, cc, base=2), rel=REL)
    rp, cp = np.maximum(rc / rc.sum(), 1e-4), np.maximum(cc / cc.sum(), 1e-4)
    assert CategoricalPSI()(r, c).statistic == pytest.approx(np.sum((cp - rp) * np.log(cp / rp)), rel=REL)
    unseen = UnseenCategories()(r, c)
    assert unseen.statistic == pytest.approx(100 / 2_100, rel=REL)
    assert unseen.drifted and unseen.details["unseen"] == {"new": 100}


def test_multiple_testing_adjustments() -> None:
    p = np.array([0.001, 0.04, 0.03, 0.2, np.nan, 0.012])
    bh = adjust_p_values(p, method="bh")
    ok = ~np.isnan(p)
    # Benjamini-Hochberg by hand: p_(i) * m / i, made monotone from the top
    order = np.argsort(p[ok])
    m = ok.sum()
    raw = p[ok][order] * m / np.arange(1, m + 1)
    by_hand = np.minimum.accumulate(raw[::-1])[::-1]
    want = np.empty(m)
    want[order] = np.minimum(by_hand, 1)
    assert np.allclose(bh[ok], want, rtol=REL)
    assert np.isnan(bh[4])
    assert np.allclose(adjust_p_values(p, method="bonferroni")[ok], np.minimum(p[ok] * 5, 1), rtol=REL)
    assert np.allclose(adjust_p_values(p, method="none")[ok], p[ok], rtol=REL)
