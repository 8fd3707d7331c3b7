"""Categorical drift tests on category counts (missing values excluded)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

from monitors.drift.base import DriftTest, Measurement, Rule
from monitors.drift.numeric import js_distance, psi
from monitors.profile import OTHER_LEVELS, CategoricalProfile

SHOWN_CATEGORY = 64  # characters of a category a report shows; a longer one is cut, its length said


def shown_category(value: str) -> str:
    """A category as a report shows it (histogram labels, unseen categories): at most 64 characters."""
    if len(value) <= SHOWN_CATEGORY:
        return value
    return f"{value[: SHOWN_CATEGORY - 16]}… ({len(value)} chars)"


@dataclass(frozen=True)
class CategoricalCounts:
    """Counts per category of one side of a comparison."""

    counts: Mapping[str, int]

    @property
    def n(self) -> int:
        return int(sum(self.counts.values()))

    @classmethod
    def from_profile(cls, profile: CategoricalProfile) -> CategoricalCounts:
        return cls(counts=profile.categories)

    @classmethod
    def from_values(cls, values: np.ndarray) -> CategoricalCounts:
        """Count raw values; None and "" are missing and not counted."""
        keys, n = np.unique(
            np.asarray([v for v in values if v is not None and v != ""], dtype=str), return_counts=True
        )
        return cls(counts=dict(zip(keys.tolist(), n.tolist(), strict=True)))


def aligned(
    reference: CategoricalCounts, current: CategoricalCounts
) -> tuple[list[str], np.ndarray, np.ndarray]:
    """Categories (reference ones first, then unseen ones) and both count vectors on them; against a profile
    that folded its rare levels (:data:`monitors.profile.OTHER_LEVELS`) the current ones outside it fold
    too."""
    if OTHER_LEVELS in reference.counts:
        current = CategoricalCounts(counts=folded(current.counts, reference.counts))
    cats = sorted(reference.counts) + sorted(set(current.counts) - set(reference.counts))
    r = np.array([reference.counts.get(c, 0) for c in cats], dtype=np.float64)
    c = np.array([current.counts.get(c, 0) for c in cats], dtype=np.float64)
    return cats, r, c


def folded(counts: Mapping[str, int], kept: Mapping[str, int]) -> dict[str, int]:
    """``counts`` with every category outside ``kept`` added into :data:`OTHER_LEVELS`."""
    out: dict[str, int] = {}
    for key, n in counts.items():
        name = key if key in kept else OTHER_LEVELS
        out[name] = out.get(name, 0) + n
    return out


def total_variation(reference: np.ndarray, current: np.ndarray) -> float:
    """Half the L1 distance of the proportions: the share of rows that would have to change category."""
    if reference.sum() == 0 or current.sum() == 0:
        return 0.0
    return float(0.5 * np.abs(reference / reference.sum() - current / current.sum()).sum())


class ChiSquare(DriftTest[CategoricalCounts]):
    """Chi-square test of homogeneity on the 2 x k contingency table (reference, current) x category.

    Statistic ``sum (O - E)^2 / E`` with ``E`` from the pooled proportions, categories absent from
    both rows dropped, no continuity correction (as ``scipy.stats.chi2_contingency(correction=False)``);
    null distribution chi-square with ``k - 1`` degrees of freedom (``scipy.special.chdtrc``). Unseen
    categories enter as columns with a zero reference count. Effect: total variation distance (share
    of rows that moved category); Cramer's V is in the details. No bins or epsilon.
    """

    name = "chi_square"
    effect_name = "total variation"
    rule = Rule.SIGNIFICANCE

    def measure(self, reference: CategoricalCounts, current: CategoricalCounts) -> Measurement:
        _, r, c = aligned(reference, current)
        keep = (r + c) > 0
        r, c = r[keep], c[keep]
        tv = total_variation(r, c)
        if r.sum() == 0 or c.sum() == 0 or r.size < 2:
            return Measurement(statistic=0.0, effect=tv, p_value=1.0, details={"dof": 0})
        observed = np.vstack([r, c])
        expected = np.outer(observed.sum(axis=1), observed.sum(axis=0)) / observed.sum()
        stat = float(((observed - expected) ** 2 / expected).sum())
        dof = r.size - 1
        v = float(np.sqrt(stat / (r.sum() + c.sum())))  # Cramer's V of a 2 x k table
        from scipy.special import chdtrc  # here: see monitors.drift.base on when scipy.special loads

        return Measurement(
            statistic=stat,
            effect=tv,
            p_value=float(chdtrc(dof, stat)),
            details={"dof": dof, "cramers_v": v},
        )


class CategoricalJensenShannon(DriftTest[CategoricalCounts]):
    """Jensen-Shannon distance (base 2, in [0, 1]) of the category proportions; unseen ones included."""

    name = "jensen_shannon"
    effect_name = "JS distance (base 2)"
    rule = Rule.DISTANCE
    default_alpha = None
    default_threshold = 0.1

    def measure(self, reference: CategoricalCounts, current: CategoricalCounts) -> Measurement:
        _, r, c = aligned(reference, current)
        value = js_distance(r, c)
        return Measurement(statistic=value, effect=value)


class CategoricalPSI(DriftTest[CategoricalCounts]):
    """PSI over categories (one bin each, unseen ones included), natural log, proportions floored at 1e-4."""

    name = "psi"
    effect_name = "PSI"
    rule = Rule.DISTANCE
    default_alpha = None
    default_threshold = 0.1

    def measure(self, reference: CategoricalCounts, current: CategoricalCounts) -> Measurement:
        _, r, c = aligned(reference, current)
        value = psi(r, c)
        return Measurement(statistic=value, effect=value)


class UnseenCategories(DriftTest[CategoricalCounts]):
    """Share of current (non-missing) rows whose category never occurred in the reference.

    Statistic and effect: that share; drifted at ``threshold`` (0.5 %) or more. The new categories
    and their counts are in the details. No p-value.
    """

    name = "unseen_categories"
    effect_name = "unseen share"
    rule = Rule.DISTANCE
    default_alpha = None
    default_threshold = 0.005

    def measure(self, reference: CategoricalCounts, current: CategoricalCounts) -> Measurement:
        unseen = {k: int(v) for k, v in current.counts.items() if k not in reference.counts and v > 0}
        n = current.n
        share = sum(unseen.values()) / n if n else 0.0
        top = {shown_category(k): v for k, v in sorted(unseen.items(), key=lambda kv: -kv[1])[:10]}
        return Measurement(statistic=share, effect=share, details={"unseen": top, "n_unseen": len(unseen)})


class CategoricalDefault(DriftTest[CategoricalCounts]):
    """The default categorical verdict: chi-square significance **and** a minimum total variation.

    Drifted when the (adjusted) chi-square p-value is below ``alpha`` (0.05) *and* at least
    ``threshold`` (2 %) of rows moved category (total variation distance), for the same reasons as
    :class:`~monitors.drift.numeric.NumericDefault`.
    """

    name = "chi_square+tv"
    effect_name = "total variation"
    rule = Rule.BOTH
    default_alpha = 0.05
    default_threshold = 0.02

    def measure(self, reference: CategoricalCounts, current: CategoricalCounts) -> Measurement:
        return ChiSquare().measure(reference, current)
