"""The validation gate: may a retrained candidate replace the serving version? (pure: numpy in, checks out)

Every check runs on the *holdout*: the newest labelled production rows, which the candidate never trained
on. Each returns a :class:`GateCheck` (name, passed, the figures it decided on, a one-line message); the
candidate passes when every check does.

- ``input_contract``: the candidate's input contract accepts every holdout row
  (:func:`registry.contracts.check_inputs`, the check serving runs on each request).
- ``outputs``: every candidate output is finite and inside the output contract's range
  (:func:`registry.contracts.check_outputs`).
- ``metric``: ``candidate >= serving - tolerance`` for the chosen metric (``gate_metric``).
- ``calibration``: expected calibration error (10 equal-width bins),
  ``ECE(candidate) <= ECE(serving) + tolerance``.
- ``slices``: for each value of each categorical feature with at least ``slice_min_rows`` holdout rows,
  the metric on those rows, ``candidate >= serving - tolerance`` (accuracy where ROC AUC is undefined:
  a slice holding one class only).

With no serving version the comparisons (metric, calibration, slices) pass, saying so; the contract
checks still apply.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from monitors.performance import classification_metrics
from registry.contracts import ContractViolation, check_inputs, check_outputs
from registry.schema import FeatureKind, ModelSchema, OutputSpec

ECE_BINS = 10
SHOWN = 5  # violations / slices listed in a check's figures
NO_SERVING = "no serving version to compare with"


@dataclass(frozen=True)
class GateCheck:
    """The verdict of one check, with the figures it was decided on."""

    name: str
    passed: bool
    figures: dict[str, Any]
    message: str

    def as_dict(self) -> dict[str, Any]:
        return {"name": self.name, "passed": self.passed, "figures": self.figures, "message": self.message}


@dataclass(frozen=True)
class GateResult:
    """Every check; the candidate passes when all of them pass."""

    checks: list[GateCheck]

    @property
    def passed(self) -> bool:
        return all(c.passed for c in self.checks)

    @property
    def failed(self) -> list[GateCheck]:
        return [c for c in self.checks if not c.passed]

    def as_dict(self) -> dict[str, Any]:
        return {"passed": self.passed, "checks": [c.as_dict() for c in self.checks]}

    def summary(self) -> str:
        """One line: the failed checks and their messages (the registry's reject reason), or "passed"."""
        if self.passed:
            return "validation gate passed: " + ", ".join(c.name for c in self.checks)
        return "validation gate failed: " + "; ".join(f"{c.name}: {c.message}" for c in self.failed)


@dataclass(frozen=True)
class GatePolicy:
    """The gate's thresholds (the ``gate_*`` settings)."""

    metric: str = "roc_auc"
    metric_tolerance: float = 0.02
    calibration_tolerance: float = 0.02
    slice_tolerance: float = 0.05
    slice_min_rows: int = 100

    @classmethod
    def from_settings(cls, settings: Any) -> GatePolicy:
        return cls(
            metric=settings.gate_metric,
            metric_tolerance=settings.gate_metric_tolerance,
            calibration_tolerance=settings.gate_calibration_tolerance,
            slice_tolerance=settings.gate_slice_tolerance,
            slice_min_rows=settings.gate_slice_min_rows,
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
            False,
            {"rows": 0, "rejected": None, "missing_features": missing},
            f"the candidate needs features the holdout lacks: {', '.join(missing)}",
        )
    values = _as_lists(schema, columns)
    n = len(next(iter(values.values()))) if values else 0
    if n == 0:
        return GateCheck("input_contract", True, {"rows": 0, "rejected": 0}, "no holdout rows to check")
    try:
        checked = check_inputs(schema, values, n, max_rows=n)
    except ContractViolation:
        checked = None
    if checked is not None:
        flagged = sum(1 for f in checked.flags if f)
        return GateCheck(
            "input_contract",
            True,
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
        False,
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
        return GateCheck("outputs", True, figures, f"all {p.size} outputs finite and in [{lo:g}, {hi:g}]")
    shown = [v.describe() for v in check_outputs(spec, [float(x) for x in p])[:SHOWN]]
    figures["first_violations"] = shown
    return GateCheck(
        "outputs", False, figures, f"{n_bad} of {p.size} outputs broke the output contract; first: {shown[0]}"
    )


def metric_value(name: str, labels: np.ndarray, probs: np.ndarray) -> float:
    """``name`` (roc_auc, accuracy, f1, precision, recall) of probabilities against 0/1 labels."""
    return classification_metrics(y_true=labels, y_prob=probs).as_dict()[name]


def metric(
    *, name: str, labels: np.ndarray, candidate: np.ndarray, serving: np.ndarray | None, tolerance: float
) -> GateCheck:
    """``candidate >= serving - tolerance`` for metric ``name``; figures both values, delta, tolerance."""
    used = name
    cand = metric_value(name, labels, candidate)
    serv = metric_value(name, labels, serving) if serving is not None else None
    if name == "roc_auc" and not math.isfinite(cand) and np.unique(labels).size < 2:
        used = "accuracy"  # one class in the holdout: ROC AUC is undefined
        cand = metric_value(used, labels, candidate)
        serv = metric_value(used, labels, serving) if serving is not None else None
    figures: dict[str, Any] = {
        "metric": used,
        "candidate": _r(cand),
        "serving": _r(serv),
        "delta": _r(cand - serv) if serv is not None else None,
        "tolerance": tolerance,
        "rows": int(labels.size),
    }
    if serv is None:
        return GateCheck("metric", True, figures, f"{NO_SERVING} (candidate {used} {cand:.4f})")
    if not math.isfinite(cand):
        return GateCheck("metric", False, figures, f"the candidate's {used} is undefined on the holdout")
    if not math.isfinite(serv) or cand >= serv - tolerance:
        return GateCheck(
            "metric",
            True,
            figures,
            f"{used} {cand:.4f} vs serving {serv:.4f} (delta {cand - serv:+.4f}, tolerance {tolerance:g})",
        )
    return GateCheck(
        "metric",
        False,
        figures,
        f"{used} {cand:.4f} < serving {serv:.4f} - tolerance {tolerance:g} (delta {cand - serv:+.4f})",
    )


def expected_calibration_error(labels: np.ndarray, probs: np.ndarray, bins: int = ECE_BINS) -> float:
    """Expected calibration error over ``bins`` equal-width probability bins.

    Parameters
    ----------
    labels : np.ndarray
        0/1 outcomes.
    probs : np.ndarray
        Predicted probabilities of the positive class, in [0, 1].
    bins : int
        Number of equal-width bins of [0, 1]; a probability of exactly 1 falls into the last one.

    Returns
    -------
    float
        ``sum_b (n_b / n) * |mean(y in b) - mean(p in b)|``; NaN for no rows.
    """
    y = np.asarray(labels, dtype=np.float64)
    p = np.asarray(probs, dtype=np.float64)
    if y.size == 0:
        return float("nan")
    index = np.clip(np.floor(p * bins).astype(np.int64), 0, bins - 1)
    counts = np.bincount(index, minlength=bins)
    sum_y = np.bincount(index, weights=y, minlength=bins)
    sum_p = np.bincount(index, weights=p, minlength=bins)
    used = counts > 0
    gaps = np.abs(sum_y[used] / counts[used] - sum_p[used] / counts[used])
    return float(np.sum(counts[used] / y.size * gaps))


def calibration(
    *, labels: np.ndarray, candidate: np.ndarray, serving: np.ndarray | None, tolerance: float
) -> GateCheck:
    """``ECE(candidate) <= ECE(serving) + tolerance`` (10 equal-width bins)."""
    cand = expected_calibration_error(labels, candidate)
    serv = expected_calibration_error(labels, serving) if serving is not None else None
    figures: dict[str, Any] = {
        "candidate_ece": _r(cand),
        "serving_ece": _r(serv),
        "delta": _r(cand - serv) if serv is not None else None,
        "tolerance": tolerance,
        "bins": ECE_BINS,
    }
    if serv is None:
        return GateCheck("calibration", True, figures, f"{NO_SERVING} (candidate ECE {cand:.4f})")
    if cand <= serv + tolerance:
        return GateCheck(
            "calibration", True, figures, f"ECE {cand:.4f} vs serving {serv:.4f} (tolerance {tolerance:g})"
        )
    return GateCheck(
        "calibration",
        False,
        figures,
        f"ECE {cand:.4f} > serving {serv:.4f} + tolerance {tolerance:g}: the candidate's probabilities are "
        "worse calibrated",
    )


def _slice_metric(name: str, labels: np.ndarray, probs: np.ndarray) -> tuple[str, float]:
    if name == "roc_auc" and np.unique(labels).size < 2:
        return "accuracy", metric_value("accuracy", labels, probs)
    return name, metric_value(name, labels, probs)


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
) -> GateCheck:
    """Per categorical value with ``min_rows`` rows: ``candidate >= serving - tolerance``; the worst shown."""
    found: list[dict[str, Any]] = []
    for spec in schema.features:
        if spec.kind is not FeatureKind.CATEGORICAL or spec.name not in columns:
            continue
        col = np.asarray(columns[spec.name], dtype=object)
        values, counts = np.unique(np.array([v for v in col if isinstance(v, str) and v]), return_counts=True)
        for value, count in zip(values.tolist(), counts.tolist(), strict=True):
            if count < min_rows:
                continue
            mask = col == value
            used, cand = _slice_metric(name, labels[mask], candidate[mask])
            serv = _slice_metric(name, labels[mask], serving[mask])[1] if serving is not None else None
            found.append(
                {
                    "feature": spec.name,
                    "value": value,
                    "rows": int(count),
                    "metric": used,
                    "candidate": _r(cand),
                    "serving": _r(serv),
                    "delta": _r(cand - serv) if serv is not None and math.isfinite(cand - serv) else None,
                }
            )
    figures: dict[str, Any] = {"slices": len(found), "min_rows": min_rows, "tolerance": tolerance}
    if not found:
        return GateCheck(
            "slices", True, figures, f"no categorical value has {min_rows} holdout rows (gate_slice_min_rows)"
        )
    if serving is None:
        figures["worst"] = []
        return GateCheck("slices", True, figures, f"{NO_SERVING} ({len(found)} slice(s))")
    compared = [s for s in found if s["delta"] is not None]
    compared.sort(key=lambda s: s["delta"])
    failed = [s for s in compared if s["delta"] < -tolerance]
    figures["worst"] = compared[:SHOWN]
    figures["failed"] = failed[: SHOWN * 2]
    if not failed:
        worst = compared[0] if compared else None
        detail = (
            f"; worst {worst['feature']}={worst['value']} delta {worst['delta']:+.4f}"
            if worst is not None
            else ""
        )
        return GateCheck(
            "slices", True, figures, f"{len(found)} slice(s) within tolerance {tolerance:g}{detail}"
        )
    shown = ", ".join(
        f"{s['feature']}={s['value']} {s['metric']} {s['candidate']:.4f} vs {s['serving']:.4f}"
        for s in failed[:3]
    )
    return GateCheck(
        "slices",
        False,
        figures,
        f"{len(failed)} of {len(found)} slice(s) worse than serving by more than {tolerance:g}: {shown}",
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
            name=policy.metric, labels=labels, candidate=cand, serving=serv, tolerance=policy.metric_tolerance
        ),
        calibration(labels=labels, candidate=cand, serving=serv, tolerance=policy.calibration_tolerance),
        slices(
            schema=schema,
            columns=holdout.columns,
            labels=labels,
            candidate=cand,
            serving=serv,
            name=policy.metric,
            tolerance=policy.slice_tolerance,
            min_rows=policy.slice_min_rows,
        ),
    ]
    return GateResult(checks)


def failed_names(checks: Sequence[Mapping[str, Any]]) -> list[str]:
    """The names of the failed checks of a stored gate document's ``checks``."""
    return [str(c.get("name")) for c in checks if not c.get("passed")]
