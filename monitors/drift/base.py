"""The shared shape of every drift test: a measurement, a threshold, a verdict.

A test measures a *statistic*, possibly a *p-value* (probability, under the null hypothesis that
reference and current are samples of one distribution, of a statistic at least this extreme) and an
*effect size* a human can read. The verdict then depends on the test's rule:

- significance tests (``p_value < alpha``),
- distance tests (``effect >= threshold``),
- combined tests (both: significant **and** at least ``threshold`` large), the default, so that huge
  windows do not alarm on negligible but significant shifts and small windows do not alarm on noise.

When many features are tested together, p-values are adjusted first (:func:`adjust_p_values`) and
the verdict uses the adjusted value.

The statistics package imports ``scipy.special`` (the distributions' tail functions), not ``scipy.stats``:
importing that costs ~0.7 s, a third of ``driftwarden drift``'s budget (only the KS test of a small window
loads it, for the exact small-sample law). What scipy.stats would add on top of ``scipy.special`` (a
contingency table, an adjustment, a weighted CDF distance, mid-ranks) is a few lines of numpy, and
tests/monitors/test_statistics_without_scipy_stats.py checks each against scipy.stats on many random
inputs: every result is identical to the bit.

The tests that validate a monitor config (:mod:`monitors.config` reads :mod:`monitors.drift.catalog`) import
``scipy.special`` only when they first compute a tail, not when their modules load: its import costs ~0.15
CPU-seconds (most of it scipy's array-API layer, which loads numpy's f2py, testing and masked arrays), and
``driftwarden drift`` checks its options before reading anything, so there it loaded on one core before the
first byte was read. :func:`monitors.offline.compare` has it imported while the reference's PCA is fitted.
"""

from __future__ import annotations

import enum
import math
from abc import ABC, abstractmethod
from dataclasses import asdict, dataclass, field
from typing import Any, ClassVar, Generic, TypeVar

import numpy as np


class Rule(enum.StrEnum):
    SIGNIFICANCE = "significance"
    DISTANCE = "distance"
    BOTH = "both"


class Correction(enum.StrEnum):
    NONE = "none"
    BONFERRONI = "bonferroni"
    BH = "bh"  # Benjamini-Hochberg false discovery rate


@dataclass(frozen=True)
class Measurement:
    """What a test measured, before any verdict."""

    statistic: float
    effect: float
    p_value: float | None = None
    details: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class TestResult:
    """A test's full answer for one feature."""

    __test__ = False  # not a pytest class

    test: str
    statistic: float
    p_value: float | None
    effect: float
    effect_name: str
    rule: Rule
    alpha: float | None
    threshold: float | None
    drifted: bool
    adjusted_p_value: float | None = None
    details: dict[str, Any] = field(default_factory=dict)

    @property
    def severity(self) -> float:
        """Effect relative to its threshold (>= 1 means at least the minimum effect)."""
        if self.threshold and self.threshold > 0:
            return self.effect / self.threshold
        return self.effect

    def as_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out["rule"] = self.rule.value
        return {k: _json_number(v) for k, v in out.items()}


def _json_number(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, np.floating | np.integer):
        return _json_number(value.item())
    if isinstance(value, dict):
        return {k: _json_number(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_json_number(v) for v in value]
    return value


InputT = TypeVar("InputT")


class DriftTest(ABC, Generic[InputT]):
    """Base of every test: holds ``alpha`` and ``threshold`` and turns a measurement into a verdict."""

    name: ClassVar[str]
    effect_name: ClassVar[str]
    rule: ClassVar[Rule]
    default_alpha: ClassVar[float | None] = 0.05
    default_threshold: ClassVar[float | None] = None

    def __init__(self, *, alpha: float | None = None, threshold: float | None = None) -> None:
        self.alpha = self.default_alpha if alpha is None else alpha
        self.threshold = self.default_threshold if threshold is None else threshold
        if self.rule in (Rule.SIGNIFICANCE, Rule.BOTH) and self.alpha is None:
            raise ValueError(f"{self.name}: a significance rule needs alpha")
        if self.rule in (Rule.DISTANCE, Rule.BOTH) and self.threshold is None:
            raise ValueError(f"{self.name}: a distance rule needs a threshold")

    @abstractmethod
    def measure(self, reference: InputT, current: InputT) -> Measurement:
        """Compute statistic, effect and p-value (no verdict)."""

    def decide(self, m: Measurement, *, p_value: float | None = None) -> bool:
        """Verdict for ``m``; ``p_value`` overrides ``m.p_value`` (e.g. after multiple-testing adjustment)."""
        p = m.p_value if p_value is None else p_value
        significant = p is not None and self.alpha is not None and p < self.alpha
        large = self.threshold is not None and m.effect >= self.threshold
        if self.rule is Rule.SIGNIFICANCE:
            return significant
        if self.rule is Rule.DISTANCE:
            return large
        return significant and large

    def result(self, m: Measurement, *, adjusted_p_value: float | None = None) -> TestResult:
        """Package ``m`` with the verdict."""
        return TestResult(
            test=self.name,
            statistic=m.statistic,
            p_value=m.p_value,
            effect=m.effect,
            effect_name=self.effect_name,
            rule=self.rule,
            alpha=self.alpha if self.rule is not Rule.DISTANCE else None,
            threshold=self.threshold if self.rule is not Rule.SIGNIFICANCE else None,
            drifted=self.decide(m, p_value=adjusted_p_value),
            adjusted_p_value=adjusted_p_value,
            details=m.details,
        )

    def __call__(self, reference: InputT, current: InputT) -> TestResult:
        return self.result(self.measure(reference, current))


def benjamini_hochberg(p_values: np.ndarray) -> np.ndarray:
    """Benjamini-Hochberg adjusted p-values (as ``scipy.stats.false_discovery_control(p, method="bh")``).

    The ``i``-th smallest of ``m`` p-values becomes ``min(1, min_{j >= i} p_(j) m / j)``: the smallest
    false discovery rate at which it would be rejected. Returned in the order of the input.
    """
    p = np.asarray(p_values, dtype=np.float64)
    m = p.size
    order = np.argsort(p, kind="stable")
    scaled = p[order] * (m / np.arange(1, m + 1))
    out = np.empty(m)
    out[order] = np.minimum(np.minimum.accumulate(scaled[::-1])[::-1], 1.0)
    return out


def adjust_p_values(p_values: np.ndarray, *, method: Correction | str = Correction.BH) -> np.ndarray:
    """Adjust p-values for testing many features at once.

    ``bh``: Benjamini-Hochberg step-up adjusted values (:func:`benjamini_hochberg`), controlling the
    false discovery rate at ``alpha`` for independent or positively dependent tests.
    ``bonferroni``: ``min(1, m * p)``, controlling the family-wise error rate. NaN entries (tests with
    no p-value) are left out of ``m`` and stay NaN.
    """
    p = np.asarray(p_values, dtype=np.float64)
    out = np.full(p.shape, np.nan)
    ok = ~np.isnan(p)
    if not ok.any():
        return out
    method = Correction(method)
    if method is Correction.NONE:
        out[ok] = p[ok]
    elif method is Correction.BONFERRONI:
        out[ok] = np.minimum(1.0, p[ok] * int(ok.sum()))
    else:
        out[ok] = benjamini_hochberg(p[ok])
    return out
