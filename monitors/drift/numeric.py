"""Numeric drift tests on counts over the reference quantile grid (see :mod:`monitors.binning`).

Every test reads a :class:`NumericCounts` for the reference (from the profile) and one for the
current window (counted on the *reference's* grid), so the window is never held in memory.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from monitors.binning import GridCounts, cdf_at_cell_ends, cell_points, coarse_counts, count_on_grid
from monitors.drift.base import DriftTest, Measurement, Rule
from monitors.profile import NumericProfile

PSI_EPSILON = 1e-4  # floor on bin proportions so that empty bins give a finite PSI
KS_EXACT_MAX_N = 10_000  # above this effective size, kstwo.sf gets slow (up to 0.3 s); use Stephens' form


def ks_p_value(d: float, *, n: int, m: int, exact_max_n: int = KS_EXACT_MAX_N) -> float:
    """Two-sided p-value of a two-sample KS statistic ``d`` for sample sizes ``n`` and ``m``.

    With ``en = n m / (n + m)``: ``scipy.stats.kstwo.sf(d, round(en))`` (as ``ks_2samp(method="asymp")``)
    up to ``en = 10_000``; beyond, Stephens' corrected limit ``kstwobign.sf((sqrt(en) + 0.12 + 0.11 /
    sqrt(en)) d)``, within 0.3 % of it for p between 1e-3 and 0.5 at that size, and milliseconds faster.
    ``kstwobign.sf`` is ``scipy.special.kolmogorov``; ``kstwo`` lives only in ``scipy.stats``, imported
    (~0.7 s, once) when a window is that small. ``exact_max_n=0``: Stephens' form at every size (the many
    small tests of the segments, :mod:`monitors.segments`).
    """
    if n == 0 or m == 0:
        return 1.0
    en = n * m / (n + m)
    if en <= exact_max_n:
        from scipy.stats import kstwo

        p = kstwo.sf(d, np.round(en))
    else:
        from scipy.special import kolmogorov  # here: see monitors.drift.base on when scipy.special loads

        e = np.sqrt(en)
        p = kolmogorov((e + 0.12 + 0.11 / e) * d)
    return float(np.clip(p, 0.0, 1.0))


@dataclass(frozen=True)
class NumericCounts:
    """One side of a numeric comparison: cell counts on a grid, plus the reference's bins and spread."""

    grid: np.ndarray
    cells: np.ndarray
    cuts: np.ndarray
    scale: float
    sums: np.ndarray | None = None  # per-cell sums of the values, when known

    @property
    def n(self) -> int:
        return int(self.cells.sum())

    def coarse(self) -> np.ndarray:
        """Counts on the reference decile bins."""
        return coarse_counts(self.cells, self.grid, self.cuts)

    @classmethod
    def from_profile(cls, profile: NumericProfile) -> NumericCounts:
        """The reference side, from its profile."""
        sums = profile.grid_sums if profile.grid_sums.shape == profile.grid_counts.shape else None
        return cls(
            grid=profile.grid,
            cells=profile.grid_counts,
            cuts=profile.bin_cuts,
            scale=profile.scale,
            sums=sums,
        )

    @classmethod
    def from_grid_counts(cls, counts: GridCounts, *, reference: NumericCounts) -> NumericCounts:
        """The current side, from counts made on the reference grid."""
        if counts.cells.shape != reference.cells.shape:
            raise ValueError("current counts were not made on the reference grid")
        return cls(
            grid=reference.grid,
            cells=counts.cells,
            cuts=reference.cuts,
            scale=reference.scale,
            sums=counts.sums,
        )

    @classmethod
    def from_values(cls, values: np.ndarray, *, reference: NumericCounts) -> NumericCounts:
        """The current side, from raw values (NaN ignored)."""
        return cls.from_grid_counts(count_on_grid(values, reference.grid), reference=reference)


def _check(reference: NumericCounts, current: NumericCounts) -> None:
    if reference.cells.shape != current.cells.shape:
        raise ValueError("reference and current are not on the same grid")


class KolmogorovSmirnov(DriftTest[NumericCounts]):
    """Two-sample Kolmogorov-Smirnov test on grid counts.

    Statistic ``D = max |F_ref(x) - F_cur(x)|`` evaluated at every grid point and just before it
    (``F(g_j)`` and ``F(g_j-)``). Both ECDFs are exact there; between grid points the reference moves
    by at most one open cell's mass (about 1/1000 with a 1001-quantile sketch, zero when the
    reference has at most 1001 distinct values), so ``D`` is exact for discrete features and at most
    that much below the raw-sample statistic otherwise (a conservative test).
    Null distribution: Smirnov's asymptotic law (:func:`ks_p_value`), as
    ``scipy.stats.ks_2samp(..., method="asymp")``. Effect: ``D`` (largest gap between the CDFs).
    No bins beyond the grid, no epsilon, no logarithm.
    """

    name = "ks"
    effect_name = "max CDF gap"
    rule = Rule.SIGNIFICANCE

    def measure(self, reference: NumericCounts, current: NumericCounts) -> Measurement:
        _check(reference, current)
        n, m = reference.n, current.n
        if n == 0 or m == 0:
            return Measurement(
                statistic=0.0, effect=0.0, p_value=1.0, details={"n_reference": n, "n_current": m}
            )
        gap = np.abs(cdf_at_cell_ends(reference.cells) - cdf_at_cell_ends(current.cells))
        d = float(min(gap.max(), 1.0))
        p = ks_p_value(d, n=n, m=m)
        return Measurement(statistic=d, effect=d, p_value=p, details={"n_reference": n, "n_current": m})


def wasserstein_1d(u: np.ndarray, v: np.ndarray, u_weights: np.ndarray, v_weights: np.ndarray) -> float:
    """First Wasserstein distance of two weighted samples of points (as ``scipy.stats.wasserstein_distance``).

    ``W1 = integral |U(x) - V(x)| dx`` with ``U``, ``V`` the weighted empirical CDFs: both step functions
    are constant between consecutive points of the union, so the integral is a sum over those gaps.
    """
    u_order, v_order = np.argsort(u), np.argsort(v)
    points = np.sort(np.concatenate([u, v]))
    gaps = np.diff(points)
    u_cum = np.concatenate([[0.0], np.cumsum(u_weights[u_order])])
    v_cum = np.concatenate([[0.0], np.cumsum(v_weights[v_order])])
    u_cdf = u_cum[np.searchsorted(u[u_order], points[:-1], side="right")] / u_cum[-1]
    v_cdf = v_cum[np.searchsorted(v[v_order], points[:-1], side="right")] / v_cum[-1]
    return float(np.vecdot(np.abs(u_cdf - v_cdf), gaps))


def wasserstein(reference: NumericCounts, current: NumericCounts) -> float:
    """First Wasserstein distance between the two grid histograms, in the feature's units.

    An infinite value counts as the most extreme finite value either side holds on its side (the cells of
    ``-inf`` and ``inf`` are moved there): a distance through an infinity would be infinite, or NaN, whatever
    the finite values did, while this one grows with the share of values that went to an infinity.
    """
    _check(reference, current)
    if reference.n == 0 or current.n == 0:
        return 0.0
    u = cell_points(reference.grid, cells=reference.cells, sums=reference.sums)
    v = cell_points(current.grid, cells=current.cells, sums=current.sums)
    u_weights, v_weights = reference.cells.astype(np.float64), current.cells.astype(np.float64)
    u, v = infinities_at_finite_ends([u, v], held=[u_weights > 0, v_weights > 0])
    return wasserstein_1d(u, v, u_weights, v_weights)


def infinities_at_finite_ends(
    sides: Sequence[np.ndarray], *, held: Sequence[np.ndarray] | None = None
) -> list[np.ndarray]:
    """The sides' values (NaN-free, or cell points) as a distance between them reads them: ``-inf`` and
    ``inf`` at the lowest and highest finite value of any side (0 when none is finite), counting only the
    values where ``held`` (each side's cells that hold values) is True; a NaN (an empty cell's point) at the
    lowest. Sides without an infinity are returned as they are."""
    if all(np.isfinite(x).all() for x in sides):
        return list(sides)
    marks = held or [np.ones(x.shape, dtype=bool) for x in sides]
    finite = np.concatenate([x[m & np.isfinite(x)] for x, m in zip(sides, marks, strict=True)])
    low, high = (float(finite.min()), float(finite.max())) if finite.size else (0.0, 0.0)
    return [np.nan_to_num(x, nan=low, neginf=low, posinf=high) for x in sides]


class Wasserstein(DriftTest[NumericCounts]):
    """Normalised Wasserstein (earth mover's) distance.

    Statistic ``W1 = integral |F_ref - F_cur| dx`` (:func:`wasserstein_1d`) with each
    grid point's atom at the point and each open cell's mass, on either side, at the mean of that
    side's values in the cell (midpoint when sums are unknown). Only the arrangement of mass inside a
    cell is lost, so the error is at most each open cell's mass times its width, small with a
    1001-quantile grid, and zero when the reference has at most 1001 distinct values and the window
    lies on them or outside the reference range. Effect: ``W1 / sd_ref`` ("the distribution moved
    this many reference standard deviations"; IQR/1.349 when sd is 0). An infinite value counts as the
    most extreme finite one (:func:`wasserstein`). No p-value; no epsilon.
    """

    name = "wasserstein"
    effect_name = "W1 / reference sd"
    rule = Rule.DISTANCE
    default_alpha = None
    default_threshold = 0.1

    def measure(self, reference: NumericCounts, current: NumericCounts) -> Measurement:
        w = wasserstein(reference, current)
        return Measurement(statistic=w, effect=w / reference.scale, details={"scale": reference.scale})


def psi(reference: np.ndarray, current: np.ndarray, *, epsilon: float = PSI_EPSILON) -> float:
    """Population stability index of two count vectors on the same bins (natural log).

    ``PSI = sum_i (c_i - r_i) ln(c_i / r_i)`` over bin proportions, each floored at ``epsilon``.
    """
    r = np.maximum(reference / max(reference.sum(), 1), epsilon)
    c = np.maximum(current / max(current.sum(), 1), epsilon)
    return float(np.sum((c - r) * np.log(c / r)))


def js_distance(reference: np.ndarray, current: np.ndarray) -> float:
    """Jensen-Shannon distance, base 2 (in [0, 1]), of two count vectors
    (as ``scipy.spatial.distance.jensenshannon(r, c, base=2)``).

    ``sqrt((KL(r || m) + KL(c || m)) / 2)`` of the proportions, ``m = (r + c) / 2``, the relative entropies
    by ``scipy.special.rel_entr`` (``0 log 0 = 0``) in bits.
    """
    if reference.sum() == 0 or current.sum() == 0:
        return 0.0
    r = reference.astype(np.float64) / reference.sum()
    c = current.astype(np.float64) / current.sum()
    m = (r + c) / 2.0
    from scipy.special import rel_entr  # here: see monitors.drift.base on when scipy.special loads

    bits = (np.sum(rel_entr(r, m)) + np.sum(rel_entr(c, m))) / np.log(2)
    return float(np.sqrt(bits / 2.0))


class NumericPSI(DriftTest[NumericCounts]):
    """Population stability index on the reference decile bins.

    Bins: ``(-inf, q_.1], (q_.1, q_.2], ..., (q_.9, inf)`` of the reference (fewer when quantiles
    tie). Statistic and effect: ``PSI = sum (c - r) ln(c / r)``, natural log, proportions floored at
    ``1e-4`` so empty bins stay finite. Conventional reading: < 0.1 stable, 0.1-0.25 moderate,
    > 0.25 major. No p-value.
    """

    name = "psi"
    effect_name = "PSI"
    rule = Rule.DISTANCE
    default_alpha = None
    default_threshold = 0.1

    def measure(self, reference: NumericCounts, current: NumericCounts) -> Measurement:
        _check(reference, current)
        value = psi(reference.coarse(), current.coarse())
        return Measurement(statistic=value, effect=value, details={"bins": int(reference.cuts.size + 1)})


class NumericJensenShannon(DriftTest[NumericCounts]):
    """Jensen-Shannon distance on the reference decile bins.

    Statistic and effect: ``sqrt(JSD)``, ``JSD = (KL(r||m) + KL(c||m)) / 2``, ``m = (r + c) / 2``,
    log base 2 so it lies in [0, 1]; empty bins need no epsilon (``0 log 0 = 0``). No p-value.
    """

    name = "jensen_shannon"
    effect_name = "JS distance (base 2)"
    rule = Rule.DISTANCE
    default_alpha = None
    default_threshold = 0.1

    def measure(self, reference: NumericCounts, current: NumericCounts) -> Measurement:
        _check(reference, current)
        value = js_distance(reference.coarse(), current.coarse())
        return Measurement(statistic=value, effect=value, details={"bins": int(reference.cuts.size + 1)})


class NumericDefault(DriftTest[NumericCounts]):
    """The default numeric verdict: KS significance **and** a minimum normalised Wasserstein distance.

    Drifted when the (adjusted) KS p-value is below ``alpha`` (0.05) *and* ``W1 / sd_ref`` is at
    least ``threshold`` (0.05 sd). Significance keeps small windows from alarming on sampling noise;
    the effect floor keeps million-row windows from alarming on shifts too small to matter, while
    being low enough that shifts just under the customary 0.1 distance cut-off are still caught.
    Statistic and p-value are the KS ones; the effect is the normalised Wasserstein distance.
    """

    name = "ks+wasserstein"
    effect_name = "W1 / reference sd"
    rule = Rule.BOTH
    default_alpha = 0.05
    default_threshold = 0.05

    def measure(self, reference: NumericCounts, current: NumericCounts) -> Measurement:
        ks = KolmogorovSmirnov().measure(reference, current)
        w = Wasserstein().measure(reference, current)
        return Measurement(
            statistic=ks.statistic, effect=w.effect, p_value=ks.p_value, details={**ks.details, **w.details}
        )
