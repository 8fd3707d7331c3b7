"""The gate's verdict: a check's verdict, a check, the result, the policy, the holdout."""

from __future__ import annotations

import enum
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np


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


DEFAULT_POLICY = GatePolicy()  # the settings' defaults (frozen: one instance serves every default argument)


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


def failed_names(checks: Sequence[Mapping[str, Any]]) -> list[str]:
    """The names of the failed checks of a stored gate document's ``checks`` (an undecided one is not)."""
    return [str(c.get("name")) for c in checks if check_verdict(c) is Verdict.FAILED]


def check_verdict(check: Mapping[str, Any]) -> Verdict:
    """The verdict of a stored check (documents from before verdicts carry only ``passed``)."""
    value = check.get("verdict")
    if value in {v.value for v in Verdict}:
        return Verdict(str(value))
    return Verdict.PASSED if check.get("passed") else Verdict.FAILED
