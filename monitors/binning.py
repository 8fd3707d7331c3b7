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

from dataclasses import dataclass

import numpy as np

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
    """Exact cell counts of ``values`` (NaN = missing) on ``grid``; one sort, O(n log n).

    ``outside`` counts values below ``limits[0]`` or above ``limits[1]`` (either may be None).
    """
    x = np.sort(as_float(values))  # NaN sorts last
    n_valid = int(np.searchsorted(x, np.nan, side="left")) if x.size and np.isnan(x[-1]) else x.size
    return count_sorted(x[:n_valid], grid, missing=int(x.size - n_valid), limits=limits)


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
