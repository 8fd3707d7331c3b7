"""Error control over repeated runs (pure): the level a scheduled run tests at, spent over 30 days.

A test at ``alpha`` is wrong in ``alpha`` of the windows it sees without drift. A monitor that runs every 5
minutes looks 8,640 times a month, so ``alpha = 0.05`` per run, however well each test keeps it, raises
false findings every day. driftwarden spends a **budget of false alarms per 30 days**
(``MonitorConfig.false_alarms_per_30d``, 0.5) instead: split evenly over the :data:`FAMILIES` detector
families of a report, and each family's share over the runs of 30 days at the model's schedule (a Bonferroni
bound over the horizon: overlapping windows make the true count lower, never higher). A family then tests at

    alpha_run = min(alpha, budget / FAMILIES / runs_per_30d)

so a one-off comparison (no schedule: one run) keeps ``alpha`` (0.05), and a run every 5 minutes tests at
about 8e-6. The price is detection delay: a shift must be larger (or its rows more numerous) before it is
significant at the lower level; effect-size floors (``ks+wasserstein``: 0.05 sd, ``chi_square+tv``: 2 %)
decide in large windows anyway. Realised and estimated performance are "worse" beyond ``z`` standard
deviations of the metric's variability in the reference's own chunks (:func:`performance_limits`), with
``z`` the normal quantile of the level shared by the metrics compared (at least :data:`MIN_PERFORMANCE_Z`).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from scipy.special import chdtri, ndtri

from core.numbers import finite_float
from monitors.profile import metric_sd

HORIZON_S = 30 * 86_400.0
FAMILIES = 7
"""Detector families that share the budget: the input features (adjusted together), the model's output
(with a multi-class model's per-class outputs), the multivariate detector, the data-quality checks (adjusted
together), realised performance, estimated performance and the concept-drift detector (whose alarm rate is
set by its threshold, not by this level)."""
MIN_PERFORMANCE_Z = 3.0


def runs_per_30d(every_s: float | None) -> float:
    """How many runs 30 days hold at one run every ``every_s`` seconds (None, a one-off comparison: 1)."""
    if every_s is None or not every_s > 0:
        return 1.0
    return max(1.0, HORIZON_S / every_s)


def run_alpha(*, alpha: float, budget: float, every_s: float | None) -> float:
    """The level one detector family of a run tests at: ``alpha`` at most, the budget spent over 30 days."""
    return min(alpha, budget / FAMILIES / runs_per_30d(every_s))


def performance_z(level: float) -> float:
    """How many standard deviations worse than the reference a metric must be to count (one-sided)."""
    return max(MIN_PERFORMANCE_Z, float(ndtri(1.0 - level)))


LOWER_IS_BETTER = frozenset({"log_loss", "mae", "rmse"})
"""Metrics that grow when the model gets worse (the others fall)."""
QUALITY_METRICS = frozenset({"accuracy", "precision", "recall", "f1", "roc_auc", "macro_f1", "r2"}) | (
    LOWER_IS_BETTER
)
"""The metrics a model can be worse in (a positive rate or a per-class recall is not one)."""
SD_CONFIDENCE = 0.95
"""The chunks' sd is an estimate: the limits use its upper bound at this confidence (chi-square, chunks - 1
degrees of freedom): 20 % above it with 50 chunks, 37 % with 20, 65 % with 10."""


def performance_limits(
    current: Mapping[str, Any] | None,
    *,
    reference: Mapping[str, Any] | None,
    spread: Mapping[str, Any] | None,
    level: float,
) -> dict[str, float] | None:
    """Per quality metric of ``current``, the value beyond which it is worse than the reference: ``z``
    standard deviations of the metric on a window of ``current["rows"]`` rows (:func:`monitors.profile.
    metric_sd`: the window's own and the reference value's variability, from the reference's chunks, at the
    upper bound of its estimate), ``z`` from ``level`` shared by the metrics (Bonferroni). None without a
    spread (a profile built before it was measured) or without rows."""
    if not current or not reference or not spread:
        return None
    rows = int(current.get("rows") or 0)
    sds: dict[str, tuple[float, float]] = {}
    for metric in sorted(QUALITY_METRICS & set(reference)):
        ref, sd = finite_float(reference[metric]), metric_sd(spread, metric, rows=rows)
        if ref is not None and sd is not None and finite_float(current.get(metric)) is not None:
            sds[metric] = (ref, sd * sd_allowance(int(spread.get("chunks") or 0)))
    if not sds:
        return None
    z = performance_z(level / len(sds))
    return {m: ref + z * sd if m in LOWER_IS_BETTER else ref - z * sd for m, (ref, sd) in sds.items()}


def worse_than(metric: str, value: float, limit: float) -> bool:
    """Whether ``value`` of ``metric`` is beyond its limit: above it for a metric that grows when the model
    gets worse, below it for the others."""
    return value > limit if metric in LOWER_IS_BETTER else value < limit


def sd_allowance(chunks: int) -> float:
    """How much larger than its estimate from ``chunks`` chunks the sd may be (:data:`SD_CONFIDENCE`)."""
    if chunks < 2:
        return 1.0
    dof = chunks - 1
    return math.sqrt(dof / float(chdtri(dof, SD_CONFIDENCE)))
