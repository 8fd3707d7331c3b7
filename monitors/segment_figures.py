"""A partition's figures (pure): per segment, inside it and in the rest of its partition, each feature's
rows, missing values, KS distance (numeric) and category counts (categorical), for both samples at once.

:mod:`monitors.segments` judges a segment's drift and quality from these. Counting every segment of a
partition in one pass over each feature (a segment's running counts are one row of a segments x values
matrix) gives the very numbers a pass per segment gives (the same integers, divided alike), without a copy
and a sort of every column for each segment and each rest.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from monitors.drift.categorical import CategoricalCounts
from monitors.rows import RowSample
from registry.schema import FeatureKind

Sizes = tuple[int, int]  # (window, reference)
Distances = tuple[np.ndarray, np.ndarray, np.ndarray]  # per segment: KS distance, window's n, reference's m


@dataclass(frozen=True)
class Pooled:
    """A numeric feature's present values of both samples, sorted together: each value's row in its sample,
    whether it is the window's, the number of its run of equal values and the last position of each run."""

    rows: np.ndarray
    window: np.ndarray
    run: np.ndarray
    ends: np.ndarray
    sides: tuple[np.ndarray, np.ndarray]  # the positions of the window's values, of the reference's


def pool_values(window: np.ndarray, reference: np.ndarray) -> Pooled:
    """Both samples' present values of one numeric feature, sorted together."""
    w = np.asarray(window, dtype=np.float64)
    r = np.asarray(reference, dtype=np.float64)
    w_rows, r_rows = np.flatnonzero(~np.isnan(w)), np.flatnonzero(~np.isnan(r))
    values = np.concatenate([w[w_rows], r[r_rows]])
    order = np.argsort(values, kind="stable")
    ordered = values[order]
    last = np.append(ordered[1:] != ordered[:-1], True) if ordered.size else np.zeros(0, dtype=bool)
    run = np.cumsum(last) - last  # ids from 0, one per run of equal values
    window = order < w_rows.size
    sides = np.flatnonzero(window), np.flatnonzero(~window)
    return Pooled(np.concatenate([w_rows, r_rows])[order], window, run, np.flatnonzero(last), sides)


@dataclass(frozen=True)
class Figures:
    """One partition's figures, indexed by segment code (``size`` codes); ``names``: the features both
    samples hold, in the window's order."""

    size: int
    kinds: dict[str, FeatureKind]
    names: list[str]
    rows: tuple[np.ndarray, np.ndarray]  # per sample: the rows of each segment
    total_rows: Sizes
    missing: dict[str, tuple[np.ndarray, np.ndarray]]  # per sample: each segment's missing values
    total_missing: dict[str, Sizes]
    ks: dict[str, Distances]  # numeric: inside each segment
    coded: dict[str, tuple[Pooled, np.ndarray]]  # numeric: its pooled values and their segment codes
    counts: dict[str, tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]]  # in/total per sample

    def rest_ks(self, name: str, code: int) -> tuple[float, int, int]:
        """A numeric feature's (KS distance, n, m) in the rest of the partition: the rows outside segment
        ``code``."""
        pool, segment = self.coded[name]
        rest = segment != code
        w = np.cumsum(pool.window & rest)[pool.ends][None, :]
        r = np.cumsum(~pool.window & rest)[pool.ends][None, :]
        d, n, m = _distance(w, r)
        return float(d[0]), int(n[0]), int(m[0])


def figures(
    *,
    window: RowSample,
    reference: RowSample,
    codes: tuple[np.ndarray, np.ndarray],
    size: int,
    skip: str,
    pools: dict[str, Pooled],
    names: Sequence[str] | None = None,
) -> Figures:
    """The figures of the partition whose rows have segment ``codes`` (window's, reference's; a code
    outside ``0..size-1``: no segment) in samples with categories as codes, of the features ``names``
    (default: every feature both samples hold, in the window's order); ``skip``: the partition's own
    feature (no drift figures)."""
    wanted = list(window.kinds) if names is None else names
    shown = [n for n in wanted if n in window.kinds and n in reference.columns]
    samples = (window, reference)
    keep = tuple((c >= 0) & (c < size) for c in codes)
    rows = (_per_code(codes[0], keep[0], size), _per_code(codes[1], keep[1], size))
    missing: dict[str, tuple[np.ndarray, np.ndarray]] = {}
    total_missing: dict[str, Sizes] = {}
    for name in shown:
        gaps = [_missing(s, name) for s in samples]
        missing[name] = (
            _per_code(codes[0], keep[0] & gaps[0], size),
            _per_code(codes[1], keep[1] & gaps[1], size),
        )
        total_missing[name] = (int(np.count_nonzero(gaps[0])), int(np.count_nonzero(gaps[1])))
    coded = {n: (pools[n], _pooled_codes(pools[n], codes)) for n in shown if n != skip and n in pools}
    ks = {n: _ks(pool, segment, size) for n, (pool, segment) in coded.items()}
    counts = {
        n: _category_counts(window.columns[n], reference.columns[n], codes, keep, size)
        for n in shown
        if n != skip and window.kinds[n] is not FeatureKind.NUMERIC
    }
    total_rows = (window.rows, reference.rows)
    return Figures(size, window.kinds, shown, rows, total_rows, missing, total_missing, ks, coded, counts)


def _per_code(codes: np.ndarray, keep: np.ndarray, size: int) -> np.ndarray:
    return np.bincount(codes[keep], minlength=size)


def _missing(sample: RowSample, name: str) -> np.ndarray:
    values = sample.columns[name]
    if sample.kinds[name] is FeatureKind.NUMERIC:
        return np.isnan(np.asarray(values, dtype=np.float64))
    return np.asarray(values, dtype=np.int64) < 0  # codes: -1 is missing


def _pooled_codes(pool: Pooled, codes: tuple[np.ndarray, np.ndarray]) -> np.ndarray:
    """The segment code of each pooled value's row."""
    code = np.empty(pool.rows.size, dtype=np.int64)
    w, r = pool.sides
    code[w] = codes[0][pool.rows[w]]
    code[r] = codes[1][pool.rows[r]]
    return code


def _ks(pool: Pooled, code: np.ndarray, size: int) -> Distances:
    """Per segment, (KS distance, window's present values, reference's): the values grouped by segment,
    each group in value order, its running counts read at the end of each run of equal values."""
    kept = np.flatnonzero((code >= 0) & (code < size))
    small = np.int16 if size < 2**15 else np.int64  # a stable sort of 16-bit keys is a radix sort
    order = kept[np.argsort(code[kept].astype(small), kind="stable")]
    segment, window, run = code[order], pool.window[order], pool.run[order]
    n = np.bincount(segment[window], minlength=size)
    m = np.bincount(segment[~window], minlength=size)
    w = np.cumsum(window) - (np.cumsum(n) - n)[segment]  # running counts within each segment
    r = np.cumsum(~window) - (np.cumsum(m) - m)[segment]
    last = np.append((run[1:] != run[:-1]) | (segment[1:] != segment[:-1]), True) if order.size else window
    both = (n > 0) & (m > 0)
    last &= both[segment]
    at = segment[last]
    gap = np.abs(w[last] / n[at] - r[last] / m[at])
    d = np.zeros(size, dtype=np.float64)
    np.maximum.at(d, at, gap)
    return d, n, m


def _distance(w: np.ndarray, r: np.ndarray) -> Distances:
    """Per segment (distance, n, m): the largest gap of the running counts as shares (0: a side is empty)."""
    n = w[:, -1] if w.shape[1] else np.zeros(w.shape[0], dtype=np.int64)
    m = r[:, -1] if r.shape[1] else np.zeros(r.shape[0], dtype=np.int64)
    both = (n > 0) & (m > 0)
    d = np.zeros(w.shape[0], dtype=np.float64)
    if np.any(both):
        d[both] = np.max(np.abs(w[both] / n[both, None] - r[both] / m[both, None]), axis=1)
    return d, n, m


def _category_counts(
    w: np.ndarray,
    r: np.ndarray,
    codes: tuple[np.ndarray, np.ndarray],
    keep: tuple[np.ndarray, ...],
    size: int,
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Each segment's counts of each category code, and the sample's, for the window then the reference."""
    w, r = np.asarray(w, dtype=np.int64), np.asarray(r, dtype=np.int64)
    k = int(max(w.max(initial=-1), r.max(initial=-1))) + 1
    out = []
    for cats, seg, kept in ((w, codes[0], keep[0]), (r, codes[1], keep[1])):
        present = cats >= 0
        both = present & kept
        inside = np.bincount(seg[both] * k + cats[both], minlength=size * k).reshape(size, k)
        out += [inside, np.bincount(cats[present], minlength=k)]
    return out[0], out[1], out[2], out[3]


def as_counts(n: np.ndarray) -> CategoricalCounts:
    """Counts of category codes as the chi-square reads them, keyed by code."""
    return CategoricalCounts(counts={str(c): int(n[c]) for c in np.flatnonzero(n)})
