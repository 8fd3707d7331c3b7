"""The calibration checks: expected calibration error, overall and per class."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import replace
from typing import Any

import numpy as np

from registry.schema import Task
from training.retraining.comparison import (
    ECE_BINS,
    bootstrap_classes,
    class_calibration_errors,
)
from training.retraining.comparison import value as metric_of
from training.retraining.gate.figures import (
    MIN_ROWS,
    NO_SERVING,
    SHOWN,
    min_rows,
    round_figure,
    shape_check,
    shape_problem,
)
from training.retraining.gate.judgement import (
    Comparison,
    compare,
    comparison_check,
    judge,
    no_serving_check,
    percent,
    replicate_count,
)
from training.retraining.gate.metric_check import per_class_note
from training.retraining.gate.verdict import DEFAULT_POLICY, GateCheck, GatePolicy, Verdict


def expected_calibration_error(labels: np.ndarray, probs: np.ndarray) -> float:
    """The gate's expected calibration error: 10 equal-width bins, debiased
    (:func:`training.retraining.comparison.weighted_ece`); NaN for no rows."""
    return metric_of("ece", labels, probs)


def calibration(
    *,
    labels: np.ndarray,
    candidate: np.ndarray,
    serving: np.ndarray | None,
    tolerance: float,
    policy: GatePolicy = DEFAULT_POLICY,
    task: Task = Task.BINARY,
    classes: Sequence[str] = (),
) -> GateCheck:
    """The paired difference of the expected calibration error (10 equal-width bins) against ``tolerance``.

    Multi-class: :func:`class_calibration` (each class one-vs-rest). Regression: not applicable (passed,
    saying so: a value has no probability to calibrate)."""
    if task is Task.REGRESSION:
        return GateCheck(
            "calibration",
            Verdict.PASSED,
            {"metric": None, "task": task.value, "applicable": False},
            "not applicable to regression: a regression's values carry no probability to calibrate",
        )
    if task is Task.MULTICLASS:
        return class_calibration(
            labels=labels,
            candidate=candidate,
            serving=serving,
            tolerance=tolerance,
            policy=policy,
            classes=classes,
        )
    if serving is None:
        check = no_serving_check("calibration", "ece", labels, candidate, tolerance)
    else:
        check = comparison_check(
            "calibration",
            compare(
                statistic="ece",
                labels=labels,
                candidate=candidate,
                serving=serving,
                tolerance=tolerance,
                policy=policy,
                min_rows=MIN_ROWS["calibration"],
                seed=2,
            ),
        )
    return replace(check, figures=check.figures | {"bins": ECE_BINS})


def class_calibration(
    *,
    labels: np.ndarray,
    candidate: np.ndarray,
    serving: np.ndarray | None,
    tolerance: float,
    policy: GatePolicy = DEFAULT_POLICY,
    classes: Sequence[str] = (),
) -> GateCheck:
    """Multi-class calibration: per class, the paired difference of the one-vs-rest debiased ECE
    (``labels == k`` against column ``k``: :func:`training.retraining.comparison.bootstrap_classes`, every
    class on the same replicates) against ``tolerance``, at the confidence corrected for the number of classes
    (Bonferroni, as the slices). Fails when a class
    fails, undecided when none fails and one cannot decide; the figures are those of the deciding class
    (failed: the most confidently worse; undecided: the one needing most rows; passed: the largest delta),
    with every class under ``classes``.

    Why each class and not one summary: the classwise mean ECE (Kull et al. 2019) divides a miscalibration
    of one class by K (0.1 on one class of 10 moves it by 0.01, inside the 0.02 tolerance); the worst
    class's ECE compares different classes of the two versions (a candidate that breaks a class the serving
    version calibrated well passes when the serving version is as bad on another). A class is what a user
    acts on, so each class is judged against the same class of the serving version, as a slice is."""
    if problem := shape_problem(Task.MULTICLASS, labels, candidate, serving):
        return shape_check("calibration", "ece", problem)
    k = candidate.shape[1]
    names = [str(classes[i]) if i < len(classes) else str(i) for i in range(k)]
    base: dict[str, Any] = {"per_class": True, "bins": ECE_BINS}
    if serving is None:
        return _uncompared_classes(labels, candidate, tolerance=tolerance, names=names, base=base)
    level = 1.0 - (1.0 - policy.confidence) / k
    found = _judged_classes(labels, candidate, serving, tolerance=tolerance, policy=policy, level=level)
    pick, failed, open_ = _deciding_class(found, k)
    c = found[pick]
    docs = [
        {
            "class": names[i],
            "candidate": round_figure(x.diff.candidate),
            "serving": round_figure(x.diff.serving),
            "delta": round_figure(x.diff.estimate),
            "bounds": [round_figure(x.diff.low), round_figure(x.diff.high)],
            "verdict": x.verdict.value,
        }
        for i, x in enumerate(found)
    ]
    check = comparison_check("calibration", c)
    also = [names[i] for i in (failed if failed else open_) if i != pick]
    more = f"; also {c.verdict.value}: {', '.join(repr(n) for n in also[:SHOWN])}" if also else ""
    return GateCheck(
        "calibration",
        c.verdict,
        check.figures | {"class": names[pick], **base, "classes": docs},
        f"class {names[pick]!r} (one-vs-rest; the worst of {k} classes at {percent(level)} each): "
        f"{check.message}{more}",
    )


def _uncompared_classes(
    labels: np.ndarray, candidate: np.ndarray, *, tolerance: float, names: list[str], base: dict[str, Any]
) -> GateCheck:
    """Passed with no serving version to compare: the candidate's ECE per class, the worst shown."""
    k = candidate.shape[1]
    errors = [float(e) for e in class_calibration_errors(labels, candidate)]
    worst = max(range(k), key=lambda i: errors[i] if math.isfinite(errors[i]) else -math.inf)
    return GateCheck(
        "calibration",
        Verdict.PASSED,
        {
            "metric": "ece",
            "class": names[worst],
            "candidate": round_figure(errors[worst]),
            "serving": None,
            "delta": None,
            "tolerance": tolerance,
            "rows": int(labels.size),
            **base,
            "classes": [
                {"class": n, "candidate": round_figure(e)} for n, e in zip(names, errors, strict=True)
            ],
        },
        f"{NO_SERVING} (candidate ece per class, the worst {names[worst]!r} {errors[worst]:.4f})",
    )


def _judged_classes(
    labels: np.ndarray,
    candidate: np.ndarray,
    serving: np.ndarray,
    *,
    tolerance: float,
    policy: GatePolicy,
    level: float,
) -> list[Comparison]:
    """Each class's paired difference of the one-vs-rest ECE judged against the tolerance at ``level``."""
    k = candidate.shape[1]
    diffs = bootstrap_classes(
        labels=labels,
        candidate=candidate,
        serving=serving,
        confidence=level,
        reps=replicate_count(policy.bootstrap_reps, level, labels.size),
        seed=policy.seed + 2,
    )
    return [
        judge(
            statistic="ece",
            diff=d,
            labels=labels,
            tolerance=tolerance,
            min_rows=min_rows(Task.MULTICLASS, "calibration", k),
            rows_note=per_class_note(k),
        )
        for d in diffs
    ]


def _deciding_class(found: list[Comparison], k: int) -> tuple[int, list[int], list[int]]:
    """The class whose figures the check shows (:func:`class_calibration`), the failed and the undecided."""
    failed = [i for i, c in enumerate(found) if c.verdict is Verdict.FAILED]
    open_ = [i for i, c in enumerate(found) if c.verdict is Verdict.UNDECIDED]
    if failed:
        pick = max(failed, key=lambda i: found[i].diff.low)
    elif open_:
        pick = max(open_, key=lambda i: found[i].rows_needed or 0)
    else:
        pick = max(range(k), key=lambda i: d if math.isfinite(d := found[i].diff.estimate) else -math.inf)
    return pick, failed, open_
