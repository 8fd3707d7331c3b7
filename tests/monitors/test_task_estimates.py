"""The engine's label-free estimates of multi-class and regression models track the realised figures on a
covariate-shifted window (P(y | x) unchanged), from the window's sketch as the monitor builds it.

Targets (issue 26): multi-class accuracy within 0.03, regression MAE within 20 %. The figures are printed
(``pytest -s``) for the record.
"""

from __future__ import annotations

import numpy as np
import pytest

from monitors.engine import evaluate, sketch_columns
from monitors.profile import build_reference_profile, profile_from_dict
from registry.schema import Task, infer_schema, label_codes

CLASSES = ("a", "b", "c")


def _features(rng: np.random.Generator, n: int, shift: float) -> dict[str, np.ndarray]:
    return {
        "x1": rng.normal(shift, 1.0, n),
        "x2": rng.normal(0.0, 1.0, n),
        "region": rng.choice(np.array(["north", "south", "east"], dtype=object), n, p=(0.5, 0.3, 0.2)),
    }


def _multiclass(n: int, *, seed: int, shift: float) -> tuple[dict[str, np.ndarray], np.ndarray, np.ndarray]:
    """Rows, the model's calibrated probabilities (the true ones) and labels drawn from them."""
    rng = np.random.default_rng(seed)
    cols = _features(rng, n, shift)
    north = (cols["region"] == "north").astype(float)
    scores = np.column_stack([1.2 * cols["x1"], -0.8 * cols["x1"] + 0.6 * cols["x2"], 0.5 * north])
    p = np.exp(scores - scores.max(axis=1, keepdims=True))
    p /= p.sum(axis=1, keepdims=True)
    y = np.array([rng.choice(3, p=row) for row in p])
    cols["y"] = np.array([CLASSES[i] for i in y], dtype=object)
    return cols, p, y.astype(np.float64)


def _regression(n: int, *, seed: int, shift: float) -> tuple[dict[str, np.ndarray], np.ndarray, np.ndarray]:
    """Rows, a model's values (the true mean) and labels whose noise grows with |x1|."""
    rng = np.random.default_rng(seed)
    cols = _features(rng, n, shift)
    mean = 3.0 * cols["x1"] - cols["x2"] + (cols["region"] == "east") * 2.0
    y = mean + rng.normal(0.0, 0.5 + 0.8 * np.abs(cols["x1"]), n)
    cols["y"] = y
    return cols, mean, y


@pytest.mark.parametrize("task", [Task.MULTICLASS, Task.REGRESSION])
def test_estimates_track_the_realised_figures_on_a_shifted_window(task: Task) -> None:
    make = _multiclass if task is Task.MULTICLASS else _regression
    ref_cols, ref_pred, ref_y = make(20_000, seed=1, shift=0.0)
    schema = infer_schema(ref_cols, target="y", task=task)
    features = {k: v for k, v in ref_cols.items() if k != "y"}
    labels = label_codes(ref_cols["y"], schema.classes) if task is Task.MULTICLASS else ref_y
    profile = profile_from_dict(
        build_reference_profile(features, schema, predictions=ref_pred, labels=labels)
    )
    for shift in (0.0, 1.0):
        cols, pred, y = make(20_000, seed=2, shift=shift)
        window = {k: v for k, v in cols.items() if k != "y"}
        report = evaluate(
            profile=profile,
            sketch=sketch_columns(profile=profile, columns=window, predictions=pred, labels=y),
        )
        realised, estimated = report.performance or {}, report.estimated_performance or {}
        assert realised["rows"] == 20_000 and estimated["rows"] == 20_000
        if task is Task.MULTICLASS:
            gap = estimated["accuracy"] - realised["accuracy"]
            print(
                f"multiclass shift {shift}: accuracy realised {realised['accuracy']:.4f} estimated "
                f"{estimated['accuracy']:.4f} ({gap:+.4f}); macro_f1 {realised['macro_f1']:.4f} vs "
                f"{estimated['macro_f1']:.4f}"
            )
            assert abs(gap) <= 0.03
            assert {f.name for f in report.outputs} == {
                "prediction[a]",
                "prediction[b]",
                "prediction[c]",
                "predicted_class",
            }
            assert any(f.drifted for f in report.outputs) is (shift > 0)
        else:
            ratio = estimated["mae"] / realised["mae"]
            print(
                f"regression shift {shift}: MAE realised {realised['mae']:.4f} "
                f"estimated {estimated['mae']:.4f} "
                f"({ratio - 1:+.1%}); RMSE {realised['rmse']:.4f} vs {estimated['rmse']:.4f}"
            )
            assert abs(ratio - 1) <= 0.20
        if shift > 0:
            assert report.dataset.n_drifted >= 1 and report.prediction is not None
