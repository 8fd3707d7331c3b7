"""The slices check: the weakest slices of the holdout, candidate against serving version."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from core.tabular import as_float
from monitors.slices import Found, realised_losses, search
from registry.schema import FeatureKind, ModelSchema, Task
from training.retraining.gate.figures import (
    NO_SERVING,
    RELATIVE,
    SHOWN,
    SLICE_MIN_CLASS_ROWS,
    as_figure,
    number_text,
    shape_problem,
    task_metric,
    unfit_check,
)
from training.retraining.gate.judgement import Comparison, compare, percent
from training.retraining.gate.verdict import DEFAULT_POLICY, GateCheck, GatePolicy, Verdict


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
    policy: GatePolicy = DEFAULT_POLICY,
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
        "candidate": as_figure(st, c.diff.candidate),
        "serving": as_figure(st, c.diff.serving),
        "delta": as_figure(st, c.diff.estimate),
        "bounds": [as_figure(st, c.diff.low), as_figure(st, c.diff.high)],
        "verdict": c.verdict.value,
    }
    if c.relative is not None:  # on the target's scale: the slice's own tolerance
        doc["tolerance"] = as_figure(st, c.tolerance)
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
    policy: GatePolicy = DEFAULT_POLICY,
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
        if shape_problem(task, labels, candidate, None)
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
        unfit = unfit_check("slices", task, name)
        return replace(unfit, figures=figures | unfit.figures)
    if task is not Task.BINARY and (problem := shape_problem(task, labels, candidate, serving)):
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
    docs = _ranked(
        found,
        used=used,
        labels=labels,
        candidate=candidate,
        serving=serving,
        tolerance=tolerance,
        policy=policy,
        confidence=confidence,
        present=present,
    )
    return _concluded(docs, figures, used=used, tolerance=tolerance, confidence=confidence, searched=searched)


def _ranked(
    found: Sequence[_Slice],
    *,
    used: str,
    labels: np.ndarray,
    candidate: np.ndarray,
    serving: np.ndarray,
    tolerance: float,
    policy: GatePolicy,
    confidence: float,
    present: Sequence[int],
) -> list[dict[str, Any]]:
    """Each slice's paired comparison as a document, worst first."""
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
    return [doc for _, doc in ranked]


def _concluded(
    docs: list[dict[str, Any]],
    figures: dict[str, Any],
    *,
    used: str,
    tolerance: float,
    confidence: float,
    searched: str,
) -> GateCheck:
    """The check's verdict on the judged slices: failed when one is worse than serving beyond tolerance."""
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
            f"{_name(s)} {s['metric']} {number_text(s['metric'], s['candidate'])} vs "
            f"{number_text(s['metric'], s['serving'])} "
            f"(bounds {number_text(s['metric'], s['bounds'][0], '+')} to "
            f"{number_text(s['metric'], s['bounds'][1], '+')})"
            for s in failed[:3]
        )
        return GateCheck(
            "slices",
            Verdict.FAILED,
            figures,
            f"{len(failed)} of {len(docs)} slice(s) worse than serving by more than {by_more} with "
            f"{percent(confidence)} confidence each: {shown}{listed_open}{searched}",
        )
    worst = next((s for s in docs if s["verdict"] == Verdict.PASSED), None)
    detail = (
        f"; worst {_name(worst)} delta {number_text(worst['metric'], worst['delta'], '+')}" if worst else ""
    )
    return GateCheck(
        "slices",
        Verdict.PASSED,
        figures,
        f"{judged} of {len(docs)} slice(s) judged, none worse than serving by more than {by_more}"
        f"{detail}{listed_open}{searched}",
    )
