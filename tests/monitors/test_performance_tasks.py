"""Realised and label-free metrics of multi-class and regression models (issue 26)."""

from __future__ import annotations

import json

import numpy as np
import pytest

from core.tabular import CodedColumn
from monitors.performance import (
    classification_metrics,
    estimate_multiclass_metrics,
    estimate_regression_metrics,
    fit_loss_model,
    fit_multiclass_calibration,
    metrics_for,
    multiclass_metrics,
    regression_metrics,
)
from registry.schema import Task

WEIGHTS = np.array([[1.5, -1.0, 0.5], [-0.5, 1.2, -1.0], [0.0, 0.3, 1.4]])  # features x classes
SHIFT = np.array([1.0, -0.8, 0.5])
FEATURES = [("x1", "numeric"), ("x2", "numeric"), ("segment", "categorical")]


def softmax(z: np.ndarray) -> np.ndarray:
    e = np.exp(z - z.max(axis=1, keepdims=True))
    return np.asarray(e / e.sum(axis=1, keepdims=True))


def multiclass_data(rng: np.random.Generator, n: int, shift: np.ndarray | float) -> tuple[np.ndarray, ...]:
    """Features, true class probabilities (a softmax of a linear score) and sampled labels."""
    x = rng.normal(size=(n, 3)) + shift
    true = softmax(x @ WEIGHTS)
    y = (rng.random(n)[:, None] > np.cumsum(true, axis=1)).sum(axis=1).astype(np.float64)
    return x, true, y


def regression_data(
    rng: np.random.Generator, n: int, shift: float
) -> tuple[dict[str, np.ndarray], np.ndarray, np.ndarray]:
    """Inputs, the true mean and labels; the noise grows with ``x1`` and is larger in segment ``c``."""
    x1 = rng.normal(size=n) + shift
    x2 = rng.uniform(-2, 2, size=n)
    segment = rng.choice(np.array(["a", "b", "c"], dtype=object), size=n, p=[0.5, 0.3, 0.2])
    mean = 2 * x1 + np.sin(x2) + (segment == "b") * 1.0
    sigma = 0.3 + 0.8 * np.exp(0.7 * x1) * np.where(segment == "c", 1.5, 1.0)
    return {"x1": x1, "x2": x2, "segment": segment}, mean, mean + sigma * rng.normal(size=n)


# ---------------------------------------------------------------- realised


def test_multiclass_metrics_by_hand() -> None:
    prob = np.array([[0.7, 0.2, 0.1], [0.1, 0.8, 0.1], [0.3, 0.3, 0.4], [0.5, 0.4, 0.1], [0.2, 0.2, 0.6]])
    y = np.array([0, 1, 1, 2, 2])
    m = multiclass_metrics(y_true=y, y_prob=prob)  # predicted: 0, 1, 2, 0, 2
    assert m.rows == 5 and m.accuracy == pytest.approx(3 / 5)
    assert m.recall == pytest.approx((1.0, 0.5, 0.5))
    f1 = [2 * 1 / (2 + 1 + 0), 2 * 1 / (2 + 0 + 1), 2 * 1 / (2 + 1 + 1)]
    assert m.macro_f1 == pytest.approx(np.mean(f1))
    assert m.log_loss == pytest.approx(-np.mean(np.log([0.7, 0.8, 0.3, 0.1, 0.6])))
    flat = m.as_dict()
    assert list(flat) == ["rows", "accuracy", "macro_f1", "log_loss", "recall_0", "recall_1", "recall_2"]
    assert all(isinstance(v, float) for v in flat.values())


def test_multiclass_log_loss_clips_zero_probabilities() -> None:
    m = multiclass_metrics(y_true=np.array([1.0]), y_prob=np.array([[1.0, 0.0, 0.0]]))
    assert m.log_loss == pytest.approx(-np.log(1e-15))
    assert np.isnan(m.recall[0]) and m.recall[1] == 0.0  # no row of class 0: its recall is undefined


def test_regression_r2() -> None:
    y, yhat = np.array([1.0, 2.0, 3.0, 4.0]), np.array([1.5, 2.0, 2.0, 6.0])
    m = regression_metrics(y_true=y, y_pred=yhat)
    assert m.r2 == pytest.approx(1 - np.sum((yhat - y) ** 2) / np.sum((y - y.mean()) ** 2))
    assert list(m.as_dict()) == ["rows", "mae", "rmse", "r2"]
    assert np.isnan(regression_metrics(y_true=np.array([2.0, 2.0]), y_pred=np.array([1.0, 3.0])).r2)
    assert np.isnan(regression_metrics(y_true=np.array([2.0]), y_pred=np.array([1.0])).r2)


def test_metrics_for_each_task_leaves_out_nan_rows() -> None:
    y = np.array([1.0, 0.0, np.nan, 1.0, 0.0])
    p = np.array([0.9, 0.2, 0.7, np.nan, 0.6])
    binary = metrics_for(Task.BINARY, y_true=y, predictions=p)
    want = classification_metrics(y_true=y[[0, 1, 4]], y_prob=p[[0, 1, 4]]).as_dict()
    assert binary == want and binary["rows"] == 3.0

    prob = np.array([[0.7, 0.2, 0.1], [0.1, 0.8, 0.1], [np.nan, 0.3, 0.4], [0.5, 0.4, 0.1]])
    labels = np.array([0.0, 2.0, 1.0, np.nan])
    multi = metrics_for(Task.MULTICLASS, y_true=labels, predictions=prob)
    assert multi == pytest.approx(
        multiclass_metrics(y_true=labels[:2], y_prob=prob[:2]).as_dict(), nan_ok=True
    )
    assert multi["rows"] == 2.0 and "recall_2" in multi

    values = np.array([1.0, 2.0, np.nan, 4.0])
    reg = metrics_for(Task.REGRESSION, y_true=np.array([1.5, np.nan, 3.0, 3.0]), predictions=values)
    assert reg["rows"] == 2.0 and reg["mae"] == pytest.approx(0.75)


# ---------------------------------------------------------------- multi-class CBPE


@pytest.mark.parametrize("temperature", [1.0, 1.6, 0.6])  # calibrated, over- and under-confident
def test_multiclass_estimate_under_covariate_shift(temperature: float) -> None:
    rng = np.random.default_rng(26)
    x, _, y = multiclass_data(rng, 20_000, 0.0)
    calibration = fit_multiclass_calibration(softmax(temperature * (x @ WEIGHTS)), y)
    json.dumps(calibration, allow_nan=False)
    xs, truth, ys = multiclass_data(rng, 20_000, SHIFT)
    window = softmax(temperature * (xs @ WEIGHTS))
    real = multiclass_metrics(y_true=ys, y_prob=window)
    est = estimate_multiclass_metrics(y_prob=window, calibration=calibration)
    expected = truth[np.arange(window.shape[0]), np.argmax(window, axis=1)].mean()  # without label noise
    print(
        f"multiclass T={temperature}: accuracy realised {real.accuracy:.4f} (expected {expected:.4f}) "
        f"estimated {est['accuracy']:.4f}; "
        f"macro F1 realised {real.macro_f1:.4f} estimated {est['macro_f1']:.4f}"
    )
    assert est["rows"] == 20_000.0
    assert abs(est["accuracy"] - real.accuracy) < 0.03
    assert abs(est["macro_f1"] - real.macro_f1) < 0.03


def test_multiclass_estimate_skips_nan_rows_and_works_without_calibration() -> None:
    rng = np.random.default_rng(3)
    _, true, _ = multiclass_data(rng, 5_000, 0.0)
    window = true.copy()
    window[:10, 1] = np.nan
    est = estimate_multiclass_metrics(y_prob=window, calibration=None)
    assert est["rows"] == 4_990.0
    assert est["accuracy"] == pytest.approx(float(np.max(true[10:], axis=1).mean()))
    empty = estimate_multiclass_metrics(y_prob=np.empty((0, 3)), calibration=None)
    assert empty["rows"] == 0.0 and np.isnan(empty["accuracy"])


# ---------------------------------------------------------------- regression DLE


@pytest.mark.parametrize("bias", [0.0, 0.3])  # the true mean function, or a slightly wrong one
def test_regression_estimate_under_covariate_shift(bias: float) -> None:
    rng = np.random.default_rng(126)
    cols, mean, y = regression_data(rng, 20_000, 0.0)
    model = fit_loss_model(cols, mean + bias * cols["x2"], y, features=FEATURES)
    json.dumps(model, allow_nan=False)
    window, wmean, wy = regression_data(rng, 20_000, 1.0)  # towards the high-noise region
    predictions = wmean + bias * window["x2"]
    real = regression_metrics(y_true=wy, y_pred=predictions)
    est = estimate_regression_metrics(columns=window, predictions=predictions, model=model)
    reference = regression_metrics(y_true=y, y_pred=mean + bias * cols["x2"])
    print(
        f"regression bias={bias}: MAE reference {reference.mae:.3f} realised {real.mae:.3f} "
        f"estimated {est['mae']:.3f} ({est['mae'] / real.mae - 1:+.1%}); RMSE realised {real.rmse:.3f} "
        f"estimated {est['rmse']:.3f} ({est['rmse'] / real.rmse - 1:+.1%})"
    )
    assert est["rows"] == 20_000.0
    assert abs(est["mae"] / real.mae - 1) < 0.2
    assert abs(est["rmse"] / real.rmse - 1) < 0.2
    assert est["mae"] > 1.5 * reference.mae  # the shift's loss of accuracy shows


def test_loss_model_reads_coded_columns_missing_values_and_unseen_categories() -> None:
    rng = np.random.default_rng(7)
    cols, mean, y = regression_data(rng, 4_000, 0.0)
    model = fit_loss_model(cols, mean, y, features=FEATURES)
    window, wmean, _ = regression_data(rng, 1_000, 0.0)
    plain = estimate_regression_metrics(columns=window, predictions=wmean, model=model)
    categories, codes = np.unique(window["segment"].astype(str), return_inverse=True)
    coded = dict(
        window, segment=CodedColumn(codes=codes.astype(np.int32), categories=categories.astype(object))
    )
    assert estimate_regression_metrics(columns=coded, predictions=wmean, model=model) == plain

    odd = dict(window, x1=window["x1"].copy(), segment=window["segment"].copy())
    odd["x1"][:100] = np.nan
    odd["segment"][:100] = "never-seen"
    odd["segment"][100:200] = None
    predictions = wmean.copy()
    predictions[-5:] = np.nan
    est = estimate_regression_metrics(columns=odd, predictions=predictions, model=model)
    assert est["rows"] == 995.0 and np.isfinite(est["mae"]) and np.isfinite(est["rmse"])


def test_loss_model_ignores_unlabelled_reference_rows() -> None:
    rng = np.random.default_rng(8)
    cols, mean, y = regression_data(rng, 3_000, 0.0)
    labelled = fit_loss_model(cols, mean, y, features=FEATURES)
    y_gaps = np.concatenate([y, np.full(50, np.nan)])
    padded = {k: np.concatenate([v, v[:50]]) for k, v in cols.items()}
    with_gaps = fit_loss_model(padded, np.concatenate([mean, mean[:50]]), y_gaps, features=FEATURES)
    assert with_gaps["rows"] == labelled["rows"] == 3_000
    assert with_gaps["abs_error"] == pytest.approx(labelled["abs_error"])


def test_multiclass_metrics_reject_labels_that_are_not_class_indexes() -> None:
    with pytest.raises(ValueError, match="class indexes"):
        multiclass_metrics(y_true=np.array([0, 3]), y_prob=np.full((2, 3), 1 / 3))
    empty = metrics_for(Task.MULTICLASS, y_true=np.empty(0), predictions=np.empty((0, 3)))
    assert empty["rows"] == 0.0 and np.isnan(empty["accuracy"])
