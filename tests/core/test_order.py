"""A partial sort (``core.order.partial_sort``) reads as the whole sort at the ranks and spans it was asked.

Hypothesis draws columns of thousands of values of varied shapes (smooth, heavy-tailed, piled on a few
points, with infinities, signed zeros and far-out values), the quantile ranks a profile asks plus others,
and spans at either end; every value read must be the sorted column's, and a rank never asked is refused.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import event, given, settings
from hypothesis import strategies as st

from core.order import PartialSort, Scratch, partial_sort

SHAPES = ["normal", "lognormal", "uniform", "cauchy", "counts", "rounded", "two_points", "constant"]
SPECIAL = [np.inf, -np.inf, 0.0, -0.0, 1e300, -1e300, 5e-324]


def column(shape: str, n: int, seed: int, specials: list[float]) -> np.ndarray:
    rng = np.random.default_rng(seed)
    x = {
        "normal": lambda: rng.normal(50.0, 10.0, n),
        "lognormal": lambda: rng.lognormal(10.0, 0.7, n),
        "uniform": lambda: rng.uniform(-1.0, 1.0, n),
        "cauchy": lambda: rng.standard_cauchy(n),
        "counts": lambda: rng.poisson(3.0, n).astype(np.float64),
        "rounded": lambda: np.round(rng.exponential(5.0, n), 1),
        "two_points": lambda: rng.choice([-2.5, 7.0], n),
        "constant": lambda: np.full(n, 3.25),
    }[shape]()
    if specials:
        x[rng.integers(0, n, len(specials))] = specials
    return x


@st.composite
def cases(draw: st.DrawFn) -> tuple[np.ndarray, np.ndarray, list[tuple[int, int]]]:
    smooth = st.sampled_from(["normal", "lognormal", "uniform"])  # the shapes sorted in part: drawn more
    shape = draw(st.one_of(smooth, smooth, st.sampled_from(SHAPES)))
    large = st.integers(min_value=40_000, max_value=120_000)  # above core.order.MIN_PARTIAL: sorted in part
    n = draw(st.one_of(st.integers(min_value=1, max_value=5_000), large, large))
    # zeros of both signs and the smallest subnormal leave a smooth column partly sorted; an infinity or a
    # far-out value sorts it whole
    near = st.lists(st.sampled_from([0.0, -0.0, 5e-324]), max_size=6)
    specials = draw(st.one_of(near, near, near, st.lists(st.sampled_from(SPECIAL), max_size=6)))
    x = column(shape, n, draw(st.integers(0, 2**32 - 1)), specials if n > len(specials) else [])
    quantiles = np.clip(np.ceil(np.linspace(0.0, 1.0, 1001) * n).astype(np.int64) - 1, 0, n - 1)
    others = draw(st.lists(st.integers(0, n - 1), max_size=20))
    ranks = np.concatenate([quantiles, np.array(others, dtype=np.int64)])
    k = draw(st.one_of(st.integers(0, min(n, 3_000)), st.integers(0, n)))
    low = draw(st.integers(0, n - k))
    return x, ranks, [(low, low + k), (n - k, n)]


@settings(max_examples=300, deadline=None)
@given(cases(), st.booleans())
def test_a_partial_sort_reads_as_the_sort(
    case: tuple[np.ndarray, np.ndarray, list[tuple[int, int]]], reuse: bool
) -> None:
    x, ranks, spans = case
    want = np.sort(x)
    order = partial_sort(x, ranks=ranks, spans=spans, scratch=Scratch() if reuse else None)
    event("sorted whole" if order.whole else "flat buckets" if order.flat is not None else "sorted in part")
    assert order.size == x.size
    assert np.array_equal(order.take(ranks), want[ranks])
    for start, stop in spans:
        assert np.array_equal(order.span(start, stop), want[start:stop])
    assert order.counts.sum() == x.size
    bare = partial_sort(x, ranks=ranks)  # the kind of answer depends on the ranks, not on the spans
    assert bare.whole == order.whole
    np.testing.assert_array_equal(bare.sums, order.sums)


def test_smooth_columns_sort_a_few_percent_and_refuse_what_was_not_asked() -> None:
    x = column("normal", 200_000, 7, [])
    ranks = np.arange(0, x.size, 1000)
    order = partial_sort(x, ranks=ranks, spans=[(0, 500)])
    assert not order.whole and order.values.size < 0.1 * x.size
    assert np.array_equal(order.take(ranks), np.sort(x)[ranks])
    missing = next(r for r in range(x.size) if not _asked(order, r))
    with pytest.raises(ValueError, match="not asked"):
        order.take(np.array([missing]))
    with pytest.raises(ValueError, match="not asked"):
        order.span(0, x.size)
    with pytest.raises(IndexError):
        order.take(np.array([x.size]))


def test_columns_piled_on_points_are_read_from_flat_buckets_and_unbounded_ones_sorted_whole() -> None:
    """Counts and rounded values fill buckets with one value each, many times over: those flat buckets are
    read without a sort (a bucket of -0.0 and 0.0 is not flat: they are two values, bit for bit). A column
    with an infinity is sorted whole."""
    ranks = np.arange(0, 100_000, 100)
    for shape in ("counts", "rounded", "two_points"):
        x = column(shape, 100_000, 3, [])
        order = partial_sort(x, ranks=ranks, spans=[(0, 5_000), (95_000, 100_000)])
        assert not order.whole and order.flat is not None, shape
        assert order.values.size < 0.01 * x.size, shape  # next to nothing sorted
        assert np.array_equal(order.take(ranks), np.sort(x)[ranks]), shape
        assert np.array_equal(order.span(0, 5_000), np.sort(x)[:5_000]), shape
    zeros = column("counts", 100_000, 4, [])
    zeros[zeros == 0] = np.where(np.arange(int((zeros == 0).sum())) % 2, 0.0, -0.0)
    order = partial_sort(zeros, ranks=ranks)
    assert order.flat is not None and not order.flat[order.bucket_of(np.array([0.0]))[0]]
    assert np.array_equal(order.take(ranks), np.sort(zeros)[ranks])
    order = partial_sort(column("normal", 100_000, 3, [np.inf]), ranks=ranks)
    assert order.whole


def _asked(order: PartialSort, rank: int) -> bool:
    bucket = int(np.searchsorted(order.ends, rank, side="right"))
    return bool(order.sorted_buckets[bucket])
