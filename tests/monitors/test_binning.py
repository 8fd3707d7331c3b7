"""Counting on a grid without sorting (``GridIndex``) gives the cells of the sort (``count_sorted``).

Hypothesis draws grids and values with atoms at grid points, duplicates, negative zero, infinities, NaN,
values far outside the grid and grids of one point; the cells, the missing and outside counts must be equal
and the sums equal to rounding (they are added in another order).
"""

from __future__ import annotations

import numpy as np
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from core.order import partial_sort
from monitors.binning import GridCounts, GridIndex, count_on_grid, count_ordered, count_sorted
from monitors.profile import quantile_positions

FINITE = st.floats(min_value=-1e6, max_value=1e6, allow_nan=False, allow_infinity=False)
ANY = st.one_of(
    FINITE,
    st.sampled_from([0.0, -0.0, np.inf, -np.inf, np.nan, 1e300, -1e300, 5e-324, 1.0, -1.0]),
)


def by_sorting(x: np.ndarray, grid: np.ndarray, limits: tuple[float | None, float | None]) -> GridCounts:
    """The reference: one sort, then the cells of the sorted values."""
    valid = np.sort(x[~np.isnan(x)])
    return count_sorted(valid, grid, missing=int(np.isnan(x).sum()), limits=limits)


def assert_same(got: GridCounts, want: GridCounts) -> None:
    assert got.cells.tolist() == want.cells.tolist()
    assert (got.missing, got.outside) == (want.missing, want.outside)
    finite = np.isfinite(want.sums)
    assert np.array_equal(np.isfinite(got.sums), finite)
    np.testing.assert_allclose(got.sums[finite], want.sums[finite], rtol=1e-9, atol=1e-6)
    assert got.sums[~finite].tolist() == want.sums[~finite].tolist()


@st.composite
def grids_and_values(draw: st.DrawFn) -> tuple[np.ndarray, np.ndarray]:
    points = draw(st.lists(FINITE, min_size=1, max_size=60))
    if draw(st.booleans()):  # a dense cluster beside a wide range, as quantiles of a skewed feature give
        centre = draw(FINITE)
        points += [centre + i * 1e-3 for i in range(draw(st.integers(1, 30)))]
    grid = np.unique(np.asarray(points, dtype=np.float64))
    values = draw(st.lists(st.one_of(ANY, st.sampled_from(grid.tolist())), max_size=300))
    return grid, np.asarray(values, dtype=np.float64)


@settings(max_examples=300, deadline=None)
@given(
    grids_and_values(),
    st.tuples(st.one_of(st.none(), FINITE), st.one_of(st.none(), FINITE)),
)
def test_the_index_counts_what_the_sort_counts(
    case: tuple[np.ndarray, np.ndarray], limits: tuple[float | None, float | None]
) -> None:
    grid, x = case
    index = GridIndex.of(grid)
    if index is not None:  # the grid the index serves: its own count, next to the sort's
        valid = x[~np.isnan(x)]
        cells, sums = index.count(valid)
        assert_same(GridCounts(cells=cells, sums=sums, missing=0), by_sorting(valid, grid, (None, None)))
    assert_same(count_on_grid(x, grid, limits=limits), by_sorting(x, grid, limits))


def by_fancy_indexing(index: GridIndex, x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The index's count as first written (fancy indexing, a copy per step): the reference of the in-place
    count, which must give the same cells and the very same sums (the same additions in the same order)."""
    bucket = np.zeros(x.size, dtype=np.int64)
    if index.buckets > 1:
        with np.errstate(over="ignore"):
            t = (x - index.low) * index.scale
        bucket = np.clip(t, 0, index.buckets - 1).astype(np.int64)
    base = index.start[bucket]
    cell = 2 * base
    for step in range(index.depth):
        point = index.points[base + step]
        cell += point <= x
        cell += point < x
    return np.bincount(cell, minlength=index.size), np.bincount(cell, weights=x, minlength=index.size)


@settings(max_examples=300, deadline=None)
@given(grids_and_values())
def test_the_index_counts_in_place_what_it_counted_with_copies(case: tuple[np.ndarray, np.ndarray]) -> None:
    grid, x = case
    index = GridIndex.of(grid)
    assume(index is not None)  # a grid too uneven for an index is counted by sorting (the test above)
    assert index is not None
    valid = x[~np.isnan(x)]
    cells, sums = index.count(valid)
    want_cells, want_sums = by_fancy_indexing(index, valid)
    assert cells.tolist() == want_cells.tolist()
    assert sums.tobytes() == want_sums.tobytes()


def test_an_uneven_grid_is_counted_by_sorting() -> None:
    # 40 points within 1e-9 of each other beside one far away: one bucket would hold them all
    grid = np.unique(np.concatenate([np.arange(40) * 1e-11, [1e6]]))
    assert GridIndex.of(grid) is None
    x = np.concatenate([grid, grid[:5] + 1e-12, [np.nan, -1.0, 2e6]])
    assert_same(count_on_grid(x, grid), by_sorting(x, grid, (None, None)))


def test_typical_grids_are_served_by_the_index_once() -> None:
    rng = np.random.default_rng(3)
    for ref in (rng.normal(50, 10, 100_000), rng.lognormal(10, 1, 100_000), rng.poisson(5, 100_000) * 1.0):
        grid = np.unique(np.quantile(ref, np.linspace(0, 1, 1001), method="inverted_cdf"))
        index = GridIndex.of(grid)
        assert index is not None and GridIndex.of(grid) is index  # built once per grid array
        x = np.concatenate([rng.choice(ref, 5000), [np.nan] * 7, grid])
        assert_same(count_on_grid(x, grid, limits=(40.0, 60.0)), by_sorting(x, grid, (40.0, 60.0)))
    assert GridIndex.of(np.array([])) is None


def test_an_index_leaves_with_its_grid() -> None:
    grid = np.linspace(0.0, 1.0, 101)
    assert GridIndex.of(grid) is not None
    key = id(grid)
    assert key in GridIndex._cache
    del grid  # a profile dropped after its run: its grids' indexes must not pile up
    assert key not in GridIndex._cache


@settings(max_examples=100, deadline=None)
@given(
    st.sampled_from(["normal", "lognormal", "uniform", "counts", "rounded", "cauchy"]),
    st.one_of(st.integers(min_value=1, max_value=5_000), st.integers(min_value=40_000, max_value=100_000)),
    st.integers(0, 2**32 - 1),
    st.integers(0, 6_000),
)
def test_a_partial_sort_counts_its_own_quantile_grid_as_the_sort(
    shape: str, n: int, seed: int, tail: int
) -> None:
    """``count_ordered`` on the grid of a column's quantiles: the cells of the sort, sums equal to rounding,
    and the same sums whatever other spans the partial sort was asked (the offline path asks the tails)."""
    rng = np.random.default_rng(seed)  # above core.order.MIN_PARTIAL values, smooth shapes sort in part
    x = {
        "normal": lambda: rng.normal(50.0, 10.0, n),
        "lognormal": lambda: rng.lognormal(10.0, 1.0, n),
        "uniform": lambda: rng.uniform(-1.0, 1.0, n),
        "counts": lambda: rng.poisson(3.0, n).astype(np.float64),  # piled: read from flat buckets
        "rounded": lambda: np.round(rng.exponential(5.0, n), 1),
        "cauchy": lambda: rng.standard_cauchy(n),
    }[shape]()
    ranks = quantile_positions(n, np.linspace(0.0, 1.0, 1001))
    order = partial_sort(x, ranks=ranks)
    grid = np.unique(order.take(ranks))
    got = count_ordered(order, grid)
    assert_same(got, by_sorting(x, grid, (None, None)))
    k = min(tail, n)
    with_tails = count_ordered(partial_sort(x, ranks=ranks, spans=[(0, k), (n - k, n)]), grid)
    assert with_tails.cells.tolist() == got.cells.tolist()
    assert with_tails.sums.tolist() == got.sums.tolist()
