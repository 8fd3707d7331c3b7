"""Harmful drift (pure): is the model's performance on the window worse than the reference's, beyond a
tolerance?

Drift that leaves the model's performance alone needs no retraining and no page. :func:`assess` judges one
metric (``MonitorConfig.harm_metric``; by default the task's own: ``roc_auc`` for a binary classifier,
``macro_f1`` for a multi-class one, ``rmse`` for a regression, as the default alert rules read ``roc_auc``)
on the window: realised where the window has at least ``harm_min_labels`` labelled rows, else the
label-free estimate (CBPE for a classifier, DLE for a regression). The window is harmful when its one-sided
bound at the run's level lies beyond the **limit**, the reference's value worsened by the tolerance
(``harm_tolerance``: 0.02 absolute for a metric that falls when the model gets worse, 5 % of the reference's
value for one that grows):

    falling metric:  harmful  when  value + z * sd < reference - tolerance
    growing metric:  harmful  when  value - z * sd > reference * (1 + tolerance)

``sd`` is the metric's sd on a window of this many rows from the reference's own chunks
(:func:`monitors.profile.metric_sd`, at the upper bound of its estimate: :func:`monitors.horizon.
sd_allowance`), ``z`` the normal quantile of the run's level (:func:`monitors.horizon.performance_z`, at
least 3): a one-off comparison tests at ``alpha``, a run every 5 minutes at about 8e-6, so the latter needs
a larger drop. The null hypothesis is "within the tolerance": at its boundary the test is wrong in ``level``
of the windows, on traffic whose performance has not moved far less often. Harm re-tests the realised or
the estimated performance's figure with a margin added, so it shares those families' share of the
false-alarm budget (``monitors.horizon.FAMILIES`` is unchanged).

A profile without the reference chunks' spread (built before it was measured) has no sd: the point value
is then judged against a limit widened by :data:`NO_SPREAD_MARGIN` (the performance rules' own fallback
margin; a share of the reference's value for a growing metric), and the bounds are the value itself.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from core.numbers import finite_float
from monitors.config import MonitorConfig
from monitors.horizon import LOWER_IS_BETTER, performance_z, sd_allowance
from monitors.profile import Profile, metric_sd
from monitors.report import DriftReport
from registry.schema import Task

TASK_METRIC = {Task.BINARY: "roc_auc", Task.MULTICLASS: "macro_f1", Task.REGRESSION: "rmse"}
"""The metric judged when the monitor config names none."""
TOLERANCE = 0.02
"""The default tolerance of a metric that falls when the model gets worse (absolute: 0.02 of ROC AUC,
accuracy, F1, ...): about the chunk-to-chunk spread of ROC AUC on 500 rows, below which a change rarely
repays a retraining."""
RELATIVE_TOLERANCE = 0.05
"""The default tolerance of a metric that grows (rmse, mae, log_loss): 5 % of the reference's value, since
an error's scale is the target's."""
NO_SPREAD_MARGIN = 0.05
"""Without the reference's spread: the limit moves this much further (a share for a growing metric)."""


def assess(
    report: DriftReport, *, profile: Profile, config: MonitorConfig, level: float
) -> dict[str, Any] | None:
    """Whether the window's performance is worse than the reference's beyond the tolerance at ``level``;
    None without a figure of the metric (no prediction profiled, no estimate, no reference value)."""
    metric = config.harm_metric or TASK_METRIC[profile.task]
    reference = finite_float((report.reference_performance or {}).get(metric))
    chosen = _figure(report, metric=metric, min_labels=config.harm_min_labels)
    if reference is None or chosen is None:
        return None
    estimate, value, rows = chosen
    tolerance = _tolerance(metric, config.harm_tolerance)
    sd = metric_sd(profile.performance_spread, metric, rows=rows)
    if sd is not None:
        sd *= sd_allowance(int((profile.performance_spread or {}).get("chunks") or 0))
    z = performance_z(level)
    return judge(
        estimate=estimate,
        metric=metric,
        value=value,
        reference=reference,
        rows=rows,
        tolerance=tolerance,
        half_width=None if sd is None else z * sd,
        level=level,
    )


def judge(
    *,
    estimate: str,
    metric: str,
    value: float,
    reference: float,
    rows: int,
    tolerance: float,
    half_width: float | None,
    level: float,
) -> dict[str, Any]:
    """The harm figure of one value: its bounds ``value -/+ half_width`` (None: no spread, the value and a
    limit widened by :data:`NO_SPREAD_MARGIN`) against the reference worsened by ``tolerance``."""
    grows = metric in LOWER_IS_BETTER
    margin = tolerance + (NO_SPREAD_MARGIN if half_width is None else 0.0)
    limit = reference * (1.0 + margin) if grows else reference - margin
    width = 0.0 if half_width is None else half_width
    lower, upper = value - width, value + width
    harmful = lower > limit if grows else upper < limit
    out: dict[str, Any] = {
        "estimate": estimate,
        "metric": metric,
        "value": value,
        "reference": reference,
        "change": value - reference,
        "tolerance": tolerance,
        "limit": limit,
        "lower": lower,
        "upper": upper,
        "level": level,
        "rows": rows,
        "harmful": bool(harmful),
    }
    out["message"] = message(out, spread=half_width is not None)
    return out


def _figure(report: DriftReport, *, metric: str, min_labels: int) -> tuple[str, float, int] | None:
    """The estimate judged, its value and rows: realised with enough labelled rows, else the label-free
    one."""
    realised = report.performance or {}
    value, rows = finite_float(realised.get(metric)), int(finite_float(realised.get("rows")) or 0)
    if value is not None and rows >= min_labels:
        return "realised", value, rows
    estimated = report.estimated_performance or {}
    value, rows = finite_float(estimated.get(metric)), int(finite_float(estimated.get("rows")) or 0)
    if value is None or rows <= 0:
        return None
    return report.estimate_method.lower(), value, rows


def _tolerance(metric: str, given: float | None) -> float:
    """The configured tolerance, else the default of a falling or a growing metric."""
    if given is not None:
        return float(given)
    return RELATIVE_TOLERANCE if metric in LOWER_IS_BETTER else TOLERANCE


NAMES = {"realised": "realised", "cbpe": "estimated (CBPE)", "dle": "estimated (DLE)"}


def message(harm: Mapping[str, Any], *, spread: bool = True) -> str:
    """One line: the estimate, the value against the reference and the tolerance, and the verdict."""
    metric, grows = harm["metric"], harm["metric"] in LOWER_IS_BETTER
    value, reference, change = harm["value"], harm["reference"], harm["change"]
    worse = change > 0 if grows else change < 0
    side = ("above" if grows else "below") if worse else ("below" if grows else "above")
    tolerance = f"{harm['tolerance']:.0%} of the reference" if grows else f"{harm['tolerance']:g}"
    head = f"{NAMES.get(harm['estimate'], harm['estimate'])} {metric} {value:.3f} is {side} the reference "
    head += f"{reference:.3f} by {abs(change):.3f}"
    bound = harm["lower"] if grows else harm["upper"]
    if not spread:
        how = (
            f"no spread in the profile: the value against the limit {harm['limit']:.3f} (tolerance + margin)"
        )
    else:
        which = "lower" if grows else "upper"
        how = f"its {which} bound {bound:.3f} at level {harm['level']:.2g}, the limit {harm['limit']:.3f}"
    verdict = "harmful" if harm["harmful"] else "not harmful"
    within = "beyond" if harm["harmful"] else "not beyond"
    return f"{head}, {within} the tolerance {tolerance} ({how}): {verdict}"
