"""Order statistics of a numeric column without sorting all of it.

A profile reads a column's values at a thousand ranks (its quantiles) and a few thousand at each end (the
tail fits of its allowed range), never the order of the rest. :func:`partial_sort` splits the range of the
values into :data:`BUCKETS` buckets of equal width, counts each bucket (one pass, O(n)), and sorts only the
values of the buckets that hold an asked rank or part of an asked span. Since a value's bucket never
decreases as the value grows, a lower bucket holds only smaller values: those sorted buckets, one after the
other, are exactly the stretches of the fully sorted column that they cover. The answers are the same
numbers as those of ``np.sort``; only the time differs. When the sorted buckets would hold more than
:data:`SORT_SHARE` of the values (values piled on a few points, a very long tail, an infinity), the column
is sorted whole instead.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass

import numpy as np

BUCKETS = 1 << 16
"""Buckets of equal width between a column's extremes (their counts take half a megabyte)."""

SORT_SHARE = 0.25
"""The share of the values above which the column is sorted whole (one sort then costs less)."""

MIN_PARTIAL = 1 << 15
"""Fewer values are sorted whole: their sort costs no more than counting the buckets (~1.3 ms)."""


@dataclass(frozen=True)
class PartialSort:
    """A column's values (float64, no NaN) sorted where asked: :meth:`take` and :meth:`span` read the sorted
    column at the ranks and spans :func:`partial_sort` was given.

    ``values`` holds the sorted buckets one after the other (the whole column sorted when ``whole``, as one
    bucket: decided by the values and the ranks asked, so a span that sorts every bucket leaves it False).
    Per bucket: ``counts`` and ``sums`` of its values, ``ends`` (the values up to and with it), ``offset``
    (where a sorted bucket's values start in ``values``) and ``sorted_buckets``. A value's bucket is
    ``floor((value - low) * scale)``, clipped to the buckets (:meth:`bucket_of`).
    """

    size: int
    values: np.ndarray
    counts: np.ndarray
    sums: np.ndarray
    ends: np.ndarray
    offset: np.ndarray
    sorted_buckets: np.ndarray  # bool per bucket
    whole: bool  # sorted whole (``values`` is the sorted column, one bucket), by the ranks asked
    low: float = 0.0
    scale: float = 0.0

    def bucket_of(self, values: np.ndarray) -> np.ndarray:
        """The bucket of each of ``values`` (no NaN), by the rule the column's values were put in theirs."""
        if self.whole:
            return np.zeros(np.shape(values), dtype=np.intp)
        return _buckets(np.asarray(values, dtype=np.float64), low=self.low, scale=self.scale)

    def _positions(self, ranks: np.ndarray) -> np.ndarray:
        """Where the sorted column's ``ranks`` are in ``values``."""
        ranks = np.asarray(ranks, dtype=np.int64)
        if ranks.size and (ranks.min() < 0 or ranks.max() >= self.size):
            raise IndexError(f"ranks must lie in [0, {self.size}); got {ranks.min()}..{ranks.max()}")
        if self.whole:
            return ranks
        bucket = np.searchsorted(self.ends, ranks, side="right")
        if not self.sorted_buckets[bucket].all():
            raise ValueError("a rank that partial_sort was not asked for (its bucket is not sorted)")
        return self.offset[bucket] + (ranks - (self.ends[bucket] - self.counts[bucket]))

    def take(self, ranks: np.ndarray) -> np.ndarray:
        """``np.sort(x)[ranks]`` for ranks that were asked."""
        return self.values[self._positions(ranks)]

    def span(self, start: int, stop: int) -> np.ndarray:
        """``np.sort(x)[start:stop]`` (a view) for a span that was asked (or lies within one)."""
        if not 0 <= start <= stop <= self.size:
            raise IndexError(f"span [{start}, {stop}) is not within [0, {self.size}]")
        if start == stop:
            return self.values[:0]
        first, last = self._positions(np.array([start, stop - 1]))
        if last - first != stop - 1 - start:  # an unsorted bucket in between
            raise ValueError("a span that partial_sort was not asked for (a bucket in it is not sorted)")
        return self.values[first : last + 1]


class Scratch:
    """Buffers that :func:`partial_sort` fills again for each column, for one thread: fresh pages for every
    column of a million values cost more than the work on them. What it returns may then be a view of
    them, valid until the next column."""

    def __init__(self) -> None:
        self.buffers: dict[str, np.ndarray] = {}

    def get(self, name: str, size: int, dtype: type[np.generic]) -> np.ndarray:
        """The buffer ``name`` of ``size`` values (made, or grown, when it is too small)."""
        held = self.buffers.get(name)
        if held is None or held.size < size:
            held = self.buffers[name] = np.empty(size, dtype=dtype)
        return held[:size]


def partial_sort(
    x: np.ndarray,
    *,
    ranks: np.ndarray,
    spans: Iterable[tuple[int, int]] = (),
    scratch: Scratch | None = None,
) -> PartialSort:
    """Sort of the float64 values ``x`` (no NaN) as far as reading them at ``ranks`` and over ``spans``
    (``(start, stop)`` rank ranges, as slices) needs; the same values as ``np.sort(x)`` there. With
    ``scratch``, its buffers are used (and the answer may be a view of them).

    Whether the column is sorted whole depends on its values and ``ranks`` alone, not on ``spans``: two
    callers that ask the same ranks of the same values get the same kind of answer."""
    n = int(x.size)
    ranks = np.asarray(ranks, dtype=np.int64)
    if n < MIN_PARTIAL or _piled(x):
        return _whole(x, scratch)
    low, high = float(x.min()), float(x.max())
    scale = BUCKETS / (high - low) if math.isfinite(high - low) and high > low else 0.0
    if not (scale > 0 and math.isfinite(scale)):
        return _whole(x, scratch)
    bucket = _buckets(
        x,
        low=low,
        scale=scale,
        work=None if scratch is None else scratch.get("work", n, np.float64),
        out=None if scratch is None else scratch.get("bucket", n, np.intp),
    )
    counts = np.bincount(bucket, minlength=BUCKETS)
    ends = np.cumsum(counts)
    wanted = np.zeros(BUCKETS, dtype=bool)
    wanted[np.searchsorted(ends, ranks[(ranks >= 0) & (ranks < n)], side="right")] = True
    if counts[wanted].sum() > SORT_SHARE * n:
        return _whole(x, scratch)
    for a, b in spans:
        if min(b, n) > max(a, 0):
            first, last = np.searchsorted(ends, [max(a, 0), min(b, n) - 1], side="right")
            wanted[first : last + 1] = True
    kept = np.where(wanted, counts, 0)
    return PartialSort(
        size=n,
        values=np.sort(x[np.take(wanted, bucket, out=_mask(scratch, n))]),  # a few percent of the values
        counts=counts,
        sums=np.bincount(bucket, weights=x, minlength=BUCKETS),
        ends=ends,
        offset=np.cumsum(kept) - kept,
        sorted_buckets=wanted,
        whole=False,
        low=low,
        scale=scale,
    )


def _buckets(
    values: np.ndarray,
    *,
    low: float,
    scale: float,
    work: np.ndarray | None = None,
    out: np.ndarray | None = None,
) -> np.ndarray:
    """The bucket of each of ``values``: ``floor((value - low) * scale)``, clipped to the buckets. Every step
    is non-decreasing in the value, so is the bucket; the one rule for a column's values and for values
    looked up later (:meth:`PartialSort.bucket_of`). ``work`` / ``out``: buffers to use."""
    t = np.subtract(values, low, out=work)
    np.multiply(t, scale, out=t)
    np.clip(t, 0, BUCKETS - 1, out=t)
    if out is None:
        return t.astype(np.intp)
    np.copyto(out, t, casting="unsafe")  # truncation: the floor of these non-negative values
    return out


def _mask(scratch: Scratch | None, n: int) -> np.ndarray:
    return np.empty(n, dtype=bool) if scratch is None else scratch.get("mask", n, np.bool_)


PILE_SAMPLE = 1024
"""Values looked at, evenly spaced, to tell a column piled on a few points (counts, rounded values)."""


def _piled(x: np.ndarray) -> bool:
    """Whether the column's values look piled on a few points (half of an even sample repeats): its
    buckets would each hold one point and every rank's bucket many values, so it is sorted whole. Only the
    time depends on this guess."""
    sample = np.sort(x[:: x.size // PILE_SAMPLE])
    return int(np.count_nonzero(sample[1:] == sample[:-1])) * 2 > sample.size


def _sum(values: np.ndarray) -> float:
    """The sum of the values (NaN when they hold both infinities, as numpy says, without its warning)."""
    with np.errstate(invalid="ignore", over="ignore"):
        return float(values.sum())


def _whole(x: np.ndarray, scratch: Scratch | None) -> PartialSort:
    """The column sorted whole, as one sorted bucket."""
    n = int(x.size)
    values = np.empty(n) if scratch is None else scratch.get("work", n, np.float64)
    np.copyto(values, x)
    values.sort()
    return PartialSort(
        size=n,
        values=values,
        counts=np.array([n], dtype=np.int64),
        sums=np.array([_sum(values)]),
        ends=np.array([n], dtype=np.int64),
        offset=np.zeros(1, dtype=np.int64),
        sorted_buckets=np.ones(1, dtype=bool),
        whole=True,
    )
