"""Small builders shared by the monitor tests."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np

from core.tabular import Columns
from monitors.drift import NumericCounts
from monitors.profile import NumericProfile, numeric_summary
from monitors.profile import numeric_from_dict as _numeric_from_dict
from training.cluster.datagen import default_logit


def numeric_profile(values: np.ndarray) -> NumericProfile:
    return _numeric_from_dict(numeric_summary(values, name="x"))


def numeric_pair(reference: np.ndarray, current: np.ndarray) -> tuple[NumericCounts, NumericCounts]:
    ref = NumericCounts.from_profile(numeric_profile(reference))
    return ref, NumericCounts.from_values(current, reference=ref)


def true_probability(cols: Columns) -> np.ndarray:
    """A perfectly calibrated model of the baseline concept: the generator's own P(default | x)."""
    return np.asarray(1.0 / (1.0 + np.exp(-default_logit(cols))))


def drift_report(reference: Path, current: Path, out_dir: Path, *more: str) -> tuple[int, dict[str, Any]]:
    """`driftwarden drift REFERENCE CURRENT --json` (plus ``more``) in this process: its exit code, 0 or 1
    (2, an error, fails the test with the output), and its JSON report."""
    from typer.testing import CliRunner

    from service.cli import app

    out = out_dir / "report.json"
    result = CliRunner().invoke(app, ["drift", str(reference), str(current), "--json", str(out), *more])
    assert result.exit_code in (0, 1), result.output
    report: dict[str, Any] = json.loads(out.read_text())
    return result.exit_code, report
