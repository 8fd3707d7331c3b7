"""The validation gate: may a retrained candidate replace the serving version? (pure: numpy in, checks out)

Every check runs on the *holdout*: the newest labelled production rows, which the candidate never trained
on. Each returns a :class:`GateCheck` (name, verdict, the figures it decided on, a one-line message). The
gate fails when a check fails; it is *undecided* when none fails but one cannot decide; else it passes.

- ``input_contract``: the candidate's input contract accepts every holdout row
  (:func:`registry.contracts.check_inputs`, the check serving runs on each request), and its message states
  what the candidate's contract changes for the serving version's clients
  (:func:`registry.compat.compare_contracts`, as ``models promote`` does); a change that breaks them makes
  the check undecided, so that a person decides (``models promote --accept-contract-change`` or ``models
  reject``).
- ``outputs``: every candidate output is finite and inside the output contract's range
  (:func:`registry.contracts.check_outputs`); a multi-class row is K probabilities summing to 1
  (:func:`registry.contracts.check_vectors`); a regression value outside its expected range is counted as
  flagged (:func:`registry.contracts.output_flags`), not failed, as serving flags it.
- ``metric``: the task's metric of candidate minus serving version on the same rows (:data:`TASK_METRICS`,
  :func:`task_metric`).
- ``calibration``: the expected calibration error (10 equal-width bins, debiased) of candidate minus
  serving; per class (one-vs-rest) for a multi-class model (:func:`calibration`); not applicable to a
  regression (passed, saying so).
- ``slices``: the metric's difference on each value of each categorical feature with at least
  ``slice_min_rows`` holdout rows, and on each slice of one or two features (categorical levels, numeric
  quintile bins, pairs of them) where the weak-slice search (:func:`weak_search`,
  :func:`monitors.slices.search` on the candidate's realised per-row loss) finds the candidate
  significantly weak at the Bonferroni-corrected level (the top five); accuracy where a slice holds fewer
  than 10 rows of a class. The figures carry the search (``weak_slices``).

**Per task** (``schema.kind``):

- binary: outputs ``[n]`` probabilities, labels 0/1; metric ``roc_auc`` (default), ``accuracy``, ``f1``,
  ``precision``, ``recall``; calibration: the ECE.
- multi-class: outputs ``[n, K]`` probabilities, labels class indexes; metric ``macro_f1`` (default) or
  ``accuracy``; calibration: the ECE of each class, one-vs-rest (:func:`calibration`).
- regression: outputs and labels ``[n]`` numbers; metric ``rmse`` (default) or ``mae``, lower is better;
  calibration: not applicable.

``gate_metric`` is one setting for every model: its default ``roc_auc`` stands for the task's default
(``macro_f1``, ``rmse``); a configured metric that does not fit the task (``f1`` for a regression) makes the
metric and slices checks undecided, naming the metrics that fit, so that a person decides (a setting is no
evidence that the candidate is worse). For ``rmse`` and ``mae``, whose scale is the target's, the
tolerances are **relative**: ``gate_metric_tolerance`` 0.02 allows a candidate 2 % above the serving
version's value on the same rows (``gate_slice_tolerance`` likewise on a slice's rows); the figures give
the absolute tolerance and ``relative_tolerance``. Accuracy, macro F1 and the ECE lie in [0, 1]: their
tolerances are absolute, as for a binary model.

The three comparisons decide from the paired difference and its bounds, each holding with
``confidence`` (:mod:`training.comparison`: DeLong for ROC AUC, a paired bootstrap otherwise). With
"worse" read in the metric's direction (lower ROC AUC, accuracy or macro F1; higher ECE, RMSE or MAE):

- **failed**: even the better bound is worse than the tolerance: the candidate is worse than the serving
  version by more than the tolerance with that confidence (a candidate exactly the tolerance worse is
  rejected at most ``1 - confidence`` of the time);
- **passed**: the worse bound is within the tolerance, or the bounds lie at most the tolerance from the
  estimate (which is then within twice the tolerance, and not confidently worse);
- **undecided**: fewer rows than the check's minimum (:data:`MIN_ROWS`, :data:`MIN_CLASS_ROWS`; a
  multi-class model :data:`MIN_ROWS_PER_CLASS` per class: :func:`min_rows`), or bounds further than the
  tolerance from the estimate that straddle it. The message says about how many
  holdout rows would decide (the bounds close in as one over the square root of the rows).

With bounds at most half the tolerance from the estimate, a candidate twice the tolerance worse is
rejected at least 95 % of the time at the default confidence (``z = 1.645``: ``2t - t/2 > 1.645 se``).

Slices are compared at the confidence corrected for their number (Bonferroni), so that the check as a
whole keeps the stated rate. A slice the holdout cannot decide is listed, not judged: the whole-holdout
checks decide the gate. With no serving version the comparisons pass, saying so; the contract checks
still apply.
"""

from __future__ import annotations

import enum
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from core.tabular import as_float
from monitors.slices import Found, realised_losses, search
from registry.compat import ContractDiff, compare_contracts
from registry.contracts import (
    ContractViolation,
    Violation,
    check_inputs,
    check_outputs,
    check_vectors,
    output_flags,
)
from registry.schema import SUM_TOLERANCE, FeatureKind, ModelSchema, OutputSpec, Task
from registry.signature import SourceSignature
from training.comparison import (
    ECE_BINS,
    LOWER_IS_BETTER,
    Difference,
    bootstrap_classes,
    class_calibration_errors,
    difference,
)
from training.comparison import value as metric_of

SHOWN = 5  # violations / slices listed in a check's figures
NO_SERVING = "no serving version to compare with"
MIN_ROWS = {"metric": 200, "calibration": 200}  # fewer holdout rows: the comparison is undecided
MIN_CLASS_ROWS = 20  # ROC AUC needs this many rows of each class (a slice: SLICE_MIN_CLASS_ROWS)
MIN_ROWS_PER_CLASS = 20  # multi-class: metric and calibration need this many rows per class (or MIN_ROWS)
SLICE_MIN_CLASS_ROWS = 10  # a slice with fewer rows of a class is judged by accuracy
TASK_METRICS: dict[Task, tuple[str, ...]] = {
    Task.BINARY: ("roc_auc", "accuracy", "f1", "precision", "recall"),
    Task.MULTICLASS: ("macro_f1", "accuracy"),
    Task.REGRESSION: ("rmse", "mae"),
}
"""The metrics the gate judges a task by; the first is the task's default."""
RELATIVE = frozenset({"rmse", "mae"})  # a tolerance of these is a share of the serving version's value
TAIL_REPS = 50  # bootstrap replicates beyond each bound (more replicates at a high confidence)
MAX_REPS = 20_000
MAX_CELLS = 50_000_000  # replicates x rows of one comparison: beyond it, no more than the configured reps


class Verdict(enum.StrEnum):
    """What a check, or the gate, decided."""

    PASSED = "passed"
    FAILED = "failed"
    UNDECIDED = "undecided"

    @property
    def mark(self) -> str:
        """How a listing marks it: ``pass``, ``FAIL`` or ``UNDECIDED``."""
        return {Verdict.PASSED: "pass", Verdict.FAILED: "FAIL", Verdict.UNDECIDED: "UNDECIDED"}[self]


@dataclass(frozen=True)
class GateCheck:
    """The verdict of one check, with the figures it was decided on."""

    name: str
    verdict: Verdict
    figures: dict[str, Any]
    message: str

    @property
    def passed(self) -> bool:
        return self.verdict is Verdict.PASSED

    def as_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "passed": self.passed,
            "verdict": self.verdict.value,
            "figures": self.figures,
            "message": self.message,
        }


@dataclass(frozen=True)
class GateResult:
    """Every check: failed when one failed, else undecided when one could not decide, else passed."""

    checks: list[GateCheck]

    @property
    def verdict(self) -> Verdict:
        if self.failed:
            return Verdict.FAILED
        if self.undecided:
            return Verdict.UNDECIDED
        return Verdict.PASSED

    @property
    def passed(self) -> bool:
        return self.verdict is Verdict.PASSED

    @property
    def failed(self) -> list[GateCheck]:
        return [c for c in self.checks if c.verdict is Verdict.FAILED]

    @property
    def undecided(self) -> list[GateCheck]:
        return [c for c in self.checks if c.verdict is Verdict.UNDECIDED]

    def as_dict(self) -> dict[str, Any]:
        return {
            "passed": self.passed,
            "verdict": self.verdict.value,
            "checks": [c.as_dict() for c in self.checks],
        }

    def summary(self) -> str:
        """One line: the failed (or undecided) checks and their messages, or "passed"."""
        if self.passed:
            return "validation gate passed: " + ", ".join(c.name for c in self.checks)
        if self.failed:
            return "validation gate failed: " + "; ".join(f"{c.name}: {c.message}" for c in self.failed)
        return "validation gate undecided: " + "; ".join(f"{c.name}: {c.message}" for c in self.undecided)


@dataclass(frozen=True)
class GatePolicy:
    """The gate's thresholds (the ``gate_*`` settings)."""

    metric: str = "roc_auc"
    metric_tolerance: float = 0.02
    calibration_tolerance: float = 0.02
    slice_tolerance: float = 0.05
    slice_min_rows: int = 100
    confidence: float = 0.95
    bootstrap_reps: int = 1000
    seed: int = 0

    @classmethod
    def from_settings(cls, settings: Any) -> GatePolicy:
        return cls(
            metric=settings.gate_metric,
            metric_tolerance=settings.gate_metric_tolerance,
            calibration_tolerance=settings.gate_calibration_tolerance,
            slice_tolerance=settings.gate_slice_tolerance,
            slice_min_rows=settings.gate_slice_min_rows,
            confidence=settings.gate_confidence,
            bootstrap_reps=settings.gate_bootstrap_reps,
        )


@dataclass(frozen=True)
class Holdout:
    """The rows the gate decides on: raw feature columns (numbers: floats with NaN; categories: str or
    None), the labels, and what each version answered on them (``serving`` None: nothing serves).

    Binary: labels 0/1, outputs ``[n]`` probabilities; multi-class: labels class indexes ``0..K-1`` (as
    floats), outputs ``[n, K]`` probability rows in the order of ``schema.classes``; regression: labels and
    outputs ``[n]`` numbers."""

    columns: Mapping[str, np.ndarray]
    labels: np.ndarray
    candidate: np.ndarray
    serving: np.ndarray | None = None

    @property
    def rows(self) -> int:
        return int(self.labels.size)


def task_metric(task: Task, configured: str) -> str | None:
    """The metric the gate judges a ``task`` model by: ``configured`` when it fits the task; the task's
    default for the binary default ``roc_auc`` (``gate_metric`` is one setting for all models); else None
    (the configured metric does not fit the task)."""
    fits = TASK_METRICS[task]
    if configured in fits:
        return configured
    if configured == TASK_METRICS[Task.BINARY][0]:
        return fits[0]
    return None


def min_rows(task: Task, check: str, classes: int = 0) -> int:
    """Holdout rows a whole-holdout comparison needs: :data:`MIN_ROWS`, and for a multi-class model at least
    :data:`MIN_ROWS_PER_CLASS` per class."""
    if task is Task.MULTICLASS:
        return max(MIN_ROWS[check], MIN_ROWS_PER_CLASS * classes)
    return MIN_ROWS[check]


def _unfit(name: str, task: Task, configured: str) -> GateCheck:
    """Undecided: the configured metric does not fit the task (a setting, not evidence about the model)."""
    fits = TASK_METRICS[task]
    return GateCheck(
        name,
        Verdict.UNDECIDED,
        {"metric": configured, "task": task.value, "metrics_of_task": list(fits)},
        f"undecided: the gate metric {configured!r} (DRIFTWARDEN_GATE_METRIC) does not fit a {task.short} "
        f"model, which is judged by {' or '.join(fits)} (the default roc_auc stands for {fits[0]})",
    )


def _shape_problem(task: Task, labels: np.ndarray, candidate: np.ndarray, serving: np.ndarray | None) -> str:
    """Why the versions' outputs cannot be compared on these labels ("" when they can): a multi-class model
    answers ``[n, K]`` (both versions the same K), the others ``[n]``."""
    rows = labels.size
    for who, out in (("candidate", candidate), ("serving version", serving)):
        if out is None:
            continue
        if task is Task.MULTICLASS and (out.ndim != 2 or out.shape[0] != rows):
            return f"the {who}'s outputs have shape {list(out.shape)}, not [{rows}, classes]"
        if task is not Task.MULTICLASS and out.shape != (rows,):
            return f"the {who}'s outputs have shape {list(out.shape)}, not [{rows}]"
    if serving is not None and serving.shape != candidate.shape:
        return (
            f"the serving version answers {serving.shape[-1]} classes, the candidate {candidate.shape[-1]}: "
            "their metrics cannot be compared"
        )
    return ""


def _shape_check(name: str, statistic: str, problem: str) -> GateCheck:
    return GateCheck(name, Verdict.UNDECIDED, {"metric": statistic}, f"undecided: {problem}")


def _num(statistic: str, value: float, sign: str = "") -> str:
    """A statistic's value as text: 4 decimals in [0, 1]; 6 significant digits on a target's scale."""
    return f"{value:{sign}.6g}" if statistic in RELATIVE else f"{value:{sign}.4f}"


def _fig(statistic: str, value: float | None) -> float | None:
    """A statistic's value as a figure: rounded to 4 decimals, or 6 significant digits on a target's scale."""
    if statistic in RELATIVE and value is not None and math.isfinite(value):
        return float(f"{value:.6g}")
    return _r(value)


def _r(value: float | None, digits: int = 4) -> float | None:
    """A figure for JSON: rounded, NaN as None."""
    if value is None or not math.isfinite(value):
        return None
    return round(float(value), digits)


def _json_value(value: Any) -> Any:
    """A numpy value as the JSON value serving would have received (NaN and missing as null)."""
    if value is None:
        return None
    if isinstance(value, float | np.floating):
        return None if math.isnan(value) else float(value)
    if isinstance(value, np.integer):
        return int(value)
    return value


def _as_lists(schema: ModelSchema, columns: Mapping[str, np.ndarray]) -> dict[str, list[Any]]:
    return {name: [_json_value(v) for v in columns[name]] for name in schema.feature_names if name in columns}


def input_contract(
    schema: ModelSchema,
    columns: Mapping[str, np.ndarray],
    serving: ModelSchema | None = None,
    signatures: tuple[SourceSignature | None, SourceSignature | None] = (None, None),
) -> GateCheck:
    """The candidate's contract accepts every holdout row and breaks nothing for the clients of ``serving``
    (:func:`registry.compat.compare_contracts`; a breaking change: undecided, a person decides); figures:
    the share rejected, first violations, the contract's changes."""
    diff = compare_contracts(serving, schema, signatures=signatures) if serving is not None else None
    changes = {"contract_changes": diff.to_list()} if diff is not None else {}
    stated = _changes_text(diff)
    missing = [name for name in schema.feature_names if name not in columns]
    if missing:
        return GateCheck(
            "input_contract",
            Verdict.FAILED,
            {"rows": 0, "rejected": None, "missing_features": missing, **changes},
            f"the candidate needs features the holdout lacks: {', '.join(missing)}{stated}",
        )
    values = _as_lists(schema, columns)
    n = len(next(iter(values.values()))) if values else 0
    if n == 0:
        return _contract_verdict(
            diff, {"rows": 0, "rejected": 0, **changes}, f"no holdout rows to check{stated}"
        )
    try:
        checked = check_inputs(schema, values, n, max_rows=n)
    except ContractViolation:
        checked = None
    if checked is not None:
        flagged = sum(1 for f in checked.flags if f)
        return _contract_verdict(
            diff,
            {"rows": n, "rejected": 0, "rejected_share": 0.0, "flagged": flagged, **changes},
            f"the candidate's contract accepts all {n} holdout rows ({flagged} flagged, none rejected)"
            + stated,
        )
    rejected = 0
    first: list[str] = []
    for i in range(n):  # only on failure: which rows, and why
        row = {name: [col[i]] for name, col in values.items()}
        try:
            check_inputs(schema, row, 1, max_rows=1)
        except ContractViolation as exc:
            rejected += 1
            for v in exc.violations:
                if len(first) < SHOWN:
                    first.append(f"holdout row {i}, " + v.describe().removeprefix("row 0, "))
    share = rejected / n
    return GateCheck(
        "input_contract",
        Verdict.FAILED,
        {"rows": n, "rejected": rejected, "rejected_share": _r(share), "first_violations": first, **changes},
        f"the candidate's contract rejects {rejected} of {n} recent rows ({share:.1%}); first: {first[0]}"
        + stated,
    )


def _changes_text(diff: ContractDiff | None) -> str:
    """The contract's changes from the serving version's, as the end of a check's message."""
    if not diff:
        return ""
    listed = "; ".join(f"{'BREAKING: ' if c.breaking else ''}{c.text}" for c in diff.changes[:SHOWN])
    more = f"; and {len(diff.changes) - SHOWN} more" if len(diff.changes) > SHOWN else ""
    return f"; changes for the serving version's clients: {listed}{more}"


def _contract_verdict(diff: ContractDiff | None, figures: dict[str, Any], message: str) -> GateCheck:
    """Passed, or undecided when the contract breaks the serving version's clients: a person decides."""
    if diff is not None and diff.breaking:
        return GateCheck(
            "input_contract",
            Verdict.UNDECIDED,
            figures,
            f"{message}; a person decides: promote with --accept-contract-change, or reject the candidate",
        )
    return GateCheck("input_contract", Verdict.PASSED, figures, message)


def outputs(spec: OutputSpec, values: np.ndarray) -> GateCheck:
    """Every candidate output is finite and inside the output contract's range; a multi-class output
    (``spec.width`` > 1) row by row (:func:`vector_outputs`). A value outside a regression's expected range
    is counted in ``flagged`` (serving flags it, never refuses it): it does not fail the check."""
    if spec.width > 1:
        return vector_outputs(spec, values)
    p = np.asarray(values, dtype=np.float64)
    lo = spec.min if spec.min is not None else -math.inf
    hi = spec.max if spec.max is not None else math.inf
    bad = ~np.isfinite(p) | (p < lo) | (p > hi)
    n_bad = int(bad.sum())
    figures: dict[str, Any] = {
        "rows": int(p.size),
        "violations": n_bad,
        "non_finite": int((~np.isfinite(p)).sum()),
        "min": _r(float(np.nanmin(p))) if np.isfinite(p).any() else None,
        "max": _r(float(np.nanmax(p))) if np.isfinite(p).any() else None,
        "allowed": [spec.min, spec.max],
    }
    flagged = ""
    if spec.expected_min is not None or spec.expected_max is not None:
        n_flagged = len(output_flags(spec, [float(x) for x in p]))
        figures["flagged"] = n_flagged
        figures["expected"] = [spec.expected_min, spec.expected_max]
        low = -math.inf if spec.expected_min is None else spec.expected_min
        high = math.inf if spec.expected_max is None else spec.expected_max
        flagged = (
            f"; {n_flagged} flagged outside the expected range [{low:.6g}, {high:.6g}] (flagged, not refused)"
        )
    where = f" and in [{lo:g}, {hi:g}]" if math.isfinite(lo) or math.isfinite(hi) else ""
    if n_bad == 0:
        return GateCheck("outputs", Verdict.PASSED, figures, f"all {p.size} outputs finite{where}{flagged}")
    shown = [v.describe() for v in check_outputs(spec, [float(x) for x in p])[:SHOWN]]
    if not shown:  # check_outputs lets an infinity through an unbounded range (-inf <= inf <= inf)
        shown = [
            Violation(
                "output_finite", f"model output {p[i]} is not finite", row=int(i), feature=spec.name
            ).describe()
            for i in np.flatnonzero(bad)[:SHOWN]
        ]
    figures["first_violations"] = shown
    return GateCheck(
        "outputs",
        Verdict.FAILED,
        figures,
        f"{n_bad} of {p.size} outputs broke the output contract; first: {shown[0]}{flagged}",
    )


def vector_outputs(spec: OutputSpec, values: np.ndarray) -> GateCheck:
    """A multi-class output: each row ``spec.width`` finite probabilities in [0, 1] summing to 1 within
    :data:`registry.schema.SUM_TOLERANCE` (:func:`registry.contracts.check_vectors`)."""
    m = np.asarray(values, dtype=np.float64)
    if m.ndim != 2 or m.shape[1] != spec.width:
        return GateCheck(
            "outputs",
            Verdict.FAILED,
            {"rows": int(m.shape[0]) if m.ndim else 0, "shape": list(m.shape), "width": spec.width},
            f"the candidate's outputs have shape {list(m.shape)}, the contract says [rows, {spec.width}]",
        )
    with np.errstate(invalid="ignore"):
        finite = np.isfinite(m).all(axis=1)
        out = ~finite | (m < 0).any(axis=1) | (m > 1).any(axis=1)
        error = np.abs(m.sum(axis=1) - 1.0)
        off = ~out & (error > SUM_TOLERANCE)
    n_bad = int((out | off).sum())
    figures: dict[str, Any] = {
        "rows": int(m.shape[0]),
        "violations": n_bad,
        "non_finite": int((~finite).sum()),
        "out_of_range": int((out & finite).sum()),
        "sum_off": int(off.sum()),
        "max_sum_error": _r(float(error[finite].max())) if finite.any() else None,
        "width": spec.width,
        "allowed": [0.0, 1.0],
    }
    if n_bad == 0:
        return GateCheck(
            "outputs",
            Verdict.PASSED,
            figures,
            f"all {m.shape[0]} outputs are {spec.width} finite probabilities in [0, 1] summing to 1 "
            f"(within {SUM_TOLERANCE:g})",
        )
    shown = [v.describe() for v in check_vectors(spec, m)[:SHOWN]]
    figures["first_violations"] = shown
    return GateCheck(
        "outputs",
        Verdict.FAILED,
        figures,
        f"{n_bad} of {m.shape[0]} output rows broke the output contract "
        f"({int(off.sum())} not summing to 1); first: {shown[0]}",
    )


def expected_calibration_error(labels: np.ndarray, probs: np.ndarray) -> float:
    """The gate's expected calibration error: 10 equal-width bins, debiased
    (:func:`training.comparison.weighted_ece`); NaN for no rows."""
    return metric_of("ece", labels, probs)


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
            "candidate": _fig(st, self.diff.candidate),
            "serving": _fig(st, self.diff.serving),
            "delta": _fig(st, self.diff.estimate),
            "bounds": [_fig(st, self.diff.low), _fig(st, self.diff.high)],
            "confidence": round(self.diff.confidence, 6),
            "method": self.diff.method,
            "tolerance": self.tolerance if self.relative is None else _fig(st, self.tolerance),
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
            f"{_pct(d.confidence)} bounds {_num(st, d.low, '+')} to {_num(st, d.high, '+')}"
            if math.isfinite(d.low) and math.isfinite(d.high)
            else "no bounds"
        )
        return (
            f"{st} {_num(st, d.candidate)} vs serving {_num(st, d.serving)}: "
            f"delta {_num(st, d.estimate, '+')} ({ci})"
        )


def _reps(configured: int, level: float, rows: int) -> int:
    """Bootstrap replicates: enough for ``TAIL_REPS`` beyond a bound at ``level``, within the budgets."""
    wanted = max(configured, math.ceil(TAIL_REPS / (1.0 - level)))
    return max(configured, min(wanted, MAX_REPS, MAX_CELLS // max(rows, 1)))


def _pct(confidence: float) -> str:
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
        reps=_reps(policy.bootstrap_reps, level, rows),
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
    width = f"+-{_num(statistic, diff.half_width)}"
    tol = f"{tolerance:.6g}" if relative is not None else f"{tolerance:g}"
    return undecided(
        f"the bounds ({width}) are wider than the tolerance {tol}: "
        f"{rows} holdout rows cannot tell a candidate within the tolerance from a worse one"
        + (f"; about {needed} would" if needed else ""),
        needed,
    )


def _comparison_check(name: str, c: Comparison) -> GateCheck:
    worse = "higher" if c.lower_is_better else "lower"
    if c.verdict is Verdict.FAILED:
        message = (
            f"{c.text()}: {worse} than serving by more than the tolerance {c.tolerance_text()} "
            f"with {_pct(c.diff.confidence)} confidence"
        )
    elif c.verdict is Verdict.UNDECIDED:
        message = f"undecided: {c.reason} ({c.text()})"
    else:
        message = f"{c.text()}: not {worse} than serving by more than the tolerance {c.tolerance_text()}"
    return GateCheck(name, c.verdict, c.figures(), message)


def _no_serving(
    name: str, statistic: str, labels: np.ndarray, candidate: np.ndarray, tol: float
) -> GateCheck:
    found = metric_of(statistic, labels, candidate)
    figures: dict[str, Any] = {
        "metric": statistic,
        "candidate": _fig(statistic, found),
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
        f"{NO_SERVING} (candidate {statistic} {_num(statistic, found)})",
    )


def metric(
    *,
    name: str,
    labels: np.ndarray,
    candidate: np.ndarray,
    serving: np.ndarray | None,
    tolerance: float,
    policy: GatePolicy = GatePolicy(),
    task: Task = Task.BINARY,
) -> GateCheck:
    """The paired difference of metric ``name`` (:func:`task_metric` of the ``task``) and its verdict against
    ``tolerance`` (a share of serving's value for RMSE and MAE); undecided when ``name`` does not fit."""
    used = task_metric(task, name)
    if used is None:
        return _unfit("metric", task, name)
    if used == "roc_auc" and np.unique(labels).size < 2:
        used = "accuracy"  # one class in the holdout: ROC AUC is undefined
    if task is not Task.BINARY and (problem := _shape_problem(task, labels, candidate, serving)):
        return _shape_check("metric", used, problem)
    if serving is None:
        return _no_serving("metric", used, labels, candidate, tolerance)
    classes = candidate.shape[1] if task is Task.MULTICLASS else 0
    c = compare(
        statistic=used,
        labels=labels,
        candidate=candidate,
        serving=serving,
        tolerance=tolerance,
        policy=policy,
        min_rows=min_rows(task, "metric", classes),
        min_class_rows=MIN_CLASS_ROWS if used == "roc_auc" else 0,
        seed=1,
        rows_note=_per_class_note(classes),
    )
    return _comparison_check("metric", c)


def _per_class_note(classes: int) -> str:
    return f" ({MIN_ROWS_PER_CLASS} a class, {classes} classes)" if classes else ""


def calibration(
    *,
    labels: np.ndarray,
    candidate: np.ndarray,
    serving: np.ndarray | None,
    tolerance: float,
    policy: GatePolicy = GatePolicy(),
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
        check = _no_serving("calibration", "ece", labels, candidate, tolerance)
    else:
        check = _comparison_check(
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
    policy: GatePolicy = GatePolicy(),
    classes: Sequence[str] = (),
) -> GateCheck:
    """Multi-class calibration: per class, the paired difference of the one-vs-rest debiased ECE
    (``labels == k`` against column ``k``: :func:`training.comparison.bootstrap_classes`, every class on
    the same replicates) against ``tolerance``, at the confidence corrected for the number of classes
    (Bonferroni, as the slices). Fails when a class
    fails, undecided when none fails and one cannot decide; the figures are those of the deciding class
    (failed: the most confidently worse; undecided: the one needing most rows; passed: the largest delta),
    with every class under ``classes``.

    Why each class and not one summary: the classwise mean ECE (Kull et al. 2019) divides a miscalibration
    of one class by K (0.1 on one class of 10 moves it by 0.01, inside the 0.02 tolerance); the worst
    class's ECE compares different classes of the two versions (a candidate that breaks a class the serving
    version calibrated well passes when the serving version is as bad on another). A class is what a user
    acts on, so each class is judged against the same class of the serving version, as a slice is."""
    if problem := _shape_problem(Task.MULTICLASS, labels, candidate, serving):
        return _shape_check("calibration", "ece", problem)
    k = candidate.shape[1]
    names = [str(classes[i]) if i < len(classes) else str(i) for i in range(k)]
    base: dict[str, Any] = {"per_class": True, "bins": ECE_BINS}
    if serving is None:
        errors = [float(e) for e in class_calibration_errors(labels, candidate)]
        worst = max(range(k), key=lambda i: errors[i] if math.isfinite(errors[i]) else -math.inf)
        return GateCheck(
            "calibration",
            Verdict.PASSED,
            {
                "metric": "ece",
                "class": names[worst],
                "candidate": _r(errors[worst]),
                "serving": None,
                "delta": None,
                "tolerance": tolerance,
                "rows": int(labels.size),
                **base,
                "classes": [{"class": n, "candidate": _r(e)} for n, e in zip(names, errors, strict=True)],
            },
            f"{NO_SERVING} (candidate ece per class, the worst {names[worst]!r} {errors[worst]:.4f})",
        )
    level = 1.0 - (1.0 - policy.confidence) / k
    diffs = bootstrap_classes(
        labels=labels,
        candidate=candidate,
        serving=serving,
        confidence=level,
        reps=_reps(policy.bootstrap_reps, level, labels.size),
        seed=policy.seed + 2,
    )
    found = [
        judge(
            statistic="ece",
            diff=d,
            labels=labels,
            tolerance=tolerance,
            min_rows=min_rows(Task.MULTICLASS, "calibration", k),
            rows_note=_per_class_note(k),
        )
        for d in diffs
    ]
    failed = [i for i, c in enumerate(found) if c.verdict is Verdict.FAILED]
    open_ = [i for i, c in enumerate(found) if c.verdict is Verdict.UNDECIDED]
    if failed:
        pick = max(failed, key=lambda i: found[i].diff.low)
    elif open_:
        pick = max(open_, key=lambda i: found[i].rows_needed or 0)
    else:
        pick = max(range(k), key=lambda i: d if math.isfinite(d := found[i].diff.estimate) else -math.inf)
    c = found[pick]
    docs = [
        {
            "class": names[i],
            "candidate": _r(x.diff.candidate),
            "serving": _r(x.diff.serving),
            "delta": _r(x.diff.estimate),
            "bounds": [_r(x.diff.low), _r(x.diff.high)],
            "verdict": x.verdict.value,
        }
        for i, x in enumerate(found)
    ]
    check = _comparison_check("calibration", c)
    also = [names[i] for i in (failed if failed else open_) if i != pick]
    more = f"; also {c.verdict.value}: {', '.join(repr(n) for n in also[:SHOWN])}" if also else ""
    return GateCheck(
        "calibration",
        c.verdict,
        check.figures | {"class": names[pick], **base, "classes": docs},
        f"class {names[pick]!r} (one-vs-rest; the worst of {k} classes at {_pct(level)} each): "
        f"{check.message}{more}",
    )


def _slice_statistic(name: str, labels: np.ndarray, present: Sequence[int] = ()) -> str:
    """The metric of a slice: accuracy for ROC AUC with fewer than 10 rows of a class, and for macro F1
    with fewer than 10 rows of a class ``present`` in the holdout."""
    if name == "macro_f1":
        counts = np.bincount(
            np.clip(np.rint(labels), 0, None).astype(np.int64), minlength=max(present, default=0) + 1
        )
        return "accuracy" if any(counts[k] < SLICE_MIN_CLASS_ROWS for k in present) else name
    positives = int(np.sum(labels > 0.5))
    if name == "roc_auc" and min(positives, labels.size - positives) < SLICE_MIN_CLASS_ROWS:
        return "accuracy"
    return name


def _slice_values(
    schema: ModelSchema, columns: Mapping[str, np.ndarray], min_rows: int
) -> tuple[list[tuple[str, str, np.ndarray]], int]:
    """The slices with ``min_rows`` rows (feature, value, mask), and how many values had fewer."""
    found: list[tuple[str, str, np.ndarray]] = []
    small = 0
    for spec in schema.features:
        if spec.kind is not FeatureKind.CATEGORICAL or spec.name not in columns:
            continue
        col = np.asarray(columns[spec.name], dtype=object)
        values, counts = np.unique(np.array([v for v in col if isinstance(v, str) and v]), return_counts=True)
        for value, count in zip(values.tolist(), counts.tolist(), strict=True):
            if count < min_rows:
                small += 1
            else:
                found.append((spec.name, value, col == value))
    return found, small


@dataclass(frozen=True)
class _Slice:
    """A slice the gate judges: a categorical value, or a weak slice the search found (``weak``: its doc)."""

    feature: str
    value: str
    mask: np.ndarray
    weak: dict[str, Any] | None = None

    @property
    def name(self) -> str:
        return self.weak["slice"] if self.weak is not None else f"{self.feature}={self.value}"


def weak_search(
    *,
    schema: ModelSchema,
    columns: Mapping[str, np.ndarray],
    labels: np.ndarray,
    candidate: np.ndarray,
    min_rows: int,
    policy: GatePolicy = GatePolicy(),
) -> Found | None:
    """The candidate's weak slices on the holdout (:func:`monitors.slices.search` on its realised per-row
    loss: error at 0.5, error of the argmax, absolute error), at the level ``1 - confidence``."""
    kinds = {s.name: s.kind for s in schema.features if s.name in columns}
    cols = {
        name: as_float(columns[name])
        if kind is FeatureKind.NUMERIC
        else np.asarray(columns[name], dtype=object)
        for name, kind in kinds.items()
    }
    losses = realised_losses(task=schema.kind, predictions=candidate, labels=labels)
    return search(columns=cols, kinds=kinds, losses=losses, level=1.0 - policy.confidence, min_rows=min_rows)


def _judged(
    found: list[tuple[str, str, np.ndarray]], weak: Found | None
) -> tuple[list[_Slice], list[dict[str, Any]]]:
    """The slices to judge: every categorical value, then each significant weak slice not among them; and
    the searched slices' docs, each saying whether it is judged."""
    judged = [_Slice(f, v, m) for f, v, m in found]
    listed: list[dict[str, Any]] = []
    if weak is None:
        return judged, listed
    names = {s.name for s in judged}
    for doc, mask in zip(weak.report["slices"], weak.masks, strict=True):
        new = doc["significant"] and doc["slice"] not in names
        if new:
            judged.append(_Slice(" & ".join(doc["features"]), _values_text(doc), mask, doc))
        listed.append(doc | {"judged": bool(doc["significant"])})
    return judged, listed


def _values_text(doc: Mapping[str, Any]) -> str:
    """A weak slice's values without the feature names: ``north & [0.1, 0.5)``."""
    return " & ".join(
        str(c["value"]) if "value" in c else f"[{c['low']:.4g}, {c['high']:.4g})" for c in doc["conditions"]
    )


def _slice_doc(piece: _Slice, c: Comparison) -> dict[str, Any]:
    st = c.statistic
    doc: dict[str, Any] = {
        "feature": piece.feature,
        "value": piece.value,
        "rows": c.rows,
        "metric": st,
        "candidate": _fig(st, c.diff.candidate),
        "serving": _fig(st, c.diff.serving),
        "delta": _fig(st, c.diff.estimate),
        "bounds": [_fig(st, c.diff.low), _fig(st, c.diff.high)],
        "verdict": c.verdict.value,
    }
    if c.relative is not None:  # on the target's scale: the slice's own tolerance
        doc["tolerance"] = _fig(st, c.tolerance)
    if piece.weak is not None:  # found by the search: which rows, and how weak the candidate is there
        doc["slice"] = piece.name
        doc["conditions"] = piece.weak["conditions"]
        doc["searched"] = {k: piece.weak[k] for k in ("value", "lower", "upper", "gap")}
    return doc


def _name(doc: Mapping[str, Any]) -> str:
    """How a message names a judged slice."""
    return str(doc.get("slice") or f"{doc['feature']}={doc['value']}")


def _worse_by(c: Comparison) -> float:
    """How much worse the candidate is on a slice, in the metric's direction (relative for RMSE, MAE); NaN
    where undefined."""
    d = c.diff.estimate if c.lower_is_better else -c.diff.estimate
    if c.relative is not None:
        return d / abs(c.diff.serving) if c.diff.serving else (math.inf if d > 0 else 0.0)
    return d


def _searched_text(weak: Found | None, listed: Sequence[Mapping[str, Any]]) -> str:
    """The end of the check's message: what the weak-slice search tried and found."""
    if weak is None:
        return ""
    report = weak.report
    significant = [d for d in listed if d["significant"]]
    found = (
        "weakest " + ", ".join(f"{d['slice']} ({report['metric']} {d['value']:.4f})" for d in significant[:3])
        if significant
        else "none significantly weak"
    )
    return (
        f"; weak-slice search: {report['tried']} slice(s) of one or two features tried, candidate "
        f"{report['metric']} {report['overall']:.4f} overall, {found}"
    )


def slices(
    *,
    schema: ModelSchema,
    columns: Mapping[str, np.ndarray],
    labels: np.ndarray,
    candidate: np.ndarray,
    serving: np.ndarray | None,
    name: str,
    tolerance: float,
    min_rows: int,
    policy: GatePolicy = GatePolicy(),
) -> GateCheck:
    """Per categorical value with ``min_rows`` rows, and per slice of one or two features where the
    candidate is significantly weak on the holdout (:func:`weak_search`), the paired difference of the
    metric (the task's: :func:`task_metric` of ``schema.kind``) against ``tolerance`` (for RMSE and MAE a
    share of serving's value on the slice) at the Bonferroni-corrected confidence; fails when a slice fails,
    the worst shown (worst: the largest worsening, relative to serving's value for RMSE and MAE)."""
    task = schema.kind
    values, small = _slice_values(schema, columns, min_rows)
    weak = (
        None
        if _shape_problem(task, labels, candidate, None)
        else weak_search(
            schema=schema,
            columns=columns,
            labels=labels,
            candidate=candidate,
            min_rows=min_rows,
            policy=policy,
        )
    )
    found, listed = _judged(values, weak)
    searched = _searched_text(weak, listed)
    figures: dict[str, Any] = {
        "slices": len(found),
        "min_rows": min_rows,
        "too_small": small,
        "tolerance": tolerance,
        "weak_slices": None if weak is None else weak.report | {"slices": listed},
    }
    if not found:
        return GateCheck(
            "slices",
            Verdict.PASSED,
            figures,
            f"no categorical value has {min_rows} holdout rows (gate_slice_min_rows) and no slice is "
            f"significantly weak: no slice to judge{searched}",
        )
    used = task_metric(task, name)
    if used is None:
        unfit = _unfit("slices", task, name)
        return replace(unfit, figures=figures | unfit.figures)
    if task is not Task.BINARY and (problem := _shape_problem(task, labels, candidate, serving)):
        return GateCheck("slices", Verdict.UNDECIDED, figures | {"metric": used}, f"undecided: {problem}")
    if serving is None:
        figures["worst"] = []
        return GateCheck("slices", Verdict.PASSED, figures, f"{NO_SERVING} ({len(found)} slice(s)){searched}")
    if used in RELATIVE:
        figures["tolerance"] = None
        figures["relative_tolerance"] = tolerance
    present: list[int] = []
    if task is Task.MULTICLASS:
        present = [k for k in range(candidate.shape[1]) if np.any(np.rint(labels) == k)]
    confidence = 1.0 - (1.0 - policy.confidence) / len(found)
    figures["confidence"] = round(confidence, 6)
    ranked = []
    for i, piece in enumerate(found):
        mask = piece.mask
        c = compare(
            statistic=_slice_statistic(used, labels[mask], present),
            labels=labels[mask],
            candidate=candidate[mask],
            serving=serving[mask],
            tolerance=tolerance,
            policy=policy,
            confidence=confidence,
            seed=10 + i,
        )
        doc = _slice_doc(piece, c)
        if c.relative is None:  # worst first: the lowest delta (binary: as ever, on the rounded figure)
            key = doc["delta"] if doc["delta"] is not None else math.inf
        else:
            key = -worse if math.isfinite(worse := _worse_by(c)) else math.inf
        ranked.append((key, doc))
    ranked.sort(key=lambda kd: kd[0])
    docs = [doc for _, doc in ranked]
    failed = [s for s in docs if s["verdict"] == Verdict.FAILED]
    open_ = [s for s in docs if s["verdict"] == Verdict.UNDECIDED]
    figures["worst"] = docs[:SHOWN]
    figures["failed"] = failed[: SHOWN * 2]
    figures["undecided"] = open_[: SHOWN * 2]
    figures["weak_judged"] = [s for s in docs if "slice" in s]  # the searched slices' comparisons
    judged = len(docs) - len(open_)
    listed_open = (
        f"; {len(open_)} too few rows to decide, not judged: "
        + ", ".join(f"{_name(s)} ({s['rows']} rows)" for s in open_[:3])
        if open_
        else ""
    )
    by_more = (
        f"{tolerance * 100:g}% of serving's {used} on the slice" if used in RELATIVE else f"{tolerance:g}"
    )
    if failed:
        shown = ", ".join(
            f"{_name(s)} {s['metric']} {_num(s['metric'], s['candidate'])} vs "
            f"{_num(s['metric'], s['serving'])} (bounds {_num(s['metric'], s['bounds'][0], '+')} to "
            f"{_num(s['metric'], s['bounds'][1], '+')})"
            for s in failed[:3]
        )
        return GateCheck(
            "slices",
            Verdict.FAILED,
            figures,
            f"{len(failed)} of {len(docs)} slice(s) worse than serving by more than {by_more} with "
            f"{_pct(confidence)} confidence each: {shown}{listed_open}{searched}",
        )
    worst = next((s for s in docs if s["verdict"] == Verdict.PASSED), None)
    detail = f"; worst {_name(worst)} delta {_num(worst['metric'], worst['delta'], '+')}" if worst else ""
    return GateCheck(
        "slices",
        Verdict.PASSED,
        figures,
        f"{judged} of {len(docs)} slice(s) judged, none worse than serving by more than {by_more}"
        f"{detail}{listed_open}{searched}",
    )


def evaluate(
    *,
    schema: ModelSchema,
    holdout: Holdout,
    policy: GatePolicy,
    serving_schema: ModelSchema | None = None,
    signatures: tuple[SourceSignature | None, SourceSignature | None] = (None, None),
) -> GateResult:
    """Run every check of the gate on ``holdout`` for a candidate with contract ``schema`` (its task decides
    the outputs' shape, the metric, the calibration and the slices' metric: module docstring);
    ``serving_schema``: the serving version's contract, which the input contract check compares with
    (``signatures``: the serving version's and the candidate's recorded TF Serving signatures)."""
    labels = np.asarray(holdout.labels, dtype=np.float64)
    cand = np.asarray(holdout.candidate, dtype=np.float64)
    serv = None if holdout.serving is None else np.asarray(holdout.serving, dtype=np.float64)
    task = schema.kind
    checks = [
        input_contract(schema, holdout.columns, serving_schema, signatures),
        outputs(schema.output, cand),
        metric(
            name=policy.metric,
            labels=labels,
            candidate=cand,
            serving=serv,
            tolerance=policy.metric_tolerance,
            policy=policy,
            task=task,
        ),
        calibration(
            labels=labels,
            candidate=cand,
            serving=serv,
            tolerance=policy.calibration_tolerance,
            policy=policy,
            task=task,
            classes=schema.classes,
        ),
        slices(
            schema=schema,
            columns=holdout.columns,
            labels=labels,
            candidate=cand,
            serving=serv,
            name=policy.metric,
            tolerance=policy.slice_tolerance,
            min_rows=policy.slice_min_rows,
            policy=policy,
        ),
    ]
    return GateResult(checks)


def failed_names(checks: Sequence[Mapping[str, Any]]) -> list[str]:
    """The names of the failed checks of a stored gate document's ``checks`` (an undecided one is not)."""
    return [str(c.get("name")) for c in checks if check_verdict(c) is Verdict.FAILED]


def check_verdict(check: Mapping[str, Any]) -> Verdict:
    """The verdict of a stored check (documents from before verdicts carry only ``passed``)."""
    value = check.get("verdict")
    if value in {v.value for v in Verdict}:
        return Verdict(str(value))
    return Verdict.PASSED if check.get("passed") else Verdict.FAILED
