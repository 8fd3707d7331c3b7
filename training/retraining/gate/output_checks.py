"""The output contract checks: the candidate's answers on the holdout have the task's shape and range."""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from registry.contracts import (
    Violation,
    check_outputs,
    check_vectors,
    output_flags,
)
from registry.schema import SUM_TOLERANCE, OutputSpec
from training.retraining.gate.figures import SHOWN, round_figure
from training.retraining.gate.verdict import GateCheck, Verdict


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
        "min": round_figure(float(np.nanmin(p))) if np.isfinite(p).any() else None,
        "max": round_figure(float(np.nanmax(p))) if np.isfinite(p).any() else None,
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
        "max_sum_error": round_figure(float(error[finite].max())) if finite.any() else None,
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
