"""Reference data of each task (a multi-class and a regression model's inputs, target and outputs), and a
multi-class window evaluated against one."""

from __future__ import annotations

import numpy as np

from monitors.engine import evaluate
from monitors.profile import profile_from_dict
from monitors.report import DriftReport
from monitors.sketch import MulticlassCounts, WindowSketch

CLASSES = ("low", "mid", "high")


def multiclass_reference(n: int = 6_000) -> tuple[dict[str, np.ndarray], np.ndarray]:
    """Two numeric inputs and a categorical, the target (class names) and the model's probabilities."""
    rng = np.random.default_rng(41)
    x1, x2 = rng.normal(size=n), rng.normal(size=n)
    region = rng.choice(np.array(["north", "south"], dtype=object), size=n)
    score = np.column_stack([-x1, 0.3 * x2, x1 + 0.5 * (region == "south")])
    prob = np.exp(score) / np.exp(score).sum(axis=1, keepdims=True)
    y = (rng.random(n)[:, None] > np.cumsum(prob, axis=1)).sum(axis=1)
    cols = {"x1": x1, "x2": x2, "region": region, "label": np.array(CLASSES, dtype=object)[y]}
    return cols, prob


def regression_reference(n: int = 6_000) -> tuple[dict[str, np.ndarray], np.ndarray]:
    """Inputs and a target whose noise grows with ``x1``, and the model's values (the true mean)."""
    rng = np.random.default_rng(42)
    x1, x2 = rng.normal(size=n), rng.normal(size=n)
    region = rng.choice(np.array(["north", "south"], dtype=object), size=n)
    mean = 3 * x1 - x2 + (region == "south")
    y = mean + (0.5 + np.exp(0.5 * x1)) * rng.normal(size=n)
    return {"x1": x1, "x2": x2, "region": region, "y": y}, mean


def _window(profile_doc: dict, prob: np.ndarray, labels: np.ndarray) -> DriftReport:
    """A window of the reference's first rows, its vectors and labels counted as the log's reader does."""
    profile = profile_from_dict(profile_doc)
    cols, _ = multiclass_reference(3_000)
    n = len(labels)
    sketch = WindowSketch().update(
        profile, {k: cols[k][:n] for k in ("x1", "x2", "region")}, predictions=prob.max(axis=1)
    )
    counts = MulticlassCounts(len(CLASSES))
    counts.add(profile, prob, labels.astype(np.float64), sketch.errors)
    sketch.multiclass = counts
    return evaluate(profile=profile, sketch=sketch)
