"""The reference profile's cross-fitted PCA error distribution and its performance spread."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from monitors.performance import metrics_for, roc_auc
from monitors.profile import (
    build_reference_profile,
    metric_sd,
    pca_errors,
    profile_from_dict,
    reconstruction_error,
)
from registry.schema import Task, infer_schema

# ---------------------------------------------------------------- cross-fitted PCA


def factor_rows(rng: np.random.Generator, loadings: np.ndarray, rows: int) -> np.ndarray:
    """Gaussian rows ``F A + E``: ``A`` orthogonal factor loadings, ``E`` unit noise on every feature."""
    factors, features = loadings.shape
    return rng.normal(size=(rows, factors)) @ loadings + rng.normal(size=(rows, features))


def test_reference_error_is_the_error_of_fresh_rows_not_of_the_fitting_rows() -> None:
    # few rows for many features and many kept axes: the in-sample error is clearly biased low
    rows, features, factors = 2_400, 80, 40
    rng = np.random.default_rng(7)
    q, _ = np.linalg.qr(rng.normal(size=(features, factors)))
    loadings = 4.0 * q.T
    x = factor_rows(rng, loadings, rows)
    names = [f"x{j:02d}" for j in range(features)]
    cols = {n: x[:, j] for j, n in enumerate(names)}
    cols["y"] = (rng.random(rows) < 0.5).astype(np.int64)
    doc = build_reference_profile(cols, infer_schema(cols, target="y"))
    pca = profile_from_dict(json.loads(json.dumps(doc))).multivariate
    assert pca is not None and pca.features == tuple(names)
    assert 20 <= pca.components.shape[0] < features
    assert pca.error.count == rows  # each fold's rows under the other fold's PCA

    fresh = factor_rows(np.random.default_rng(8), loadings, 20_000)
    fresh_errors = pca_errors({n: fresh[:, j] for j, n in enumerate(names)}, pca)
    ref_median = float(pca.error.quantiles[(len(pca.error.quantiles) - 1) // 2])
    fresh_median = float(np.median(fresh_errors))
    assert fresh_median == pytest.approx(ref_median, rel=0.05)
    assert float(fresh_errors.mean()) == pytest.approx(pca.error.mean, rel=0.05)

    # the old way: errors of the rows the PCA was fitted on (even positions), standardised the same way
    fitted = (x[0::2] - pca.center) / pca.scale
    in_sample = reconstruction_error(fitted, pca.residual_components)
    in_sample_median = float(np.median(in_sample))
    assert in_sample_median != pytest.approx(fresh_median, rel=0.05)
    assert in_sample_median < 0.92 * fresh_median
    assert float(in_sample.mean()) < 0.92 * float(fresh_errors.mean())


def test_the_pca_needs_twice_as_many_fitting_rows_as_features() -> None:
    rng = np.random.default_rng(9)

    def multivariate(rows: int) -> object:
        cols: dict[str, np.ndarray] = {f"x{j}": rng.normal(size=rows) for j in range(3)}
        cols["y"] = np.arange(rows) % 2
        return build_reference_profile(cols, infer_schema(cols, target="y"))["multivariate"]

    assert multivariate(11) is None  # folds of 6 and 5 rows for 3 features
    twelve = multivariate(12)  # two folds of 6 rows, each fitted and held out
    assert isinstance(twelve, dict) and twelve["error"]["count"] == 12


# ---------------------------------------------------------------- performance spread


def binary_rows(rng: np.random.Generator, rows: int) -> tuple[np.ndarray, np.ndarray]:
    """Calibrated probabilities and labels drawn from them."""
    p = 1.0 / (1.0 + np.exp(-(rng.normal(size=rows) * 1.5 - 0.5)))
    return p, (rng.random(rows) < p).astype(np.int64)


def binary_profile(p: np.ndarray, y: np.ndarray, rng: np.random.Generator) -> dict[str, object]:
    cols = {"x1": rng.normal(size=p.size), "y": y}
    return build_reference_profile(cols, infer_schema(cols, target="y"), predictions=p, labels=y)


def test_binary_spread_has_its_shape_and_the_sd_of_independent_chunks() -> None:
    rng = np.random.default_rng(11)
    p, y = binary_rows(rng, 20_000)
    spread = binary_profile(p, y, rng)["performance_spread"]
    assert isinstance(spread, dict)
    assert set(spread) == {"chunk_rows", "chunks", "labelled_rows", "sd"}
    assert (spread["chunk_rows"], spread["chunks"], spread["labelled_rows"]) == (500, 40, 20_000)
    assert set(spread["sd"]) == {"accuracy", "precision", "recall", "f1", "roc_auc", "positive_rate"}
    assert all(isinstance(v, float) and v > 0 for v in spread["sd"].values())

    fresh = np.random.default_rng(12)
    aucs = []
    for _ in range(200):
        cp, cy = binary_rows(fresh, spread["chunk_rows"])
        aucs.append(roc_auc(y_true=cy, y_score=cp))
    direct = float(np.std(aucs, ddof=1))
    assert direct / 1.6 < spread["sd"]["roc_auc"] < direct * 1.6


def test_no_spread_without_2500_labelled_rows() -> None:
    rng = np.random.default_rng(13)
    p, y = binary_rows(rng, 3_000)
    yf = y.astype(np.float64)
    yf[:501] = np.nan  # 2,499 labelled rows
    assert binary_profile(p, yf, rng)["performance_spread"] is None
    yf[500] = 1.0  # 2,500: five chunks of 500
    spread = binary_profile(p, yf, rng)["performance_spread"]
    assert isinstance(spread, dict)
    assert (spread["chunk_rows"], spread["chunks"], spread["labelled_rows"]) == (500, 5, 2_500)
    pn = p.copy()
    pn[-1] = np.nan  # a row without a prediction is not labelled either
    assert binary_profile(pn, yf, rng)["performance_spread"] is None
    doc = binary_profile(p, yf, rng)
    cols = {"x1": rng.normal(size=p.size), "y": y}
    unlabelled = build_reference_profile(cols, infer_schema(cols, target="y"), predictions=p)
    assert doc["performance_spread"] is not None and unlabelled["performance_spread"] is None
    assert build_reference_profile(cols, infer_schema(cols, target="y"))["performance_spread"] is None


def test_a_metric_undefined_in_some_chunk_is_left_out() -> None:
    rng = np.random.default_rng(14)
    p, y = binary_rows(rng, 2_500)
    p[:500] = 0.2  # the first chunk predicts no positive: its precision is undefined
    y[:500] = (rng.random(500) < 0.2).astype(np.int64)
    spread = binary_profile(p, y, rng)["performance_spread"]
    assert isinstance(spread, dict) and spread["chunks"] == 5
    assert "precision" not in spread["sd"] and {"recall", "f1", "roc_auc"} <= set(spread["sd"])


def test_regression_spread_is_the_sd_of_consecutive_chunks_of_the_labelled_rows() -> None:
    rng = np.random.default_rng(15)
    n = 5_321
    x1 = rng.normal(size=n)
    target = 2 * x1 + rng.normal(size=n) * (1 + np.linspace(0, 2, n))  # noisier towards the end
    target[rng.random(n) < 0.05] = np.nan
    values = 2 * x1
    cols = {"x1": x1, "y": np.nan_to_num(target)}
    doc = build_reference_profile(
        cols, infer_schema(cols, target="y", task=Task.REGRESSION), predictions=values, labels=target
    )
    spread = doc["performance_spread"]
    labelled = int((~np.isnan(target)).sum())
    chunks = min(50, labelled // 500)
    size = labelled // chunks
    assert spread["labelled_rows"] == labelled and spread["chunks"] == chunks and spread["chunk_rows"] == size
    yt, yp = target[~np.isnan(target)], values[~np.isnan(target)]
    per = [
        metrics_for(
            Task.REGRESSION, y_true=yt[i * size : (i + 1) * size], predictions=yp[i * size : (i + 1) * size]
        )
        for i in range(chunks)
    ]
    assert set(spread["sd"]) == {"mae", "rmse", "r2"}
    for name in ("mae", "rmse", "r2"):
        want = float(np.std([m[name] for m in per], ddof=1))
        assert spread["sd"][name] == pytest.approx(want, rel=1e-12)


def test_multiclass_spread_has_the_multiclass_metrics() -> None:
    rng = np.random.default_rng(16)
    n = 6_000
    x1, x2 = rng.normal(size=n), rng.normal(size=n)
    score = np.column_stack([-x1, x2, x1])  # every class is predicted for some rows
    prob = np.exp(score) / np.exp(score).sum(axis=1, keepdims=True)
    y = (rng.random(n)[:, None] > np.cumsum(prob, axis=1)).sum(axis=1)
    classes = ("a", "b", "c")
    cols = {"x1": x1, "x2": x2, "label": np.array(classes, dtype=object)[y]}
    schema = infer_schema(cols, target="label", task=Task.MULTICLASS, classes=classes)
    spread = build_reference_profile(cols, schema, predictions=prob, labels=y)["performance_spread"]
    assert isinstance(spread, dict)
    assert (spread["chunk_rows"], spread["chunks"], spread["labelled_rows"]) == (500, 12, 6_000)
    assert set(spread["sd"]) == {"accuracy", "macro_f1", "log_loss", "recall_0", "recall_1", "recall_2"}
    assert all(v > 0 for v in spread["sd"].values())


def test_metric_sd_adds_the_window_and_the_reference_variability() -> None:
    spread = {"chunk_rows": 1_000, "chunks": 20, "labelled_rows": 20_000, "sd": {"roc_auc": 0.02}}
    assert metric_sd(spread, "roc_auc", rows=1_000) == pytest.approx(math.sqrt(0.02**2 + 0.02**2 / 20))
    assert metric_sd(spread, "roc_auc", rows=4_000) == pytest.approx(math.sqrt(0.02**2 / 4 + 0.02**2 / 20))
    assert metric_sd(spread, "roc_auc", rows=250) == pytest.approx(math.sqrt(0.02**2 * 4 + 0.02**2 / 20))
    # 1/sqrt(rows) for the window's part, over the floor of the reference's own part
    big = metric_sd(spread, "roc_auc", rows=10**12)
    assert big == pytest.approx(0.02 / math.sqrt(20), rel=1e-6)
    assert metric_sd(spread, "accuracy", rows=1_000) is None
    assert metric_sd(spread, "roc_auc", rows=0) is None
    assert metric_sd(None, "roc_auc", rows=1_000) is None


def test_the_spread_round_trips_and_old_profiles_have_none(tmp_path: object) -> None:
    rng = np.random.default_rng(17)
    p, y = binary_rows(rng, 5_000)
    doc = binary_profile(p, y, rng)
    prof = profile_from_dict(json.loads(json.dumps(doc, allow_nan=False)))
    assert prof.performance_spread == doc["performance_spread"] and prof.performance_spread is not None
    assert "performance_spread" not in prof.extra
    got = metric_sd(prof.performance_spread, "roc_auc", rows=1_000)
    assert got is not None and got > 0
    old = {k: v for k, v in doc.items() if k != "performance_spread"}
    assert profile_from_dict(old).performance_spread is None
