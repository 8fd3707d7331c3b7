"""The tails of a numeric feature, and the allowed range they give it (pure: numpy in, numbers out).

A value outside a feature's *allowed* range breaks the contract (serving refuses it). The range comes from
an estimate of each tail of the reference, so that a legitimate value of a heavy-tailed feature (an income,
an amount: lognormal, Pareto-like) is refused with a stated chance, not whenever it passes the training
maximum by a fixed multiple of the span.

**The estimate** (peaks over threshold): on each side, the values beyond the threshold ``u`` (the 95th
percentile above, the 5th below: :data:`TAIL_SHARE`; with fewer than :data:`MIN_EXCEEDANCES` such values
the threshold moves inwards to keep that many, at most a quarter of the sample; with more than
:data:`MAX_EXCEEDANCES` it moves outwards) are fitted with a
generalized Pareto distribution (shape ``xi``, scale ``sigma``; the estimator of Zhang & Stephens, 2009,
Technometrics 51(3): a likelihood-weighted average over a grid, numpy only). The chance that a new value
lies beyond ``x`` is then ``share * (1 + xi * (x - u) / sigma) ** (-1 / xi)``, ``share`` being the share
of the reference beyond ``u``.

**The range** is where that chance is ``chance / 2`` on each side (``chance``: the setting
``range_chance``, 1e-9 by default: the chance per value of refusing a legitimate one), with the shape taken
at its estimate plus one standard error (``(1 + xi) / sqrt(k)``, ``k`` the values fitted) and never below 0
(an exponential tail): a sample that happens to understate its tail, or a light tail whose fitted shape is
negative (a hard end guessed from a few hundred values), does not refuse legitimate values. So a normal
feature's range is about 9 standard deviations from its mean at 1e-9, a lognormal's a few times its 1e-9
quantile, a Pareto's follows its power law. The range always holds the observed values.

**Fallbacks** (the side's range is then the observed extreme widened by one span, ``max(hi - lo, |hi|,
1)``, as before this estimate, and it holds no stated chance): fewer than :data:`MIN_SAMPLE` values, a
constant feature, or a side whose values beyond the threshold take fewer than :data:`MIN_DISTINCT`
distinct values (a bounded or discrete feature: a flag, a count, a score at its ceiling). A feature whose
values are all ``>= 0`` is never allowed below 0 (a natural bound: an amount, a count, a duration).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

DEFAULT_CHANCE = 1e-9
"""The chance per value that a legitimate value falls outside the allowed range (the ``range_chance``
setting's default)."""
TAIL_SHARE = 0.05  # the share of the sample beyond each side's threshold (its 95th / 5th percentile)
MIN_EXCEEDANCES = 50  # at least this many values are fitted on a side (the threshold moves inwards)
MAX_TAIL_SHARE = 0.25  # ... but never more than this share of the sample
MAX_EXCEEDANCES = 5_000  # ... and at most this many (a large sample's threshold moves outwards)
MIN_SAMPLE = 200  # fewer values: the span rule
MIN_DISTINCT = 10  # fewer distinct values beyond the threshold: a bounded or discrete side, the span rule
FLOAT32_MAX = float(np.finfo(np.float32).max)  # a model's input is float32: no range reaches beyond


@dataclass(frozen=True)
class Tail:
    """One side's generalized Pareto fit: the values beyond ``threshold`` (above it for ``side`` +1, below
    it for -1) are ``share`` of the sample, and their distance from it has ``scale`` and ``shape`` (the
    estimate; ``shape_se`` its standard error, from ``fitted`` values)."""

    side: int
    threshold: float
    share: float
    scale: float
    shape: float
    shape_se: float
    fitted: int

    @property
    def cautious_shape(self) -> float:
        """The shape the range is computed with: the estimate plus one standard error, at least 0."""
        return max(0.0, self.shape + self.shape_se)

    def bound(self, chance: float) -> float:
        """The value beyond which a new value lies with ``chance`` (at the cautious shape)."""
        return self.threshold + self.side * gpd_quantile(
            self.share, chance, scale=self.scale, shape=self.cautious_shape
        )

    def draw(self, uniforms: np.ndarray) -> np.ndarray:
        """Values beyond the threshold from the fit (at its estimated shape), one per uniform in [0, 1)."""
        return self.threshold + self.side * gpd_excess(uniforms, scale=self.scale, shape=self.shape)


@dataclass(frozen=True)
class AllowedRange:
    """A numeric feature's allowed range, its tails (None: that side by the span rule) and the chance per
    value, by the estimate, that a legitimate value falls outside it (0 when neither side is fitted)."""

    low: float
    high: float
    chance: float
    lower: Tail | None = None
    upper: Tail | None = None


def gpd_quantile(share: float, chance: float, *, scale: float, shape: float) -> float:
    """The excess over the threshold exceeded with ``chance`` when ``share`` of values exceed it."""
    ratio = math.log(share / chance) if share > chance else 0.0
    if abs(shape) < 1e-12:
        return scale * ratio
    return scale * math.expm1(min(shape * ratio, 700.0)) / shape


def gpd_excess(uniforms: np.ndarray, *, scale: float, shape: float) -> np.ndarray:
    """Generalized Pareto draws (excesses over the threshold) by inversion of ``uniforms`` in [0, 1)."""
    log_tail = np.log1p(-np.asarray(uniforms, dtype=np.float64))  # log(1 - u) <= 0
    if abs(shape) < 1e-12:
        return -scale * log_tail
    return scale * np.expm1(-shape * log_tail) / shape


FIT_ROWS = 16  # rows of the fit's grid computed at a time: a block that stays in cache, made once


def _mean_log1p_neg(theta: np.ndarray, x: np.ndarray) -> np.ndarray:
    """``-mean(log1p(-outer(theta, x)), axis=1)``, the same numbers, a block of rows at a time in one buffer
    (not three ``(m, n)`` arrays on fresh pages)."""
    out = np.empty(theta.size)
    block = np.empty((min(FIT_ROWS, theta.size), x.size))
    for lo in range(0, theta.size, FIT_ROWS):
        rows = theta[lo : lo + FIT_ROWS]
        part = block[: rows.size]
        np.multiply(rows[:, None], x[None, :], out=part)  # as np.outer
        np.log1p(np.negative(part, out=part), out=part)
        out[lo : lo + rows.size] = -np.mean(part, axis=1)
    return out


def fit_gpd(excesses: np.ndarray) -> tuple[float, float]:
    """``(scale, shape)`` of a generalized Pareto fitted to positive ``excesses`` (Zhang & Stephens, 2009)."""
    x = np.sort(np.asarray(excesses, dtype=np.float64))
    n = x.size
    m = 20 + math.isqrt(n)
    quartile = x[max(0, int(n / 4 + 0.5) - 1)]
    quartile = quartile if quartile > 0 else float(np.mean(x))
    j = np.arange(1, m + 1, dtype=np.float64)
    theta = 1.0 / x[-1] + (1.0 - np.sqrt(m / (j - 0.5))) / (3.0 * quartile)
    theta = theta[theta != 0.0]
    k = _mean_log1p_neg(theta, x)
    profile = n * (np.log(theta / k) + k - 1.0)
    with np.errstate(over="ignore"):  # a grid point far less likely than another weighs 0
        weights = 1.0 / np.exp(profile[:, None] - profile[None, :]).sum(axis=0)
    best = float(np.sum(theta * weights))
    k_hat = float(-np.mean(np.log1p(-best * x)))
    if best == 0.0 or k_hat == 0.0:
        return float(np.mean(x)), 0.0
    return k_hat / best, -k_hat


def _threshold_rank(n: int) -> int:
    """The rank (ascending, from 0) of a side's threshold among ``n`` values sorted along that side."""
    share = min(max(TAIL_SHARE, MIN_EXCEEDANCES / n), MAX_TAIL_SHARE, MAX_EXCEEDANCES / n)
    return int(math.floor((1.0 - share) * (n - 1)))


def end_size(n: int) -> int:
    """How many of ``n`` values sorted ascending a tail fit reads at each end: the threshold and the values
    beyond it (:func:`fit_tail`), or the extreme alone for a sample too small to fit."""
    return n - _threshold_rank(n) if n >= MIN_SAMPLE else min(n, 1)


@dataclass(frozen=True)
class SortedEnds:
    """Finite values as the allowed range reads them: their count, and the :func:`end_size` smallest
    (``low``) and largest (``high``) of them, each ascending. A caller that knows the order of these alone
    (:func:`core.order.partial_sort`) need not sort the rest."""

    count: int
    low: np.ndarray
    high: np.ndarray

    @classmethod
    def of(cls, ordered: np.ndarray) -> SortedEnds:
        """The ends of finite values sorted ascending."""
        k = end_size(ordered.size)
        return cls(count=int(ordered.size), low=ordered[:k], high=ordered[ordered.size - k :])


def fit_tail(values: np.ndarray, *, side: int) -> Tail | None:
    """The fit of one side of a sample's finite ``values``, in any order (None: too few values, or too few
    distinct ones beyond the threshold)."""
    n = values.size
    if n < MIN_SAMPLE:
        return None
    at = _threshold_rank(n)
    oriented = np.partition(side * values, at)  # the side's tail at the top, beyond its threshold
    return _fit_beyond(float(oriented[at]), oriented[at + 1 :], n=n, side=side)


def fit_sorted_tail(ends: SortedEnds, *, side: int) -> Tail | None:
    """:func:`fit_tail` of the values whose ends are ``ends``: the same fit, read off the sorted end."""
    if ends.count < MIN_SAMPLE:
        return None
    if side > 0:  # the threshold, then the values above it
        return _fit_beyond(float(ends.high[0]), ends.high[1:], n=ends.count, side=side)
    return _fit_beyond(float(-ends.low[-1]), -ends.low[:-1], n=ends.count, side=side)


def _fit_beyond(threshold: float, top: np.ndarray, *, n: int, side: int) -> Tail | None:
    """The fit of a side (``side * values``) from its ``threshold`` and the ``top`` values after it in its
    order (any order among them), out of ``n`` values."""
    excesses = top[top > threshold] - threshold
    if excesses.size < MIN_EXCEEDANCES or np.unique(excesses).size < MIN_DISTINCT:
        return None
    scale, shape = fit_gpd(excesses)
    if not (math.isfinite(scale) and scale > 0 and math.isfinite(shape)):
        return None
    return Tail(
        side=side,
        threshold=side * threshold,
        share=excesses.size / n,
        scale=scale,
        shape=shape,
        shape_se=(1.0 + max(shape, 0.0)) / math.sqrt(excesses.size),
        fitted=int(excesses.size),
    )


def finite_sorted(ordered: np.ndarray) -> np.ndarray:
    """The finite values of float64 values sorted ascending (NaN last): a slice, between the infinities."""
    start = int(np.searchsorted(ordered, -np.inf, side="right"))
    return ordered[start : int(np.searchsorted(ordered, np.inf, side="left"))]


def allowed_range(
    values: np.ndarray, *, chance: float = DEFAULT_CHANCE, ordered: bool = False
) -> AllowedRange:
    """The allowed range of a numeric feature from its reference ``values`` (missing ones ignored) at
    ``chance`` per value of refusing a legitimate one (half on each fitted side). ``ordered``: the values
    are float64 sorted ascending (NaN last), read without a copy or a partition (:func:`sorted_range`);
    the same range, but for the sign of an extreme that is a zero of both signs (-0.0 and 0.0 sort as
    equals)."""
    if ordered:
        return sorted_range(SortedEnds.of(finite_sorted(values)), chance=chance)
    _check_chance(chance)
    x = np.asarray(values, dtype=np.float64)
    x = x[np.isfinite(x)]
    lo = float(x.min()) if x.size else 0.0
    hi = float(x.max()) if x.size else 0.0
    constant = hi == lo
    lower = None if constant else fit_tail(x, side=-1)
    upper = None if constant else fit_tail(x, side=+1)
    return _range(lo, hi, lower, upper, chance=chance)


def sorted_range(ends: SortedEnds, *, chance: float = DEFAULT_CHANCE) -> AllowedRange:
    """:func:`allowed_range` of the finite values whose sorted ends are ``ends``."""
    _check_chance(chance)
    lo, hi = (float(ends.low[0]), float(ends.high[-1])) if ends.count else (0.0, 0.0)
    constant = hi == lo
    lower = None if constant else fit_sorted_tail(ends, side=-1)
    upper = None if constant else fit_sorted_tail(ends, side=+1)
    return _range(lo, hi, lower, upper, chance=chance)


def _check_chance(chance: float) -> None:
    if not 0.0 < chance < TAIL_SHARE:
        raise ValueError(f"the range chance must lie in (0, {TAIL_SHARE}), got {chance}")


def _range(lo: float, hi: float, lower: Tail | None, upper: Tail | None, *, chance: float) -> AllowedRange:
    """The range from the observed extremes and each side's fit (None: that side by the span rule)."""
    span = max(hi - lo, abs(hi), 1.0)
    low = min(lo, lower.bound(chance / 2)) if lower is not None else lo - span
    high = max(hi, upper.bound(chance / 2)) if upper is not None else hi + span
    lower_chance = chance / 2 if lower is not None else 0.0
    if lo >= 0 and low <= 0:  # a natural bound: never below 0 (no chance is spent there)
        low, lower_chance = 0.0, 0.0
    return AllowedRange(
        low=max(low, -FLOAT32_MAX),
        high=min(high, FLOAT32_MAX),
        chance=lower_chance + (chance / 2 if upper is not None else 0.0),
        lower=lower,
        upper=upper,
    )
