"""Counting values on a reference grid: the mergeable summary every numeric drift test reads.

A *grid* is the sorted array of distinct reference quantiles ``g_0 < g_1 < ... < g_{k-1}``. It
splits the real line into ``2k + 1`` *cells*, alternating open intervals and single points::

    cell 0      (-inf, g_0)
    cell 2j+1   {g_j}                  (the atom at a grid point)
    cell 2j+2   (g_j, g_{j+1})          (and (g_{k-1}, +inf) for the last one)

Counts per cell are exact, additive across chunks, and give both ``F(g_j)`` and the left limit
``F(g_j-)`` of an empirical CDF at every grid point, which is what the Kolmogorov-Smirnov statistic
and the coarse PSI/JS bins need. The sum of the values in each cell is kept too, so each cell's
mass can be placed at its own mean for the Wasserstein distance (exact for atoms and for values
beyond the reference range, where the other side has no mass).
"""

from __future__ import annotations

import math
import weakref
from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from core.order import PartialSort
from core.tabular import Column, as_float


@dataclass
class GridCounts:
    """Cell counts of one numeric column on a grid (mergeable by addition)."""

    cells: np.ndarray  # int64, shape (2k + 1,)
    sums: np.ndarray  # float64, sum of the values in each cell
    missing: int
    outside: int = 0  # values outside the given limits (contract violations)

    @property
    def count(self) -> int:
        """Number of non-missing values."""
        return int(self.cells.sum())

    def merge(self, other: GridCounts) -> GridCounts:
        """The counts of the union of both chunks."""
        return GridCounts(
            cells=self.cells + other.cells,
            sums=self.sums + other.sums,
            missing=self.missing + other.missing,
            outside=self.outside + other.outside,
        )

    @classmethod
    def empty(cls, grid: np.ndarray) -> GridCounts:
        """Zero counts for ``grid``."""
        size = 2 * len(grid) + 1
        return cls(cells=np.zeros(size, dtype=np.int64), sums=np.zeros(size), missing=0)


def count_on_grid(
    values: Column, grid: np.ndarray, *, limits: tuple[float | None, float | None] = (None, None)
) -> GridCounts:
    """Exact cell counts of ``values`` (NaN = missing) on ``grid``.

    Each value's cell is found through the grid's :class:`GridIndex` (a few passes over the values, O(n));
    a grid that index cannot serve (points too unevenly spread, see :meth:`GridIndex.of`) takes one sort,
    O(n log n). Both give the same cells; the sums differ only in the order of their additions.
    ``outside`` counts values below ``limits[0]`` or above ``limits[1]`` (either may be None).
    """
    x = as_float(values)
    index = GridIndex.of(grid)
    if index is None:
        x = np.sort(x)  # NaN sorts last
        n_valid = int(np.searchsorted(x, np.nan, side="left")) if x.size and np.isnan(x[-1]) else x.size
        return count_sorted(x[:n_valid], grid, missing=int(x.size - n_valid), limits=limits)
    nan = np.isnan(x)
    valid = x[~nan] if nan.any() else x  # no copy of a column without a missing value
    outside = 0
    if limits[0] is not None:
        outside += int(np.count_nonzero(valid < limits[0]))
    if limits[1] is not None:
        outside += int(np.count_nonzero(valid > limits[1]))
    cells, sums = index.count(valid)
    return GridCounts(cells=cells, sums=sums, missing=int(x.size - valid.size), outside=outside)


class GridIndex:
    """Finds the cell of each value on a grid without sorting the values.

    The range ``[g_0, g_{k-1}]`` is cut into ``buckets`` equal parts, and ``bucket(x)`` is the (clipped)
    bucket of ``x``; since ``bucket`` never decreases as ``x`` grows, a grid point in a lower bucket than
    ``x`` is below ``x`` and one in a higher bucket is above it. So with ``start[b]`` the number of grid
    points in the buckets below ``b``, ``#{g < x}`` and ``#{g <= x}`` are ``start[b]`` plus the comparisons
    of ``x`` with the few grid points of its own bucket (at most ``depth``), and the cell is their sum
    (``2j`` in the open cell after ``j`` points, ``2j + 1`` at the point ``g_j``): exact, whatever the
    rounding of ``bucket``.
    """

    MAX_DEPTH = 8  # grid points in one bucket, at most: beyond it one sort is cheaper
    _cache: ClassVar[dict[int, tuple[weakref.ref[np.ndarray], GridIndex | None]]] = {}

    def __init__(self, grid: np.ndarray, buckets: int) -> None:
        self.size = 2 * len(grid) + 1
        span = float(grid[-1] - grid[0])
        self.low = float(grid[0])
        scale = buckets / span if span > 0 else math.inf  # inf also for a span too small to divide by
        self.buckets = buckets if math.isfinite(scale) and scale > 0 else 1
        self.scale = scale if self.buckets > 1 else 0.0
        starts = np.searchsorted(self.bucket(grid), np.arange(self.buckets + 1), side="left")
        self.start = starts.astype(np.int64)
        self.depth = int(np.diff(self.start).max())
        # past the last point: NaN, which no comparison counts (the points of higher buckets are above x)
        self.points = np.concatenate([grid, np.full(self.depth, np.nan)])

    @classmethod
    def of(cls, grid: np.ndarray) -> GridIndex | None:
        """The index of ``grid`` (built once per grid array, which must not change afterwards); None when
        some bucket would hold more than ``MAX_DEPTH`` points, or for an empty grid."""
        key = id(grid)
        hit = cls._cache.get(key)
        if hit is not None and hit[0]() is grid:
            return hit[1]
        index: GridIndex | None = None
        if len(grid):
            index = cls(grid, buckets=min(max(16 * len(grid), 1024), 1 << 16))
            if index.depth > cls.MAX_DEPTH:
                index = None
        if len(cls._cache) >= 1024:  # a bound whatever happens (entries leave with their grids, below)
            cls._cache.clear()

        def forget(ref: weakref.ref[np.ndarray]) -> None:  # the grid is gone: so is its index
            if cls._cache.get(key, (None, None))[0] is ref:
                del cls._cache[key]

        cls._cache[key] = (weakref.ref(grid, forget), index)
        return index

    def bucket(self, x: np.ndarray) -> np.ndarray:
        """The bucket of each value (no NaN): non-decreasing in the value."""
        if self.buckets == 1:
            return np.zeros(x.shape, dtype=np.int64)
        with np.errstate(over="ignore"):  # a value far beyond the grid: inf, clipped to the last bucket
            t = np.subtract(x, self.low)
            np.multiply(t, self.scale, out=t)
        np.clip(t, 0, self.buckets - 1, out=t)
        return t.astype(np.int64)

    def count(self, x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Cell counts and sums of ``x`` (no NaN).

        In place where it can be (the buckets become the cells); ``take`` with ``mode="clip"`` checks no
        bounds, and needs none: a bucket indexes ``start``, and ``start + step`` the padded ``points``.
        """
        bucket = self.bucket(x)
        base = np.take(self.start, bucket, mode="clip")
        cell = np.multiply(base, 2, out=bucket)
        for step in range(self.depth):
            point = np.take(self.points, base + step if step else base, mode="clip")
            passed = np.less_equal(point, x).view(np.int8)  # 0 below the point, 1 on it, 2 above it
            passed += np.less(point, x).view(np.int8)
            cell += passed
        cells = np.bincount(cell, minlength=self.size)
        sums = np.bincount(cell, weights=x, minlength=self.size)
        return cells.astype(np.int64), sums


def count_sorted(
    x: np.ndarray,
    grid: np.ndarray,
    *,
    missing: int = 0,
    limits: tuple[float | None, float | None] = (None, None),
) -> GridCounts:
    """:func:`count_on_grid` of values already sorted, without NaN (``missing`` of them were dropped)."""
    n_valid = int(x.size)
    outside = 0
    if limits[0] is not None:
        outside += int(np.searchsorted(x, limits[0], side="left"))
    if limits[1] is not None:
        outside += int(n_valid - np.searchsorted(x, limits[1], side="right"))
    k = len(grid)
    cells = np.zeros(2 * k + 1, dtype=np.int64)
    if k == 0:
        cells[0] = n_valid
        return GridCounts(cells=cells, sums=np.array([x.sum()]), missing=missing, outside=outside)
    lt = np.searchsorted(x, grid, side="left")  # #x < g_j
    le = np.searchsorted(x, grid, side="right")  # #x <= g_j
    cells[0] = lt[0]
    cells[1::2] = le - lt
    cells[2:-1:2] = lt[1:] - le[:-1]
    cells[-1] = n_valid - le[-1]
    # cell j starts at the running count of the cells before it; sum each run of the sorted values
    starts = np.concatenate([[0], np.cumsum(cells)[:-1]])
    nonempty = cells > 0
    sums = np.zeros(cells.size)
    if n_valid:
        sums[nonempty] = np.add.reduceat(x, starts[nonempty])
    return GridCounts(cells=cells, sums=sums, missing=missing, outside=outside)


def count_ordered(order: PartialSort, grid: np.ndarray) -> GridCounts:
    """:func:`count_on_grid` of the values of a partial sort whose sorted buckets hold every grid point (a
    grid of its own order statistics), without a pass over the values: the values of the buckets that hold
    a grid point are counted one by one in their cells (a flat bucket's all in its point's cell), and every
    other bucket whole in the open cell it lies in (so the sums do not depend on which other buckets were
    sorted). A column sorted whole is counted as :func:`count_sorted` counts it."""
    if order.whole:
        return count_sorted(order.values, grid)
    at = order.bucket_of(grid)  # non-decreasing, as the grid
    if not order.sorted_buckets[at].all():
        raise ValueError("a grid point in a bucket the partial sort did not sort")
    size = 2 * len(grid) + 1
    holds = np.zeros(order.counts.size, dtype=bool)
    holds[at] = True
    v = order.values[holds[order.bucket_of(order.values)]]
    cell = np.searchsorted(grid, v, side="left") + np.searchsorted(grid, v, side="right")
    cells = np.bincount(cell, minlength=size)
    sums = np.bincount(cell, weights=v, minlength=size).astype(np.float64, copy=False)  # no value: ints
    if order.flat is not None and order.points is not None:  # a flat bucket's values share one cell
        flat = np.flatnonzero(holds & order.flat)
        point = order.points[flat]
        cell = np.searchsorted(grid, point, side="left") + np.searchsorted(grid, point, side="right")
        cells += np.bincount(cell, weights=order.counts[flat], minlength=size).astype(np.int64)
        sums += np.bincount(cell, weights=order.sums[flat], minlength=size)
    rest = np.flatnonzero(~holds & (order.counts > 0))
    open_cell = 2 * np.searchsorted(at, rest, side="left")  # after the grid points of lower buckets
    cells += np.bincount(open_cell, weights=order.counts[rest], minlength=size).astype(np.int64)
    sums += np.bincount(open_cell, weights=order.sums[rest], minlength=size)
    return GridCounts(cells=cells, sums=sums, missing=0)


def cdf_at_cell_ends(cells: np.ndarray) -> np.ndarray:
    """Empirical CDF after each cell: ``F(g_0-), F(g_0), F(g_1-), F(g_1), ..., 1``."""
    total = cells.sum()
    if total == 0:
        return np.zeros(cells.shape, dtype=np.float64)
    return np.cumsum(cells) / float(total)


def coarse_counts(cells: np.ndarray, grid: np.ndarray, cuts: np.ndarray) -> np.ndarray:
    """Counts on the coarse bins ``(-inf, c_1], (c_1, c_2], ..., (c_m, inf)``; every cut is a grid point."""
    pos = np.searchsorted(grid, cuts)
    if cuts.size and not np.array_equal(grid[np.minimum(pos, len(grid) - 1)], cuts):
        raise ValueError("coarse cuts must be grid points")
    # the bin (c_{i-1}, c_i] ends with the atom cell of c_i, i.e. cell 2*pos+1
    ends = np.concatenate([2 * pos + 1, [len(cells) - 1]])
    cum = np.cumsum(cells)[ends]
    return np.diff(np.concatenate([[0], cum])).astype(np.int64)


def cell_points(
    grid: np.ndarray, *, cells: np.ndarray | None = None, sums: np.ndarray | None = None
) -> np.ndarray:
    """A representative value per cell: the mean of its values when known, else the grid point
    (atoms), the midpoint (inner open cells) or the grid end (outer cells)."""
    k = len(grid)
    pts = np.empty(2 * k + 1, dtype=np.float64)
    if k:
        pts[1::2] = grid
        pts[2:-1:2] = (grid[:-1] + grid[1:]) / 2.0
        pts[0], pts[-1] = grid[0], grid[-1]
    else:
        pts[0] = 0.0
    if cells is not None and sums is not None and sums.shape == pts.shape:
        has = cells > 0
        pts[has] = sums[has] / cells[has]
        if k:
            pts[1::2] = grid  # atoms are exact; avoid rounding in sum / count
    return pts
