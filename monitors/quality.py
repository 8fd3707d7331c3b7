"""Data-quality checks of a window against the reference: missing, out-of-range, unseen, violations.

Each check compares the window's rate with the rate expected from the reference and flags it when
the window's rate is higher by at least ``min_increase`` (absolute) *and* a one-sided binomial test
(:func:`binomial_sf`, equal to ``scipy.stats.binom.sf``) rejects "rate <= expected" at ``alpha``.
Expected rates: the reference missing rate; ``2 / (n_ref + 1)`` for values outside the reference
[min, max] (the chance that a new draw from a continuous reference falls beyond its extremes); the
Good-Turing estimate ``n_1 / N`` (share of categories seen once) for unseen categories. Contract
violations (values outside the schema's allowed range) are expected at the contract's chance per value
(``allowed_chance``: the tail estimate of ``registry.tails``; 0 for a contract written before it) and
flagged when the binomial test rejects that rate at ``alpha``, without the ``min_increase`` floor: at an
expected rate of 1e-9, two values in a window of 100,000 rows are already significant, and a contract
without a chance flags the first one, as before.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from scipy.special import betainc


@dataclass(frozen=True)
class QualityCheck:
    """One data-quality measurement of one feature."""

    feature: str
    check: str  # missing | out_of_range | unseen_category | contract_violation
    count: int
    rows: int
    rate: float
    expected_rate: float
    p_value: float | None
    flagged: bool

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def binomial_sf(k: int, n: int, p: float) -> float:
    """``P(X > k)`` for ``X ~ Binomial(n, p)``: the regularised incomplete beta ``I_p(k + 1, n - k)``.

    ``scipy.special.betainc`` gives the value ``scipy.stats.binom.sf`` gives (both go through Boost's
    incomplete beta) without importing ``scipy.stats``; tests/monitors/test_statistics_without_scipy_stats.py
    checks they agree to the bit.
    """
    if k < 0:
        return 1.0
    if k >= n:
        return 0.0
    return float(betainc(k + 1.0, float(n - k), p))


def rate_check(
    *,
    feature: str,
    check: str,
    count: int,
    rows: int,
    expected_rate: float,
    alpha: float = 0.05,
    min_increase: float = 0.01,
) -> QualityCheck:
    """Flag ``count`` of ``rows`` when clearly and significantly above ``expected_rate``."""
    rate = count / rows if rows else 0.0
    p_exp = min(max(expected_rate, 0.0), 1.0)
    p_value = binomial_sf(count - 1, rows, p_exp) if rows else 1.0
    flagged = rows > 0 and rate - p_exp >= min_increase and p_value < alpha
    return QualityCheck(
        feature=feature,
        check=check,
        count=int(count),
        rows=int(rows),
        rate=rate,
        expected_rate=p_exp,
        p_value=p_value,
        flagged=bool(flagged),
    )


def violation_check(
    *, feature: str, count: int, rows: int, expected_rate: float | None, alpha: float
) -> QualityCheck:
    """Values outside the contract's allowed range, flagged when significantly more than its chance per value
    (``expected_rate``; None, a contract without one: any is a flag)."""
    return rate_check(
        feature=feature,
        check="contract_violation",
        count=count,
        rows=rows,
        expected_rate=expected_rate or 0.0,
        alpha=alpha,
        min_increase=0.0,
    )


def good_turing_unseen(counts: dict[str, int], *, folded: str | None = None) -> float:
    """Good-Turing estimate of the probability mass of categories never seen: ``n_1 / N``; ``folded``: the
    key under which a profile counts the rare levels it did not keep, whose share is added (a window's value
    of those levels is none of the kept categories either: an id column's, nearly every one)."""
    total = sum(counts.values())
    if not total:
        return 0.0
    rest = counts.get(folded, 0) if folded is not None else 0
    return min(1.0, (sum(1 for v in counts.values() if v == 1) + rest) / total)
