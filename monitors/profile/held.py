"""Numeric reference columns held at a few of their rows, not whole.

Once a numeric feature's summary is made (``driftwarden drift`` makes it while it reads the reference:
:class:`monitors.profile.ordered.SortedPass`), the profile reads that column at two sets of rows only: the
multivariate detector's fit (:func:`monitors.profile.pca.pca_positions`) and the row sample
(:func:`monitors.profile.samples.sample_positions`). Both are chosen by position alone, before a value is
seen, so a reader can keep those rows of each column as it is read and let the rest go
(:class:`HeldRows`): a million-row column of 8 MB leaves ~0.4 MB held.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from core.tabular import Column, Take
from monitors.profile.pca import pca_positions
from monitors.profile.samples import sample_positions


def profiled_positions(rows: int) -> np.ndarray:
    """The rows of a ``rows``-row reference that its profile reads of a numeric feature besides the feature's
    summary (sorted, distinct)."""
    both = np.concatenate([pca_positions(rows), sample_positions(rows)])
    both.sort(kind="stable")  # two sorted runs, merged (np.union1d would sort them again: ~7 ms for 1M rows)
    first = np.ones(both.size, dtype=bool)
    np.not_equal(both[1:], both[:-1], out=first[1:])
    return both[first]


class HeldRows:
    """Columns of a ``rows``-row reference held at :func:`profiled_positions` only (:meth:`hold` each)."""

    def __init__(self, rows: int) -> None:
        self.rows = rows
        self.positions = profiled_positions(rows)
        self.columns: dict[str, np.ndarray] = {}

    def hold(self, name: str, values: np.ndarray) -> None:
        """Keep column ``name``'s values at the held rows (``values`` holds every row)."""
        if len(values) != self.rows:
            raise ValueError(f"column {name!r} has {len(values)} rows; the reference has {self.rows}")
        self.columns[name] = values[self.positions]

    def take(self, name: str, positions: np.ndarray) -> np.ndarray:
        """Column ``name`` at ``positions``, which must be held rows."""
        at = np.searchsorted(self.positions, positions)
        if at.size and (at.max() >= self.positions.size or not np.array_equal(self.positions[at], positions)):
            raise ValueError(f"column {name!r} is held at the profile's rows only; asked for other rows")
        return self.columns[name][at]


def taker(columns: Mapping[str, Column], held: HeldRows | None) -> Take:
    """The rows of ``columns`` (whole) or, for a column ``held`` holds, of its held rows."""

    def take(name: str, positions: np.ndarray) -> Column:
        if held is not None and name in held.columns:
            return held.take(name, positions)
        return columns[name][positions]

    return take
