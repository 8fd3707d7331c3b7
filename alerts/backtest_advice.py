"""An alert backtest's figures read out (pure): delays as runs and as time, a verdict per rule with the
setting that trades quiet for speed, why a rule never caught a shift, and warnings on the windows.

Every sentence is computed from the backtest's own figures and the setup's facts (:class:`Facts`):

- **quiet or noisy**: a rule's false notifications per 30 days against the model's false-alarm budget
  (``false_alarms_per_30d`` of its monitor config: the expected false alarms of all its detectors);
- **fast or slow**: a rule's delay per shift against the run from which a one-off comparison of the window
  sees the shift (``harmful_drift``: finds it harmful); more than :data:`FAST_LAG_RUNS` runs later is slow;
- **the trade**: the same runs replayed with another ``for`` (the findings do not depend on it), so the
  false notifications and delays quoted for it are measured, not guessed (:class:`Alternative`);
- **warnings**: a window smaller than the rows a run adds skips rows; one smaller than two runs' rows makes
  consecutive windows share less than half their rows (:func:`window_warnings`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from alerts.backtest_traffic import Shift, ShiftKind
from alerts.specs import Kind
from core.durations import in_words

FAST_LAG_RUNS = 2
"""A rule notifying at most this many runs after a one-off comparison sees a shift is fast."""
MORE_FOR = 5
"""A noisy rule's ``for`` is tried up to this much higher."""
DAYS_PER_NOTICE = 30.0
FEATURE_SHIFTS = frozenset({ShiftKind.ABRUPT_MEAN, ShiftKind.GRADUAL_MEAN, ShiftKind.NEW_CATEGORY})
ANSWER_KINDS = frozenset(
    {
        Kind.PREDICTION_DRIFT,
        Kind.ESTIMATED_PERFORMANCE,
        Kind.PERFORMANCE,
        Kind.CONCEPT_DRIFT,
        Kind.HARMFUL_DRIFT,
    }
)
"""Kinds that read the model's answers or the labels (not the inputs)."""
INPUT_KINDS = frozenset({Kind.DATASET_DRIFT, Kind.FEATURE_DRIFT, Kind.DATA_QUALITY})
"""Kinds that read the inputs only."""
LABEL_KINDS = frozenset({Kind.PERFORMANCE, Kind.CONCEPT_DRIFT, Kind.HARMFUL_DRIFT})
"""Kinds that see flipped labels (through the realised performance or the error stream)."""


@dataclass(frozen=True)
class Facts:
    """What the advice reads of the setup besides the figures."""

    budget: float  # the model's false_alarms_per_30d
    drift_share: float  # the share of features a dataset drift needs
    harm_min_labels: int  # labelled rows harm needs to judge the realised performance
    features: int  # input features the monitor tests
    labelled_share: float  # share of the traffic's rows with a label (0: no target)


@dataclass(frozen=True)
class Alternative:
    """A rule's figures on the same runs with another ``for`` (None delay: not caught in the runs kept)."""

    for_runs: int
    false_notifications_per_30d: float
    detection_delay_runs: dict[str, int | None]

    def as_dict(self) -> dict[str, Any]:
        return {
            "for": self.for_runs,
            "false_notifications_per_30d": self.false_notifications_per_30d,
            "detection_delay_runs": self.detection_delay_runs,
        }


def runs_text(runs: int, interval_s: float) -> str:
    """``21 runs (1 h 45 min)`` at ``interval_s`` seconds between runs; ``0 runs (at once)``."""
    if runs == 0:
        return "0 runs (at once)"
    return f"{runs:,} run{'' if runs == 1 else 's'} ({in_words(runs * interval_s)})"


def window_warnings(*, window: int, step: int, rate: float, interval_s: float, days: float) -> list[str]:
    """What to know of the windows before reading the figures: skipped rows, little overlap, few days."""
    out: list[str] = []
    every = in_words(interval_s)
    if step > window:
        lost = step - window
        out.append(
            f"rows skipped: {rate:g} rows a minute every {every} is {step:,} new rows a run, but the window "
            f"holds {window:,}: {lost:,} rows a run ({lost / step:.0%}) are never in any window (give "
            f"--window {step:,} or more, or a shorter --interval)"
        )
    elif window < 2 * step:
        shared = window - step
        out.append(
            f"little overlap: consecutive windows share {shared:,} of their {window:,} rows "
            f"({shared / window:.0%}), less than half (a window under two runs' rows, {2 * step:,}): "
            "each run tests mostly rows the last did not, so evidence does not build up from run to run and "
            f"`for: N` asks N nearly separate tests (give --window {2 * step:,} or more)"
        )
    if days < DAYS_PER_NOTICE:
        out.append(
            f"{days:.4g} days replayed: figures per 30 days are scaled from them (one false notification "
            f"counts {DAYS_PER_NOTICE / days:.4g}), and a rule with none is quiet only as far as those days "
            "show"
        )
    return out


def not_caught(
    *, kind: Kind, params: Mapping[str, Any], shift: Shift, facts: Facts, window: int, followed: int,
    interval_s: float,
) -> str:  # fmt: skip
    """Why a rule never fired on a shift: what it reads is unchanged, its threshold cannot be reached, its
    window lacks labels, or simply not within the runs the shift was followed for."""
    return (
        _unwatched(kind, params, shift)
        or _unreachable(kind, params, shift, facts)
        or _unlabelled(kind, shift, facts, window)
        or f"not caught within {runs_text(followed, interval_s)}, the runs this shift was followed for"
    )


def _unwatched(kind: Kind, params: Mapping[str, Any], shift: Shift) -> str | None:
    """The shift leaves what the rule reads unchanged (None: it may change it)."""
    if shift.kind is ShiftKind.PERFORMANCE_DROP:
        if kind in INPUT_KINDS:
            return "the shift flips labels only: the inputs this rule reads do not change"
        if kind in ANSWER_KINDS - LABEL_KINDS:
            return "the shift flips labels only: the model's answers this rule reads do not change"
        return None
    if kind in ANSWER_KINDS:
        return (
            f"the shift moves {shift.feature} only: each row keeps its reference answer and label (the "
            "model is not run on shifted rows), and this rule reads those"
        )
    wanted = params.get("feature", "*")
    if kind in (Kind.FEATURE_DRIFT, Kind.DATA_QUALITY) and wanted not in ("*", shift.feature):
        return f"it watches {wanted} only; the shift moves {shift.feature}"
    check = params.get("check")
    if kind is Kind.DATA_QUALITY and check == "missing":
        return "no shift plants missing values"
    if kind is Kind.DATA_QUALITY and check == "unseen_category" and shift.kind is not ShiftKind.NEW_CATEGORY:
        return f"its unseen_category check reads categories; the shift moves the mean of {shift.feature}"
    if kind is Kind.DATA_QUALITY and check == "out_of_range" and shift.kind is ShiftKind.NEW_CATEGORY:
        return f"its out_of_range check reads numeric values; the shift adds a category to {shift.feature}"
    return None


def _unreachable(kind: Kind, params: Mapping[str, Any], shift: Shift, facts: Facts) -> str | None:
    """A dataset-drift share above one feature's weight cannot be reached by a one-feature shift."""
    if kind is not Kind.DATASET_DRIFT or params.get("segment") or shift.kind not in FEATURE_SHIFTS:
        return None
    weight = 1 / max(facts.features, 1)
    if weight >= facts.drift_share:
        return None
    return (
        f"a one-feature shift drifts 1 of {facts.features} features ({weight:.0%}), below drift_share "
        f"{facts.drift_share:g} ({facts.drift_share:.0%}): the shift alone cannot make this rule fire"
    )


def _unlabelled(kind: Kind, shift: Shift, facts: Facts, window: int) -> str | None:
    """Too few labelled rows in the window for what the rule needs to see flipped labels."""
    if shift.kind is not ShiftKind.PERFORMANCE_DROP or kind not in LABEL_KINDS:
        return None
    labelled = round(window * facts.labelled_share)
    if labelled == 0:
        return "the window holds no labelled rows: flipped labels cannot show"
    if kind is Kind.HARMFUL_DRIFT and labelled < facts.harm_min_labels:
        return (
            f"the window holds about {labelled:,} labelled rows, fewer than harm_min_labels "
            f"{facts.harm_min_labels:,}: harm is judged on the label-free estimate, which flipped labels do "
            "not move"
        )
    return None


def verdict(
    *,
    for_runs: int,
    false_per_30d: float,
    delays: Mapping[str, int | None],
    seen_at: Mapping[str, int | None],
    harm: bool = False,
    alternatives: tuple[Alternative, ...],
    budget: float,
    interval_s: float,
) -> str:
    """One line: quiet or noisy, fast or slow (against ``seen_at``: the run from which a one-off comparison
    sees each shift, or with ``harm`` finds it harmful), and the setting that trades one for the other."""
    noisy = false_per_30d > budget
    word = "noisy" if noisy else "quiet"
    noise = f"{word} ({false_per_30d:.4g} false notifications / 30 days, budget {budget:.4g})"
    caught = {s: d for s, d in delays.items() if d is not None}
    if not caught:
        trade = (
            _trade(for_runs, noisy, False, None, caught, alternatives, budget, interval_s) if noisy else ""
        )
        return f"{noise}; caught none of the shifts" + (f": {trade}" if trade else "")
    lags = {s: d - seen for s, d in caught.items() if (seen := seen_at.get(s)) is not None}
    worst = max(lags, key=lambda s: lags[s], default=None)
    slow = worst is not None and lags[worst] > FAST_LAG_RUNS
    if worst is None or lags[worst] <= 0:
        speed = "fast (no later than a one-off test)"
    else:
        lag = runs_text(lags[worst], interval_s)
        sees = "finds it harmful" if harm else "sees it"
        speed = f"{'slow' if slow else 'fast'} ({worst} {lag} after a one-off test {sees})"
    return (
        f"{noise}, {speed}: {_trade(for_runs, noisy, slow, worst, caught, alternatives, budget, interval_s)}"
    )


def _trade(
    for_runs: int,
    noisy: bool,
    slow: bool,
    worst: str | None,
    caught: Mapping[str, int],
    alternatives: tuple[Alternative, ...],
    budget: float,
    interval_s: float,
) -> str:
    """The setting that buys quiet with delay, or speed with false notifications, with its measured cost."""
    if noisy:
        quieter = next(
            (a for a in alternatives if a.for_runs > for_runs and a.false_notifications_per_30d <= budget),
            None,
        )
        if quieter is None:
            last = max(alternatives, key=lambda a: a.for_runs, default=None)
            figure = "" if last is None else f" gives {last.false_notifications_per_30d:.4g} / 30 days,"
            return (
                f"even `for: {for_runs + MORE_FOR}`{figure} above the budget: it needs a stricter bound of "
                "its own (`below`, `above`, `margin`), a lower false_alarms_per_30d or a larger window "
                "(backtest again to measure)"
            )
        later = quieter.for_runs - for_runs
        return (
            f"`for: {for_runs}` → `for: {quieter.for_runs}` gives {quieter.false_notifications_per_30d:.4g} "
            f"false notifications / 30 days, notifying at least {runs_text(later, interval_s)} later"
        )
    sooner = next((a for a in alternatives if a.for_runs < for_runs), None)
    if sooner is not None:
        shift = worst if worst is not None else next(iter(caught))
        new = sooner.detection_delay_runs.get(shift)
        saved = caught[shift] - new if new is not None else 0
        if saved > 0:
            cost = sooner.false_notifications_per_30d
            over = " (above the budget)" if cost > budget else ""
            return (
                f"`for: {for_runs}` → `for: {sooner.for_runs}` would notify {runs_text(saved, interval_s)} "
                f"sooner on {shift} at {cost:.4g} false notifications / 30 days{over}"
            )
    if slow:
        return (
            "`for` is 1: only a higher false_alarms_per_30d (each run tests at a higher level) or a smaller "
            "window (less diluted by older rows, noisier) notifies sooner (backtest again to measure)"
            if for_runs == 1
            else "a lower `for` would not notify sooner on these runs"
        )
    return "nothing to trade"


def never_lines(reasons: Mapping[str, Mapping[str, str]], shifts: list[str]) -> list[str]:
    """``rule, rule on SHIFT: why`` per shift in ``shifts``' order, rules sharing a reason on one line."""
    grouped: dict[tuple[str, str], list[str]] = {}
    for shift in shifts:
        for rule, per_shift in reasons.items():
            if shift in per_shift:
                grouped.setdefault((shift, per_shift[shift]), []).append(rule)
    return [f"{', '.join(rules)} on {shift}: {why}" for (shift, why), rules in grouped.items()]
