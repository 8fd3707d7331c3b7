"""Order statistics of a numeric column without sorting all of it.

A profile reads a column's values at a thousand ranks (its quantiles) and a few thousand at each end (the
tail fits of its allowed range), never the order of the rest. :func:`partial_sort` splits the range of the
values into :data:`BUCKETS` buckets of equal width, counts each bucket (one pass, O(n)), and sorts only the
values of the buckets that hold an asked rank or part of an asked span. Since a value's bucket never
decreases as the value grows, a lower bucket holds only smaller values: those sorted buckets, one after the
other, are exactly the stretches of the fully sorted column that they cover. The answers are the same
numbers as those of ``np.sort``; only the time differs. A column whose values pile on a few points (counts,
rounded values) has buckets that each hold one value many times over: those *flat* buckets are told apart
(every value the same, bit for bit) and read without a sort. When the buckets left to sort would hold more
than :data:`SORT_SHARE` of the values (a very long tail, an infinity), the column is sorted whole instead.
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
    (where a sorted bucket's values start in ``values``) and ``sorted_buckets`` (those that may be read).
    ``flat`` (None: not looked for) marks the buckets whose values are all one value, ``points[b]``: a flat
    bucket that may be read is read from there, not from ``values``. A value's bucket is
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
    flat: np.ndarray | None = None  # bool per bucket: one value, many times
    points: np.ndarray | None = None  # per bucket: the value of a flat one

    def bucket_of(self, values: np.ndarray) -> np.ndarray:
        """The bucket of each of ``values`` (no NaN), by the rule the column's values were put in theirs."""
        if self.whole:
            return np.zeros(np.shape(values), dtype=np.intp)
        return _buckets(np.asarray(values, dtype=np.float64), low=self.low, scale=self.scale)

    def _buckets_of(self, ranks: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The buckets of the sorted column's ``ranks`` (which must have been asked) and each rank's place
        among its bucket's values."""
        ranks = np.asarray(ranks, dtype=np.int64)
        if ranks.size and (ranks.min() < 0 or ranks.max() >= self.size):
            raise IndexError(f"ranks must lie in [0, {self.size}); got {ranks.min()}..{ranks.max()}")
        if self.whole:
            return np.zeros(ranks.shape, dtype=np.intp), ranks
        bucket = np.searchsorted(self.ends, ranks, side="right")
        if not self.sorted_buckets[bucket].all():
            raise ValueError("a rank that partial_sort was not asked for (its bucket is not sorted)")
        return bucket, ranks - (self.ends[bucket] - self.counts[bucket])

    def take(self, ranks: np.ndarray) -> np.ndarray:
        """``np.sort(x)[ranks]`` for ranks that were asked."""
        bucket, within = self._buckets_of(ranks)
        if self.flat is None or self.points is None:
            return self.values[self.offset[bucket] + within]
        flat = self.flat[bucket]
        out = np.empty(bucket.shape, dtype=np.float64)
        out[flat] = self.points[bucket[flat]]
        sorted_ = ~flat
        out[sorted_] = self.values[self.offset[bucket[sorted_]] + within[sorted_]]
        return out

    def span(self, start: int, stop: int) -> np.ndarray:
        """``np.sort(x)[start:stop]`` for a span that was asked (or lies within one): a view of ``values``,
        or a copy when it meets a flat bucket."""
        if not 0 <= start <= stop <= self.size:
            raise IndexError(f"span [{start}, {stop}) is not within [0, {self.size}]")
        if start == stop:
            return self.values[:0]
        (first, last), within = self._buckets_of(np.array([start, stop - 1]))
        if self.flat is not None and self.flat[first : last + 1].any():
            return self.take(np.arange(start, stop))  # every bucket of the span checked
        begin, end = self.offset[[first, last]] + within if not self.whole else within
        if end - begin != stop - 1 - start:  # an unsorted bucket in between
            raise ValueError("a span that partial_sort was not asked for (a bucket in it is not sorted)")
        return self.values[begin : end + 1]


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
    if n < MIN_PARTIAL:
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
    flat, points = _flat_buckets(x, bucket, counts, scratch) if _piled(x) else (None, None)
    wanted = np.zeros(BUCKETS, dtype=bool)
    wanted[np.searchsorted(ends, ranks[(ranks >= 0) & (ranks < n)], side="right")] = True
    if counts[wanted if flat is None else wanted & ~flat].sum() > SORT_SHARE * n:
        return _whole(x, scratch)
    for a, b in spans:
        if min(b, n) > max(a, 0):
            first, last = np.searchsorted(ends, [max(a, 0), min(b, n) - 1], side="right")
            wanted[first : last + 1] = True
    to_sort = wanted if flat is None else wanted & ~flat
    kept = np.where(to_sort, counts, 0)
    return PartialSort(
        size=n,
        values=np.sort(x[np.take(to_sort, bucket, out=_mask(scratch, n))]),  # a few percent of the values
        counts=counts,
        sums=np.bincount(bucket, weights=x, minlength=BUCKETS),
        ends=ends,
        offset=np.cumsum(kept) - kept,
        sorted_buckets=wanted,
        whole=False,
        low=low,
        scale=scale,
        flat=flat,
        points=points,
    )


def _flat_buckets(
    x: np.ndarray, bucket: np.ndarray, counts: np.ndarray, scratch: Scratch | None
) -> tuple[np.ndarray, np.ndarray]:
    """Which buckets hold one value only, bit for bit (so -0.0 and 0.0 are two values), and that value:
    each bucket's point is one of its values (whichever is written last), and a bucket is flat when no value
    of it differs from its point (~5 ms for a million values, against ~15-35 ms to sort them whole)."""
    bits = x.view(np.int64)
    point = np.zeros(BUCKETS, dtype=np.int64)
    point[bucket] = bits
    n = bits.size
    spare = None if scratch is None else scratch.get("work", n, np.float64)  # free once the buckets are made
    seen = np.take(point, bucket, out=None if spare is None else spare.view(np.int64))
    differs = np.not_equal(seen, bits, out=_mask(scratch, n))
    mixed = np.bincount(bucket[differs], minlength=BUCKETS)
    return (counts > 0) & (mixed == 0), point.view(np.float64)


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
    buckets would each hold one point, many times over, so its flat buckets are looked for. Only the time
    depends on this guess."""
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
