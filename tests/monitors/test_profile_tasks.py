"""The reference profile of multi-class and regression models; binary profiles unchanged (issue 26)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from core.tabular import CodedColumn
from monitors.performance import (
    estimate_multiclass_metrics,
    estimate_regression_metrics,
    fit_multiclass_calibration,
    metrics_for,
)
from monitors.profile import (
    PROFILE_FORMAT,
    CategoricalProfile,
    NumericProfile,
    build_reference_profile,
    profile_from_dict,
    read_profile,
    write_profile,
)
from registry.schema import Task, infer_schema, label_codes
from tests.monitors.references import CLASSES, multiclass_reference, regression_reference


def test_multiclass_profile(tmp_path: Path) -> None:
    cols, prob = multiclass_reference()
    schema = infer_schema(cols, target="label", task=Task.MULTICLASS, classes=CLASSES)
    labels = label_codes(cols["label"], schema.classes)
    prob[:3, 0] = np.nan  # three rows without an answer
    doc = build_reference_profile(cols, schema, predictions=prob, labels=labels)
    assert doc["task"] == Task.MULTICLASS.value and "loss_model" not in doc

    ok = ~np.isnan(prob).any(axis=1)
    assert doc["prediction"]["count"] == ok.sum() and doc["prediction"]["missing"] == 3
    assert doc["prediction"]["max"] == pytest.approx(prob[ok].max(axis=1).max())
    classes = doc["classes"]
    assert classes["names"] == list(CLASSES) and list(classes["probabilities"]) == list(CLASSES)
    assert classes["probabilities"]["mid"]["mean"] == pytest.approx(prob[:, 1].mean())
    predicted = classes["predicted"]
    want = {c: int(np.sum(prob[ok].argmax(axis=1) == k)) for k, c in enumerate(CLASSES)}
    assert predicted["categories"] == dict(sorted(want.items())) and predicted["missing"] == 3

    assert doc["performance"] == metrics_for(
        Task.MULTICLASS, y_true=labels, predictions=prob, classes=CLASSES
    )
    assert set(doc["performance"]) >= {
        "rows",
        "accuracy",
        "macro_f1",
        "log_loss",
        "recall[low]",
        "recall[high]",
    }
    assert doc["calibration"] == fit_multiclass_calibration(prob, labels)

    prof = read_profile(write_profile(doc, tmp_path / "profile.json"))
    assert prof.task is Task.MULTICLASS and prof.loss_model is None
    assert set(prof.class_probabilities) == set(CLASSES)
    assert all(isinstance(p, NumericProfile) for p in prof.class_probabilities.values())
    assert isinstance(prof.predicted_class, CategoricalProfile) and prof.predicted_class.categories == want
    est = estimate_multiclass_metrics(y_prob=prob[ok], calibration=prof.calibration)
    assert est["accuracy"] == pytest.approx(doc["performance"]["accuracy"], abs=0.02)


def test_multiclass_profile_checks_the_classes() -> None:
    cols, prob = multiclass_reference(500)
    schema = infer_schema(cols, target="label", task=Task.MULTICLASS, classes=CLASSES)
    with pytest.raises(ValueError, match="classes"):
        build_reference_profile(cols, schema, predictions=prob[:, :2])
    doc = build_reference_profile(cols, schema, predictions=prob)  # no labels: no performance
    assert (
        doc["performance"] is None and doc["calibration"] is None and doc["classes"]["names"] == list(CLASSES)
    )


def test_regression_profile(tmp_path: Path) -> None:
    cols, values = regression_reference()
    schema = infer_schema(cols, target="y", task=Task.REGRESSION)
    categories, codes = np.unique(cols["region"].astype(str), return_inverse=True)
    region = CodedColumn(codes=codes.astype(np.int32), categories=categories.astype(object))
    coded: dict[str, np.ndarray | CodedColumn] = {**cols, "region": region}
    doc = build_reference_profile(coded, schema, predictions=values, labels=cols["y"])
    assert doc["task"] == Task.REGRESSION.value and "classes" not in doc and doc["calibration"] is None
    assert doc["prediction"]["mean"] == pytest.approx(values.mean())
    assert doc["performance"] == metrics_for(Task.REGRESSION, y_true=cols["y"], predictions=values)
    assert set(doc["performance"]) == {"rows", "mae", "rmse", "r2"}
    model = doc["loss_model"]
    assert [(f["name"], f["kind"]) for f in model["features"]] == [
        ("x1", "numeric"),
        ("x2", "numeric"),
        ("region", "categorical"),
    ]
    assert doc == build_reference_profile(cols, schema, predictions=values, labels=cols["y"])  # coded or not

    prof = read_profile(write_profile(doc, tmp_path / "profile.json"))
    assert prof.task is Task.REGRESSION and prof.loss_model == model and not prof.class_probabilities
    assert prof.loss_model is not None
    est = estimate_regression_metrics(columns=cols, predictions=values, model=prof.loss_model)
    assert est["mae"] == pytest.approx(doc["performance"]["mae"], rel=0.05)
    assert est["rmse"] == pytest.approx(doc["performance"]["rmse"], rel=0.1)


def test_binary_profile_has_no_new_keys_and_old_profiles_parse() -> None:
    rng = np.random.default_rng(43)
    cols = {"x1": rng.normal(size=2_000), "y": (rng.random(2_000) < 0.3).astype(np.int64)}
    schema = infer_schema(cols, target="y")
    p = np.clip(0.3 + 0.1 * cols["x1"], 0, 1)
    doc = build_reference_profile(cols, schema, predictions=p, labels=cols["y"])
    assert list(doc) == [
        "format",
        "rows",
        "target",
        "task",
        "n_quantiles",
        "n_bins",
        "features",
        "prediction",
        "performance",
        "calibration",
        "multivariate",
        "performance_spread",  # the metrics' spread over the reference's chunks (None: under 2,500 rows)
        "sample",  # the rows kept raw for root-cause analysis (issue 42)
        "surrogate",  # the surrogate of the answers, fitted on that sample (issue 42)
    ]
    assert doc["task"] == Task.BINARY.value
    prof = profile_from_dict(json.loads(json.dumps(doc)))
    assert prof.task is Task.BINARY and prof.predicted_class is None and prof.loss_model is None
    old = {k: v for k, v in doc.items() if k not in {"task", "target", "sample", "surrogate"}}
    assert profile_from_dict(old).task is Task.BINARY
    assert profile_from_dict(dict(old, task="binary")).task is Task.BINARY
    assert old["format"] == PROFILE_FORMAT
