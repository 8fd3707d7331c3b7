"""The paired comparison of the candidate with the serving version (bootstrap bounds) and its judgement."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from training.retraining.comparison import (
    LOWER_IS_BETTER,
    Difference,
    difference,
)
from training.retraining.comparison import value as metric_of
from training.retraining.gate.figures import (
    MAX_CELLS,
    MAX_REPS,
    NO_SERVING,
    RELATIVE,
    TAIL_REPS,
    as_figure,
    number_text,
)
from training.retraining.gate.verdict import GateCheck, GatePolicy, Verdict


@dataclass(frozen=True)
class Comparison:
    """One paired comparison decided against a tolerance: the verdict and the figures behind it."""

    statistic: str
    diff: Difference
    tolerance: float
    verdict: Verdict
    rows: int
    reason: str  # why undecided ("" otherwise)
    rows_needed: int | None = None
    relative: float | None = None  # RELATIVE statistics: ``tolerance`` is this share of serving's value

    @property
    def lower_is_better(self) -> bool:
        return self.statistic in LOWER_IS_BETTER

    def figures(self) -> dict[str, Any]:
        st = self.statistic
        return {
            "metric": st,
            "candidate": as_figure(st, self.diff.candidate),
            "serving": as_figure(st, self.diff.serving),
            "delta": as_figure(st, self.diff.estimate),
            "bounds": [as_figure(st, self.diff.low), as_figure(st, self.diff.high)],
            "confidence": round(self.diff.confidence, 6),
            "method": self.diff.method,
            "tolerance": self.tolerance if self.relative is None else as_figure(st, self.tolerance),
            **({"relative_tolerance": self.relative} if self.relative is not None else {}),
            "rows": self.rows,
            "verdict": self.verdict.value,
            **({"rows_needed": self.rows_needed} if self.rows_needed is not None else {}),
        }

    def tolerance_text(self) -> str:
        """``0.02``; on a target's scale ``0.0621 (2% of serving's rmse)``."""
        if self.relative is None:
            return f"{self.tolerance:g}"
        return f"{self.tolerance:.6g} ({self.relative * 100:g}% of serving's {self.statistic})"

    def text(self) -> str:
        """``roc_auc 0.9741 vs serving 0.9812: delta -0.0071 (95% bounds -0.0150 to +0.0008)``."""
        d, st = self.diff, self.statistic
        ci = (
            f"{percent(d.confidence)} bounds {number_text(st, d.low, '+')} to {number_text(st, d.high, '+')}"
            if math.isfinite(d.low) and math.isfinite(d.high)
            else "no bounds"
        )
        return (
            f"{st} {number_text(st, d.candidate)} vs serving {number_text(st, d.serving)}: "
            f"delta {number_text(st, d.estimate, '+')} ({ci})"
        )


def replicate_count(configured: int, level: float, rows: int) -> int:
    """Bootstrap replicates: enough for ``TAIL_REPS`` beyond a bound at ``level``, within the budgets."""
    wanted = max(configured, math.ceil(TAIL_REPS / (1.0 - level)))
    return max(configured, min(wanted, MAX_REPS, MAX_CELLS // max(rows, 1)))


def percent(confidence: float) -> str:
    """95% / 99.5% / 98.33%: as many digits as the confidence needs, up to two."""
    for digits in range(3):
        text = f"{confidence * 100:.{digits}f}"
        if abs(float(text) - confidence * 100) < 1e-9:
            return text + "%"
    return f"{confidence * 100:.2f}%"


def _rows_needed(rows: int, half_width: float, tolerance: float) -> int | None:
    """About how many rows bring the bounds within the tolerance of the estimate (as 1/sqrt(rows))."""
    if not tolerance > 0 or not math.isfinite(tolerance) or not math.isfinite(half_width) or half_width <= 0:
        return None
    return int(math.ceil(rows * (half_width / tolerance) ** 2))


def compare(
    *,
    statistic: str,
    labels: np.ndarray,
    candidate: np.ndarray,
    serving: np.ndarray,
    tolerance: float,
    policy: GatePolicy,
    confidence: float | None = None,
    min_rows: int = 0,
    min_class_rows: int = 0,
    seed: int = 0,
    rows_note: str = "",
) -> Comparison:
    """The paired difference of ``statistic`` and its verdict against ``tolerance`` (module docstring).

    For a :data:`RELATIVE` statistic (RMSE, MAE: the target's scale) ``tolerance`` is a share of the
    serving version's value on these rows: the comparison's tolerance is ``tolerance * serving``."""
    rows = int(labels.size)
    level = policy.confidence if confidence is None else confidence
    diff = difference(
        statistic=statistic,
        labels=labels,
        candidate=candidate,
        serving=serving,
        confidence=level,
        reps=replicate_count(policy.bootstrap_reps, level, rows),
        seed=policy.seed + seed,
    )
    return judge(
        statistic=statistic,
        diff=diff,
        labels=labels,
        tolerance=tolerance,
        min_rows=min_rows,
        min_class_rows=min_class_rows,
        rows_note=rows_note,
    )


def judge(
    *,
    statistic: str,
    diff: Difference,
    labels: np.ndarray,
    tolerance: float,
    min_rows: int = 0,
    min_class_rows: int = 0,
    rows_note: str = "",
) -> Comparison:
    """The verdict of a paired difference ``diff`` of ``statistic`` on the rows of ``labels`` against
    ``tolerance`` (:func:`compare`, once the difference is known)."""
    rows = int(labels.size)
    positives = int(np.sum(labels > 0.5))
    relative = None
    if statistic in RELATIVE:
        relative = tolerance
        tolerance = tolerance * abs(diff.serving) if math.isfinite(diff.serving) else math.nan

    def decided(verdict: Verdict) -> Comparison:
        return Comparison(statistic, diff, tolerance, verdict, rows, "", relative=relative)

    def undecided(reason: str, needed: int | None = None) -> Comparison:
        return Comparison(statistic, diff, tolerance, Verdict.UNDECIDED, rows, reason, needed, relative)

    if rows < min_rows:
        return undecided(
            f"{rows} holdout rows, fewer than the {min_rows} this check needs{rows_note}", min_rows
        )
    if min(positives, rows - positives) < min_class_rows:
        return undecided(
            f"{positives} positive and {rows - positives} negative holdout rows; {statistic} needs "
            f"{min_class_rows} of each"
        )
    if not diff.defined:
        return undecided(f"{statistic} has no bounds on these rows (undefined in too many resamples)")
    low, high = (diff.low, diff.high) if statistic in LOWER_IS_BETTER else (-diff.high, -diff.low)
    if low > tolerance:
        return decided(Verdict.FAILED)
    if high <= tolerance or diff.half_width <= tolerance:
        return decided(Verdict.PASSED)
    needed = _rows_needed(rows, diff.half_width, tolerance)
    width = f"+-{number_text(statistic, diff.half_width)}"
    tol = f"{tolerance:.6g}" if relative is not None else f"{tolerance:g}"
    return undecided(
        f"the bounds ({width}) are wider than the tolerance {tol}: "
        f"{rows} holdout rows cannot tell a candidate within the tolerance from a worse one"
        + (f"; about {needed} would" if needed else ""),
        needed,
    )


def comparison_check(name: str, c: Comparison) -> GateCheck:
    worse = "higher" if c.lower_is_better else "lower"
    if c.verdict is Verdict.FAILED:
        message = (
            f"{c.text()}: {worse} than serving by more than the tolerance {c.tolerance_text()} "
            f"with {percent(c.diff.confidence)} confidence"
        )
    elif c.verdict is Verdict.UNDECIDED:
        message = f"undecided: {c.reason} ({c.text()})"
    else:
        message = f"{c.text()}: not {worse} than serving by more than the tolerance {c.tolerance_text()}"
    return GateCheck(name, c.verdict, c.figures(), message)


def no_serving_check(
    name: str, statistic: str, labels: np.ndarray, candidate: np.ndarray, tol: float
) -> GateCheck:
    found = metric_of(statistic, labels, candidate)
    figures: dict[str, Any] = {
        "metric": statistic,
        "candidate": as_figure(statistic, found),
        "serving": None,
        "delta": None,
        "tolerance": tol,
    }
    if statistic in RELATIVE:
        figures["tolerance"] = None
        figures["relative_tolerance"] = tol
    return GateCheck(
        name,
        Verdict.PASSED,
        figures | {"rows": int(labels.size)},
        f"{NO_SERVING} (candidate {statistic} {number_text(statistic, found)})",
    )
