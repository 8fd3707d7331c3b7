"""The validation gate: may a retrained candidate replace the serving version? (pure: numpy in, checks out)

Every check runs on the *holdout*: the newest labelled production rows, which the candidate never trained
on. Each returns a :class:`GateCheck` (name, verdict, the figures it decided on, a one-line message). The
gate fails when a check fails; it is *undecided* when none fails but one cannot decide; else it passes.

- ``input_contract``: the candidate's input contract accepts every holdout row
  (:func:`registry.contracts.check_inputs`, the check serving runs on each request).
- ``outputs``: every candidate output is finite and inside the output contract's range
  (:func:`registry.contracts.check_outputs`).
- ``metric``: the chosen metric (``gate_metric``) of candidate minus serving version on the same rows.
- ``calibration``: the expected calibration error (10 equal-width bins, debiased) of candidate minus
  serving.
- ``slices``: the metric's difference on each value of each categorical feature with at least
  ``slice_min_rows`` holdout rows (accuracy where a slice holds fewer than 10 rows of a class).

The three comparisons decide from the paired difference and its bounds, each holding with
``confidence`` (:mod:`training.comparison`: DeLong for ROC AUC, a paired bootstrap otherwise). With
"worse" read in the metric's direction (lower ROC AUC, higher ECE):

- **failed**: even the better bound is worse than the tolerance: the candidate is worse than the serving
  version by more than the tolerance with that confidence (a candidate exactly the tolerance worse is
  rejected at most ``1 - confidence`` of the time);
- **passed**: the worse bound is within the tolerance, or the bounds lie at most the tolerance from the
  estimate (which is then within twice the tolerance, and not confidently worse);
- **undecided**: fewer rows than the check's minimum (:data:`MIN_ROWS`, :data:`MIN_CLASS_ROWS`), or
  bounds further than the tolerance from the estimate that straddle it. The message says about how many
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

from registry.contracts import ContractViolation, check_inputs, check_outputs
from registry.schema import FeatureKind, ModelSchema, OutputSpec
from training.comparison import ECE_BINS, Difference, difference
from training.comparison import value as metric_of

SHOWN = 5  # violations / slices listed in a check's figures
NO_SERVING = "no serving version to compare with"
MIN_ROWS = {"metric": 200, "calibration": 200}  # fewer holdout rows: the comparison is undecided
MIN_CLASS_ROWS = 20  # ROC AUC needs this many rows of each class (a slice: SLICE_MIN_CLASS_ROWS)
SLICE_MIN_CLASS_ROWS = 10  # a slice with fewer rows of a class is judged by accuracy
LOWER_IS_BETTER = {"ece"}
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
    None), 0/1 labels, and the probabilities each version gave them (``serving`` None: nothing serves)."""

    columns: Mapping[str, np.ndarray]
    labels: np.ndarray
    candidate: np.ndarray
    serving: np.ndarray | None = None

    @property
    def rows(self) -> int:
        return int(self.labels.size)


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


def input_contract(schema: ModelSchema, columns: Mapping[str, np.ndarray]) -> GateCheck:
    """The candidate's contract accepts every holdout row; figures: the share rejected, first violations."""
    missing = [name for name in schema.feature_names if name not in columns]
    if missing:
        return GateCheck(
            "input_contract",
            Verdict.FAILED,
            {"rows": 0, "rejected": None, "missing_features": missing},
            f"the candidate needs features the holdout lacks: {', '.join(missing)}",
        )
    values = _as_lists(schema, columns)
    n = len(next(iter(values.values()))) if values else 0
    if n == 0:
        return GateCheck(
            "input_contract", Verdict.PASSED, {"rows": 0, "rejected": 0}, "no holdout rows to check"
        )
    try:
        checked = check_inputs(schema, values, n, max_rows=n)
    except ContractViolation:
        checked = None
    if checked is not None:
        flagged = sum(1 for f in checked.flags if f)
        return GateCheck(
            "input_contract",
            Verdict.PASSED,
            {"rows": n, "rejected": 0, "rejected_share": 0.0, "flagged": flagged},
            f"the candidate's contract accepts all {n} holdout rows ({flagged} flagged, none rejected)",
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
        {"rows": n, "rejected": rejected, "rejected_share": _r(share), "first_violations": first},
        f"the candidate's contract rejects {rejected} of {n} recent rows ({share:.1%}); first: {first[0]}",
    )


def outputs(spec: OutputSpec, values: np.ndarray) -> GateCheck:
    """Every candidate output is finite and inside the output contract's range."""
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
    if n_bad == 0:
        return GateCheck(
            "outputs", Verdict.PASSED, figures, f"all {p.size} outputs finite and in [{lo:g}, {hi:g}]"
        )
    shown = [v.describe() for v in check_outputs(spec, [float(x) for x in p])[:SHOWN]]
    figures["first_violations"] = shown
    return GateCheck(
        "outputs",
        Verdict.FAILED,
        figures,
        f"{n_bad} of {p.size} outputs broke the output contract; first: {shown[0]}",
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

    def figures(self) -> dict[str, Any]:
        return {
            "metric": self.statistic,
            "candidate": _r(self.diff.candidate),
            "serving": _r(self.diff.serving),
            "delta": _r(self.diff.estimate),
            "bounds": [_r(self.diff.low), _r(self.diff.high)],
            "confidence": round(self.diff.confidence, 6),
            "method": self.diff.method,
            "tolerance": self.tolerance,
            "rows": self.rows,
            "verdict": self.verdict.value,
            **({"rows_needed": self.rows_needed} if self.rows_needed is not None else {}),
        }

    def text(self) -> str:
        """``roc_auc 0.9741 vs serving 0.9812: delta -0.0071 (95% bounds -0.0150 to +0.0008)``."""
        d = self.diff
        ci = (
            f"{_pct(d.confidence)} bounds {d.low:+.4f} to {d.high:+.4f}"
            if math.isfinite(d.low) and math.isfinite(d.high)
            else "no bounds"
        )
        return (
            f"{self.statistic} {d.candidate:.4f} vs serving {d.serving:.4f}: delta {d.estimate:+.4f} ({ci})"
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
    if tolerance <= 0 or not math.isfinite(half_width) or half_width <= 0:
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
) -> Comparison:
    """The paired difference of ``statistic`` and its verdict against ``tolerance`` (module docstring)."""
    rows = int(labels.size)
    positives = int(np.sum(labels > 0.5))
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

    def undecided(reason: str, needed: int | None = None) -> Comparison:
        return Comparison(statistic, diff, tolerance, Verdict.UNDECIDED, rows, reason, needed)

    if rows < min_rows:
        return undecided(f"{rows} holdout rows, fewer than the {min_rows} this check needs", min_rows)
    if min(positives, rows - positives) < min_class_rows:
        return undecided(
            f"{positives} positive and {rows - positives} negative holdout rows; {statistic} needs "
            f"{min_class_rows} of each"
        )
    if not diff.defined:
        return undecided(f"{statistic} has no bounds on these rows (undefined in too many resamples)")
    low, high = (diff.low, diff.high) if statistic in LOWER_IS_BETTER else (-diff.high, -diff.low)
    if low > tolerance:
        return Comparison(statistic, diff, tolerance, Verdict.FAILED, rows, "")
    if high <= tolerance or diff.half_width <= tolerance:
        return Comparison(statistic, diff, tolerance, Verdict.PASSED, rows, "")
    needed = _rows_needed(rows, diff.half_width, tolerance)
    return undecided(
        f"the bounds (+-{diff.half_width:.4f}) are wider than the tolerance {tolerance:g}: {rows} holdout "
        f"rows cannot tell a candidate within the tolerance from a worse one"
        + (f"; about {needed} would" if needed else ""),
        needed,
    )


def _comparison_check(name: str, c: Comparison) -> GateCheck:
    worse = "higher" if c.statistic in LOWER_IS_BETTER else "lower"
    if c.verdict is Verdict.FAILED:
        message = (
            f"{c.text()}: {worse} than serving by more than the tolerance {c.tolerance:g} "
            f"with {_pct(c.diff.confidence)} confidence"
        )
    elif c.verdict is Verdict.UNDECIDED:
        message = f"undecided: {c.reason} ({c.text()})"
    else:
        message = f"{c.text()}: not {worse} than serving by more than the tolerance {c.tolerance:g}"
    return GateCheck(name, c.verdict, c.figures(), message)


def _no_serving(
    name: str, statistic: str, labels: np.ndarray, candidate: np.ndarray, tol: float
) -> GateCheck:
    found = metric_of(statistic, labels, candidate)
    figures = {"metric": statistic, "candidate": _r(found), "serving": None, "delta": None, "tolerance": tol}
    return GateCheck(
        name,
        Verdict.PASSED,
        figures | {"rows": int(labels.size)},
        f"{NO_SERVING} (candidate {statistic} {found:.4f})",
    )


def metric(
    *,
    name: str,
    labels: np.ndarray,
    candidate: np.ndarray,
    serving: np.ndarray | None,
    tolerance: float,
    policy: GatePolicy = GatePolicy(),
) -> GateCheck:
    """The paired difference of metric ``name`` and its verdict against ``tolerance``."""
    used = name
    if name == "roc_auc" and np.unique(labels).size < 2:
        used = "accuracy"  # one class in the holdout: ROC AUC is undefined
    if serving is None:
        return _no_serving("metric", used, labels, candidate, tolerance)
    c = compare(
        statistic=used,
        labels=labels,
        candidate=candidate,
        serving=serving,
        tolerance=tolerance,
        policy=policy,
        min_rows=MIN_ROWS["metric"],
        min_class_rows=MIN_CLASS_ROWS if used == "roc_auc" else 0,
        seed=1,
    )
    return _comparison_check("metric", c)


def calibration(
    *,
    labels: np.ndarray,
    candidate: np.ndarray,
    serving: np.ndarray | None,
    tolerance: float,
    policy: GatePolicy = GatePolicy(),
) -> GateCheck:
    """The paired difference of the expected calibration error (10 equal-width bins) against ``tolerance``."""
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


def _slice_statistic(name: str, labels: np.ndarray) -> str:
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


def _slice_doc(feature: str, value: str, c: Comparison) -> dict[str, Any]:
    return {
        "feature": feature,
        "value": value,
        "rows": c.rows,
        "metric": c.statistic,
        "candidate": _r(c.diff.candidate),
        "serving": _r(c.diff.serving),
        "delta": _r(c.diff.estimate),
        "bounds": [_r(c.diff.low), _r(c.diff.high)],
        "verdict": c.verdict.value,
    }


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
    """Per categorical value with ``min_rows`` rows, the paired difference of the metric against
    ``tolerance`` at the Bonferroni-corrected confidence; fails when a slice fails, the worst shown."""
    found, small = _slice_values(schema, columns, min_rows)
    figures: dict[str, Any] = {
        "slices": len(found),
        "min_rows": min_rows,
        "too_small": small,
        "tolerance": tolerance,
    }
    if not found:
        return GateCheck(
            "slices",
            Verdict.PASSED,
            figures,
            f"no categorical value has {min_rows} holdout rows (gate_slice_min_rows): no slice to judge",
        )
    if serving is None:
        figures["worst"] = []
        return GateCheck("slices", Verdict.PASSED, figures, f"{NO_SERVING} ({len(found)} slice(s))")
    confidence = 1.0 - (1.0 - policy.confidence) / len(found)
    figures["confidence"] = round(confidence, 6)
    docs = []
    for i, (feature, value, mask) in enumerate(found):
        c = compare(
            statistic=_slice_statistic(name, labels[mask]),
            labels=labels[mask],
            candidate=candidate[mask],
            serving=serving[mask],
            tolerance=tolerance,
            policy=policy,
            confidence=confidence,
            seed=10 + i,
        )
        docs.append(_slice_doc(feature, value, c))
    docs.sort(key=lambda s: s["delta"] if s["delta"] is not None else math.inf)
    failed = [s for s in docs if s["verdict"] == Verdict.FAILED]
    open_ = [s for s in docs if s["verdict"] == Verdict.UNDECIDED]
    figures["worst"] = docs[:SHOWN]
    figures["failed"] = failed[: SHOWN * 2]
    figures["undecided"] = open_[: SHOWN * 2]
    judged = len(docs) - len(open_)
    listed = (
        f"; {len(open_)} too few rows to decide, not judged: "
        + ", ".join(f"{s['feature']}={s['value']} ({s['rows']} rows)" for s in open_[:3])
        if open_
        else ""
    )
    if failed:
        shown = ", ".join(
            f"{s['feature']}={s['value']} {s['metric']} {s['candidate']:.4f} vs {s['serving']:.4f} "
            f"(bounds {s['bounds'][0]:+.4f} to {s['bounds'][1]:+.4f})"
            for s in failed[:3]
        )
        return GateCheck(
            "slices",
            Verdict.FAILED,
            figures,
            f"{len(failed)} of {len(docs)} slice(s) worse than serving by more than {tolerance:g} with "
            f"{_pct(confidence)} confidence each: {shown}{listed}",
        )
    worst = next((s for s in docs if s["verdict"] == Verdict.PASSED), None)
    detail = f"; worst {worst['feature']}={worst['value']} delta {worst['delta']:+.4f}" if worst else ""
    return GateCheck(
        "slices",
        Verdict.PASSED,
        figures,
        f"{judged} of {len(docs)} slice(s) judged, none worse than serving by more than {tolerance:g}"
        f"{detail}{listed}",
    )


def evaluate(*, schema: ModelSchema, holdout: Holdout, policy: GatePolicy) -> GateResult:
    """Run every check of the gate on ``holdout`` for a candidate with contract ``schema``."""
    labels = np.asarray(holdout.labels, dtype=np.float64)
    cand = np.asarray(holdout.candidate, dtype=np.float64)
    serv = None if holdout.serving is None else np.asarray(holdout.serving, dtype=np.float64)
    checks = [
        input_contract(schema, holdout.columns),
        outputs(schema.outputs[0], cand),
        metric(
            name=policy.metric,
            labels=labels,
            candidate=cand,
            serving=serv,
            tolerance=policy.metric_tolerance,
            policy=policy,
        ),
        calibration(
            labels=labels, candidate=cand, serving=serv, tolerance=policy.calibration_tolerance, policy=policy
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
