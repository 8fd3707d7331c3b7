"""The statistics no longer import ``scipy.stats`` (its import alone is ~0.7 s of `driftwarden drift`).

Each replacement (a few lines of numpy, or the ``scipy.special`` function scipy.stats itself evaluates) is
checked against the scipy.stats function it replaces on many random inputs, edge cases included: every
result must be *identical*, bit for bit, so that no verdict and no figure of a report changes. The threads
that summarise and count columns must not change a figure either.
"""

from __future__ import annotations

from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import numpy as np
import pytest
from scipy import stats
from scipy.spatial.distance import jensenshannon

from monitors.binning import cell_points, count_on_grid
from monitors.drift.base import benjamini_hochberg
from monitors.drift.categorical import CategoricalCounts, ChiSquare, aligned
from monitors.drift.numeric import js_distance, ks_p_value, wasserstein_1d
from monitors.engine import sketch_columns
from monitors.performance import mid_ranks, roc_auc
from monitors.profile import build_reference_profile, profile_from_dict
from monitors.quality import binomial_sf
from monitors.sketch import WindowSketch
from registry.schema import ModelSchema, OutputSpec, infer_feature

RNG_SEED = 20261130


def _p_value_sets(rng: np.random.Generator) -> Iterator[np.ndarray]:
    for i in range(4000):
        m = int(rng.integers(1, 60))
        yield [
            rng.uniform(0, 1, m),
            rng.uniform(0, 1, m) ** 8,  # many tiny ones
            np.round(rng.uniform(0, 0.1, m), 3),  # ties
            np.concatenate([rng.uniform(0, 1e-300, m), [0.0, 1.0, 1.0]]),  # extremes
        ][i % 4]


def test_benjamini_hochberg_is_scipys() -> None:
    rng = np.random.default_rng(RNG_SEED)
    for p in _p_value_sets(rng):
        want = stats.false_discovery_control(p, method="bh")
        assert np.array_equal(benjamini_hochberg(p), want), p


def test_ks_p_values_are_scipys() -> None:
    rng = np.random.default_rng(RNG_SEED)
    d = np.concatenate([[0.0, 1.0], rng.uniform(0, 0.05, 3000), rng.uniform(0, 1, 500)])
    for n, m in [(1_000_000, 1_000_000), (200_000, 30_000), (20_001, 20_001)]:  # Stephens' limit
        e = np.sqrt(n * m / (n + m))
        want = np.clip(stats.kstwobign.sf((e + 0.12 + 0.11 / e) * d), 0.0, 1.0)
        assert np.array_equal([ks_p_value(float(x), n=n, m=m) for x in d], want)
    for n, m in [(50, 70), (500, 700), (3_000, 4_000)]:  # the small-sample law: still scipy.stats.kstwo
        en = round(n * m / (n + m))
        for x in d[:40]:
            assert ks_p_value(float(x), n=n, m=m) == float(np.clip(stats.kstwo.sf(x, en), 0.0, 1.0))


def _weighted_samples(rng: np.random.Generator) -> Iterator[tuple[np.ndarray, ...]]:
    for i in range(3000):
        kind = i % 3
        if kind == 0:  # continuous points, integer weights (a zero among them)
            u, v = rng.normal(size=int(rng.integers(1, 300))), rng.normal(0.3, size=int(rng.integers(1, 300)))
            uw, vw = (rng.integers(0, 50, x.size).astype(np.float64) for x in (u, v))
            uw[0], vw[0] = uw[0] + 1, vw[0] + 1
        elif kind == 1:  # shared and tied points, real weights
            u = np.round(rng.normal(size=int(rng.integers(1, 300))), 1)
            v = np.round(rng.normal(size=int(rng.integers(1, 300))), 1)
            uw, vw = rng.uniform(0, 3, u.size), rng.uniform(0, 3, v.size)
        else:  # what the Wasserstein test compares: the cells of two histograms on one reference grid
            ref = rng.lognormal(size=5000)
            grid = np.unique(np.quantile(ref, np.linspace(0, 1, 101), method="inverted_cdf"))
            a, b = count_on_grid(ref, grid), count_on_grid(rng.lognormal(0.1, size=3000), grid)
            u, v = (
                cell_points(grid, cells=a.cells, sums=a.sums),
                cell_points(grid, cells=b.cells, sums=b.sums),
            )
            uw, vw = a.cells.astype(np.float64), b.cells.astype(np.float64)
        yield u, v, uw, vw


def test_wasserstein_is_scipys() -> None:
    rng = np.random.default_rng(RNG_SEED)
    for u, v, uw, vw in _weighted_samples(rng):
        assert wasserstein_1d(u, v, uw, vw) == stats.wasserstein_distance(u, v, uw, vw)


def test_jensen_shannon_is_scipys() -> None:
    rng = np.random.default_rng(RNG_SEED)
    for i in range(5000):
        r = rng.integers(0, 1000, int(rng.integers(2, 40))).astype(np.float64)
        c = rng.integers(0, 1000, r.size).astype(np.float64)
        if i % 5 == 0:
            r[:3] = 0  # empty bins on one side: 0 log 0
        if r.sum() and c.sum():
            assert js_distance(r, c) == float(jensenshannon(r, c, base=2))


def test_chi_square_is_scipys() -> None:
    rng = np.random.default_rng(RNG_SEED)
    for i in range(6000):
        k = int(rng.integers(2, 30))
        if i % 3 == 0:
            r, c = rng.integers(0, 1_000_000, k), rng.integers(0, 1_000_000, k)
        elif i % 3 == 1:
            r, c = rng.integers(0, 20, k), rng.integers(0, 20, k)  # small counts
        else:
            r = rng.multinomial(int(rng.integers(1000, 1_000_000)), np.ones(k) / k)
            c = rng.multinomial(int(rng.integers(10, 100_000)), rng.dirichlet(np.ones(k) * 50))
        r[0], c[0], r[1] = r[0] + 1, c[0] + 1, r[1] + 1
        if i % 7 == 0:
            r[-1] = c[-1] = 0  # a category absent from both sides is dropped
        names = [f"c{j}" for j in range(k)]
        ref, cur = (
            CategoricalCounts(dict(zip(names, r.tolist(), strict=True))),
            CategoricalCounts(dict(zip(names, c.tolist(), strict=True))),
        )
        got = ChiSquare().measure(ref, cur)
        _, rr, cc = aligned(ref, cur)  # the table in the order the test builds it
        keep = (rr + cc) > 0
        want = stats.chi2_contingency(np.vstack([rr[keep], cc[keep]]), correction=False)
        assert (got.statistic, got.p_value, got.details["dof"]) == (
            float(want.statistic),
            float(want.pvalue),
            int(want.dof),
        )


def test_binomial_tail_is_scipys() -> None:
    rng = np.random.default_rng(RNG_SEED)
    for i in range(20_000):
        n = int(rng.integers(1, [50, 5000, 3_000_000][i % 3]))
        p = float(rng.choice([rng.uniform(0, 1), rng.uniform(0, 0.02), 0.0, 1.0, 2 / (n + 1)]))
        k = int(rng.integers(-1, n + 2)) if i % 2 else int(n * p * rng.uniform(0.5, 2)) - 1
        assert binomial_sf(k, n, p) == float(stats.binom.sf(k, n, p)), (k, n, p)


def test_mid_ranks_and_auc_are_scipys() -> None:
    rng = np.random.default_rng(RNG_SEED)
    for i in range(3000):
        n = int(rng.integers(0, 2000))
        x = [rng.normal(size=n), np.round(rng.uniform(0, 1, n), 2), rng.integers(0, 3, n), np.full(n, 0.5)][
            i % 4
        ]
        if i % 50 == 0 and n:
            x = x.astype(np.float64)
            x[0] = np.nan  # propagates: every rank NaN
        assert np.array_equal(mid_ranks(x), stats.rankdata(x), equal_nan=True)
        y = rng.integers(0, 2, n)
        if 0 < y.sum() < n and not np.isnan(x).any():
            ranks = stats.rankdata(x)
            pos = int(y.sum())
            want = (float(ranks[y.astype(bool)].sum()) - pos * (pos + 1) / 2.0) / (pos * (n - pos))
            assert roc_auc(y_true=y, y_score=x) == want


def _columns(rows: int, seed: int, shift: float) -> dict[str, Any]:
    rng = np.random.default_rng(seed)
    cols: dict[str, Any] = {f"x{j}": rng.normal(shift * j, 1 + j, rows) for j in range(6)}
    cols["n"] = rng.poisson(3 + shift, rows)
    cols["gap"] = np.where(rng.random(rows) < 0.05, np.nan, rng.exponential(2, rows))
    cols["cat"] = rng.choice(np.array(["a", "b", "c", "d"], dtype=object), rows, p=[0.4, 0.3, 0.2, 0.1])
    return cols


def test_threads_change_no_figure(monkeypatch: pytest.MonkeyPatch) -> None:
    """The profile and the sketch are the same on one thread and on several."""
    import monitors.profile

    ref, cur = _columns(30_000, 1, 0.0), _columns(20_000, 2, 0.1)
    schema = ModelSchema(
        features=tuple(infer_feature(k, v) for k, v in ref.items()),
        outputs=(OutputSpec(name="p"),),
        target="",
    )
    monkeypatch.setattr(monitors.profile, "WORKERS", 1)
    alone = build_reference_profile(ref, schema)
    monkeypatch.setattr(monitors.profile, "WORKERS", 4)
    together = build_reference_profile(ref, schema)
    assert together == alone
    profile = profile_from_dict(together)
    one = sketch_columns(profile=profile, columns=cur, chunk_rows=3000)
    with ThreadPoolExecutor(max_workers=3) as pool:
        many = WindowSketch()
        for start in range(0, 20_000, 3000):
            many.update(profile, {k: v[start : start + 3000] for k, v in cur.items()}, pool=pool)
    assert many.rows == one.rows and many.categorical == one.categorical
    for name, counts in one.numeric.items():
        assert np.array_equal(counts.cells, many.numeric[name].cells)
        assert np.array_equal(counts.sums, many.numeric[name].sums)
        assert (counts.missing, counts.outside) == (many.numeric[name].missing, many.numeric[name].outside)
    assert one.pca_error is not None and many.pca_error is not None
    assert np.array_equal(one.pca_error.cells, many.pca_error.cells)
    assert np.array_equal(one.pca_error.sums, many.pca_error.sums)
