"""Comparing a window read on Spark with the same window read from the database: every count equal, float
sums and the error stream's floats to rounding (they are summed in another order), the same labels."""

from __future__ import annotations

import dataclasses
import math
from typing import Any

import numpy as np
import pytest

from monitors.binning import GridCounts
from monitors.log_window import Window
from monitors.sketch import MulticlassCounts, WindowSketch

# the parts of a window's description that differ by reader (the database's ids, the reader's name, timing)
READER_FIELDS = {"first_id", "last_id", "reader", "sketch_cache"}


def assert_grids(a: GridCounts | None, b: GridCounts | None, what: str) -> None:
    assert (a is None) == (b is None), what
    if a is None or b is None:
        return
    assert np.array_equal(a.cells, b.cells), what
    assert (a.missing, a.outside) == (b.missing, b.outside), what
    assert np.allclose(a.sums, b.sums, rtol=1e-12, atol=1e-9), what


def assert_multiclass(a: MulticlassCounts | None, b: MulticlassCounts | None) -> None:
    assert (a is None) == (b is None)
    if a is None or b is None:
        return
    assert (a.classes, a.rows, a.labelled) == (b.classes, b.rows, b.labelled)
    for k, (x, y) in enumerate(zip(a.probabilities, b.probabilities, strict=True)):
        assert_grids(x, y, f"class {k}")
    assert np.array_equal(a.predicted, b.predicted) and np.array_equal(a.confusion, b.confusion)
    for name in ("expected_true_pos", "expected_false_pos", "expected_false_neg"):
        assert np.allclose(getattr(a, name), getattr(b, name), rtol=1e-10), name
    assert a.expected_correct == pytest.approx(b.expected_correct, rel=1e-10)
    assert a.log_loss == pytest.approx(b.log_loss, rel=1e-10)


def assert_same_sketch(a: WindowSketch, b: WindowSketch) -> None:
    """Counts per cell and category equal; the labels joined equal; sums and the detector to rounding."""
    assert a.rows == b.rows and a.threshold == b.threshold
    assert set(a.numeric) == set(b.numeric)
    for name in a.numeric:
        assert_grids(a.numeric[name], b.numeric[name], name)
    assert {k: dict(v) for k, v in a.categorical.items()} == {k: dict(v) for k, v in b.categorical.items()}
    assert dict(a.sources) == dict(b.sources)
    assert_grids(a.prediction, b.prediction, "prediction")
    assert_grids(a.pca_error, b.pca_error, "pca_error")
    la, lb = a.labels, b.labels
    assert dataclasses.astuple(la)[:5] == dataclasses.astuple(lb)[:5]
    for cells in ("positive_cells", "negative_cells"):
        x, y = getattr(la, cells), getattr(lb, cells)
        assert (x is None) == (y is None) and (x is None or np.array_equal(x, y)), cells
    ra, rb = dataclasses.asdict(a.regression), dataclasses.asdict(b.regression)
    assert ra["rows"] == rb["rows"]
    assert ra == pytest.approx(rb, rel=1e-9)
    ea, eb = dataclasses.asdict(a.errors), dataclasses.asdict(b.errors)
    for key in ("n", "seen", "alarms"):
        assert ea[key] == eb[key], key
    for key in ("mean", "cumulative", "minimum"):
        assert ea[key] == pytest.approx(eb[key], rel=1e-6, abs=1e-6), key
    assert_multiclass(a.multiclass, b.multiclass)


def same_json(a: Any, b: Any, where: str = "") -> None:
    """Two JSON documents equal, floats to rounding (relative 1e-7)."""
    if isinstance(a, dict) and isinstance(b, dict):
        assert set(a) == set(b), f"{where}: {sorted(set(a) ^ set(b))}"
        for key in a:
            same_json(a[key], b[key], f"{where}.{key}")
    elif isinstance(a, list) and isinstance(b, list):
        assert len(a) == len(b), where
        for i, (x, y) in enumerate(zip(a, b, strict=True)):
            same_json(x, y, f"{where}[{i}]")
    elif isinstance(a, float) and isinstance(b, float):
        assert (math.isnan(a) and math.isnan(b)) or a == pytest.approx(b, rel=1e-7, abs=1e-12), where
    else:
        assert a == b, where


def window_doc(window: Window) -> dict[str, Any]:
    """The window's description without what depends on the reader."""
    return {k: v for k, v in window.as_dict().items() if k not in READER_FIELDS}
