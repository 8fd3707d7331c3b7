"""Attribution of a change (monitors/attribution.py) on models whose answer is a known function of the data.

The binary model relies on ``x1`` (and a little on ``c``) and ignores ``x2``: a shift of ``x1`` must take the
impact, the same shift of ``x2`` none. The bounds must cover the effect measured on 200,000 rows by the
plain metrics of monitors/performance.py; beyond the budget the least moving features are grouped; the
weighted figures equal monitors/performance.py at unit weights; the surrogate fits a smooth model.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

import numpy as np
import pytest

from monitors.attribution import MAX_PLAYERS, apply_impacts, attribute
from monitors.engine import compare
from monitors.performance import (
    estimate_classification_metrics,
    estimate_multiclass_metrics,
    estimate_regression_metrics,
    metrics_for,
)
from monitors.predictors import predictor_for
from monitors.profile import build_reference_profile, profile_from_dict
from monitors.report import report_from_dict
from monitors.rows import Predictor, RowSample
from monitors.surrogate import fit_surrogate, profile_surrogate, surrogate_predict
from monitors.weighted import Figure, values
from registry.schema import FeatureKind, Task, infer_schema

KINDS = {"x1": FeatureKind.NUMERIC, "x2": FeatureKind.NUMERIC, "c": FeatureKind.CATEGORICAL}
CLASSES = ("a", "b", "c")


def _sigmoid(z: np.ndarray) -> np.ndarray:
    return np.asarray(1.0 / (1.0 + np.exp(-z)))


def binary_model(columns: Mapping[str, np.ndarray]) -> np.ndarray:
    return _sigmoid(3.0 * np.asarray(columns["x1"]) + 0.5 * (np.asarray(columns["c"]) == "u") - 0.2)


def multiclass_model(columns: Mapping[str, np.ndarray]) -> np.ndarray:
    x1 = np.asarray(columns["x1"], dtype=np.float64)
    scores = np.column_stack([2.0 * x1, -2.0 * x1, 0.3 * (np.asarray(columns["c"]) == "u")])
    p = np.exp(scores - scores.max(axis=1, keepdims=True))
    return np.asarray(p / p.sum(axis=1, keepdims=True))


def regression_model(columns: Mapping[str, np.ndarray]) -> np.ndarray:
    return np.asarray(2.0 * np.asarray(columns["x1"], dtype=np.float64) + (np.asarray(columns["c"]) == "u"))


MODELS = {Task.BINARY: binary_model, Task.MULTICLASS: multiclass_model, Task.REGRESSION: regression_model}


def features(
    n: int, *, seed: int, x1: float = 0.0, x2: float = 0.0, s1: float = 1.0, s2: float = 1.0
) -> dict[str, np.ndarray]:
    """Rows: ``x1``, ``x2`` normal (means ``x1``, ``x2``, sd ``s1``, ``s2``), ``c`` one of u/v/w."""
    rng = np.random.default_rng(seed)
    return {
        "x1": rng.normal(x1, s1, n),
        "x2": rng.normal(x2, s2, n),
        "c": rng.choice(np.array(["u", "v", "w"], dtype=object), n),
    }


def labels(task: Task, columns: Mapping[str, np.ndarray], *, seed: int) -> np.ndarray:
    """Labels drawn from the model's own answer (a calibrated model), noisier where ``|x1|`` is large."""
    rng = np.random.default_rng(seed + 1000)
    p = MODELS[task](columns)
    if task is Task.BINARY:
        return (rng.random(p.size) < p).astype(np.float64)
    if task is Task.MULTICLASS:
        return (p.cumsum(axis=1) < rng.random((p.shape[0], 1))).sum(axis=1).astype(np.float64)
    x1 = np.asarray(columns["x1"])
    return np.asarray(p + rng.normal(0.0, 0.3 + 0.5 * np.abs(x1), p.size))


def reference_and_profile(task: Task, n: int = 20_000) -> tuple[RowSample, Any]:
    """A reference sample (5,000 rows) and the profile of ``n`` rows with calibration / loss model."""
    cols = features(n, seed=1)
    y = labels(task, cols, seed=1)
    table: dict[str, np.ndarray] = dict(cols)
    if task is Task.MULTICLASS:
        table["y"] = np.array([CLASSES[int(k)] for k in y], dtype=object)
    else:
        table["y"] = y
    schema = infer_schema(table, target="y", task=task, classes=CLASSES if task is Task.MULTICLASS else ())
    predictions = MODELS[task](cols)
    built = build_reference_profile(cols, schema, predictions=predictions, labels=y)
    profile = profile_from_dict(
        {k: v for k, v in built.items() if k != "surrogate"}
    )  # no surrogate unless asked
    keep = slice(0, 5_000)
    sample = RowSample({k: v[keep] for k, v in cols.items()}, dict(KINDS), predictions[keep], y[keep])
    return sample, profile


def window(task: Task, *, seed: int = 3, n: int = 5_000, **shift: float) -> RowSample:
    cols = features(n, seed=seed, **shift)
    return RowSample(cols, dict(KINDS), MODELS[task](cols), None)


@pytest.fixture(scope="module")
def binary() -> tuple[RowSample, Any]:
    return reference_and_profile(Task.BINARY)


def model_predictor(task: Task) -> Predictor:
    return Predictor(predict=MODELS[task], method="model")


def by_name(doc: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    return {e["name"]: e for e in doc["features"]}


def test_the_feature_the_model_relies_on_takes_the_impact(binary: tuple[RowSample, Any]) -> None:
    reference, profile = binary
    doc = attribute(
        reference=reference,
        window=window(Task.BINARY, s1=0.4, s2=0.4),
        drifted=["x2", "x1"],
        predictor=model_predictor(Task.BINARY),
        profile=profile,
    )
    assert doc is not None
    assert doc["method"] == "model" and doc["surrogate_fit"] is None
    assert doc["estimate"] == "cbpe" and doc["metric"] == "roc_auc" and doc["significant"]
    assert [e["name"] for e in doc["features"]] == ["x1", "x2"]  # ranked by |impact|
    x1, x2 = by_name(doc)["x1"], by_name(doc)["x2"]
    assert x1["impact"] > 0.9 and not x1["harmless"]
    assert x1["lower"] <= x1["effect"] <= x1["upper"] and not x1["lower"] <= 0 <= x1["upper"]
    assert abs(x1["effect"] + x2["effect"] - doc["change"]) < 1e-12  # efficiency: the effects sum to it
    assert doc["change"] < -0.1  # squeezed toward the boundary, the model separates the rows less well
    assert x2["harmless"] and abs(x2["impact"]) < 0.01 and abs(x2["prediction_effect"]) < 1e-9
    assert re.fullmatch(
        r"x2 drifted 0\.4\d sd; it explains none of the estimated ROC AUC change", x2["message"]
    )
    assert re.match(r"x1 drifted 0\.4\d sd; it explains \d+% of the estimated ROC AUC change", x1["message"])
    assert doc["message"].startswith("x1 explains") and "x2 drifted harmlessly" in doc["message"]
    assert doc["rows"] == 2_000 and doc["evaluations"] == 4 and doc["resamples"] == 50


def test_a_shift_of_an_ignored_feature_explains_nothing(binary: tuple[RowSample, Any]) -> None:
    reference, profile = binary
    doc = attribute(
        reference=reference,
        window=window(Task.BINARY, x2=1.5),
        drifted=["x2"],
        predictor=model_predictor(Task.BINARY),
        profile=profile,
    )
    assert doc is not None and not doc["significant"]
    (x2,) = doc["features"]
    assert x2["harmless"] and x2["impact"] == 0.0
    assert x2["message"].endswith("it explains none of the estimated ROC AUC change")
    assert doc["message"].startswith("the drifted features explain no significant estimated ROC AUC change")


def test_categorical_drift_is_sized_in_total_variation(binary: tuple[RowSample, Any]) -> None:
    reference, profile = binary
    cols = features(5_000, seed=4)
    cols["c"] = np.where(np.random.default_rng(5).random(5_000) < 0.5, "u", cols["c"]).astype(object)
    shifted = RowSample(cols, dict(KINDS), binary_model(cols), None)
    doc = attribute(
        reference=reference,
        window=shifted,
        drifted=["c"],
        predictor=model_predictor(Task.BINARY),
        profile=profile,
    )
    assert doc is not None
    (c,) = doc["features"]
    assert c["drift_unit"] == "tv" and 0.25 < c["drift"] < 0.42  # a third of the rows moved to "u"
    assert c["prediction_effect"] > 0.0 and "in total variation" in c["message"]


def test_bounds_cover_the_effect_on_many_rows(binary: tuple[RowSample, Any]) -> None:
    """The effect of x1's shift measured on 200,000 rows, by the plain CBPE of monitors/performance.py."""
    reference, profile = binary
    big = features(200_000, seed=11, s1=0.6)
    back = {**big, "x1": np.random.default_rng(12).normal(0.0, 1.0, 200_000)}
    auc = [
        estimate_classification_metrics(y_prob=binary_model(c), calibration=profile.calibration).roc_auc
        for c in (big, back)
    ]
    truth = auc[0] - auc[1]
    covered = 0
    for seed in range(5):
        doc = attribute(
            reference=reference,
            window=window(Task.BINARY, seed=20 + seed, s1=0.6),
            drifted=["x1", "x2"],
            predictor=model_predictor(Task.BINARY),
            profile=profile,
            seed=seed,
        )
        assert doc is not None
        x1 = by_name(doc)["x1"]
        covered += x1["lower"] <= truth <= x1["upper"]
        assert x1["upper"] - x1["lower"] < 0.05
    assert covered >= 4, truth  # 95 % intervals: at most one of five may miss


def test_more_drifted_features_than_players_are_grouped() -> None:
    names = [f"f{i}" for i in range(11)]
    kinds = dict.fromkeys(names, FeatureKind.NUMERIC)

    def model(columns: Mapping[str, np.ndarray]) -> np.ndarray:
        z = 3.0 * columns["f0"] + sum(0.1 * (i % 3) * columns[f"f{i}"] for i in range(1, 11))
        return _sigmoid(np.asarray(z))

    rng = np.random.default_rng(0)
    ref_cols = {n: rng.normal(0.0, 1.0, 5_000) for n in names}
    win_cols = {n: rng.normal(1.0, 1.0, 5_000) for n in names}
    ref_cols["f0"] = rng.normal(0.0, 1.5, 5_000)
    win_cols["f0"] = rng.normal(0.0, 0.5, 5_000)  # squeezed toward the boundary: ROC AUC falls
    reference = RowSample(ref_cols, kinds, model(ref_cols))
    schema = infer_schema({**ref_cols, "y": (rng.random(5_000) < model(ref_cols)).astype(float)}, target="y")
    profile = profile_from_dict(build_reference_profile(ref_cols, schema, predictions=model(ref_cols)))
    doc = attribute(
        reference=reference,
        window=RowSample(win_cols, kinds, model(win_cols)),
        drifted=names,
        predictor=Predictor(predict=model, method="model"),
        profile=profile,
    )
    assert doc is not None and doc["change"] < 0 and doc["significant"]
    assert len(doc["features"]) == MAX_PLAYERS - 1 and len(doc["grouped"]) == len(names) - MAX_PLAYERS + 1
    assert doc["features"][0]["name"] == "f0" and doc["features"][0]["impact"] > 0.8
    assert doc["grouped_effect"]["features"] == doc["grouped"]
    assert not {e["name"] for e in doc["features"]} & set(doc["grouped"])
    assert {"f3", "f6", "f9"} <= set(doc["grouped"])  # the features the model ignores play as one
    assert doc["evaluations"] == len(names) + 1 + 2**MAX_PLAYERS
    total = sum(e["effect"] for e in doc["features"]) + doc["grouped_effect"]["effect"]
    assert abs(total - doc["change"]) < 1e-12


@pytest.mark.parametrize("task", [Task.MULTICLASS, Task.REGRESSION])
def test_other_tasks(task: Task) -> None:
    reference, profile = reference_and_profile(task)
    doc = attribute(
        reference=reference,
        window=window(task, x1=1.5, x2=1.5),
        drifted=["x1", "x2"],
        predictor=model_predictor(task),
        profile=profile,
    )
    assert doc is not None
    want = {Task.MULTICLASS: ("cbpe", "macro_f1"), Task.REGRESSION: ("dle", "rmse")}[task]
    assert (doc["estimate"], doc["metric"]) == want and doc["significant"]
    x1, x2 = by_name(doc)["x1"], by_name(doc)["x2"]
    assert doc["features"][0]["name"] == "x1" and x1["impact"] > 0.9 and not x1["harmless"]
    assert x2["harmless"] and abs(x2["impact"]) < 0.1  # the loss model's own small weight on x2
    if task is Task.REGRESSION:
        assert doc["change"] > 0 and x1["prediction_effect"] > 2.5  # the error grows with |x1|; 2 x 1.5
        assert "RMSE" in x1["message"]
    else:
        assert 0.0 < doc["prediction_change"] <= 1.0  # the predicted-class shares' total variation
        assert "macro F1" in x1["message"]


def test_regression_without_a_loss_model_attributes_the_prediction() -> None:
    reference, profile = reference_and_profile(Task.REGRESSION)
    bare = profile_from_dict({**_dict_of(profile), "loss_model": None})
    doc = attribute(
        reference=reference,
        window=window(Task.REGRESSION, x1=1.0),
        drifted=["x1"],
        predictor=model_predictor(Task.REGRESSION),
        profile=bare,
    )
    assert doc is not None and doc["metric"] is None and doc["change"] is None
    (x1,) = doc["features"]
    assert x1["effect"] is None and x1["impact"] == 1.0 and not x1["harmless"]
    assert abs(doc["prediction_change"] - 2.0) < 0.15 and "prediction's change" in x1["message"]


def _dict_of(profile: Any) -> dict[str, Any]:
    """The profile's stored keys (enough to parse it again)."""
    cols = features(2_000, seed=1)
    schema = infer_schema({**cols, "y": regression_model(cols)}, target="y", task=Task.REGRESSION)
    return build_reference_profile(cols, schema, predictions=regression_model(cols))


def test_impacts_on_the_report_round_trip(binary: tuple[RowSample, Any]) -> None:
    reference, profile = binary
    shifted = window(Task.BINARY, s1=0.4, s2=0.4)
    report = compare(profile=profile, columns=shifted.columns, predictions=shifted.predictions)
    drifted = [f.name for f in report.features if f.drifted]
    assert {"x1", "x2"} <= set(drifted)
    doc = attribute(
        reference=reference,
        window=shifted,
        drifted=drifted,
        predictor=model_predictor(Task.BINARY),
        profile=profile,
    )
    assert doc is not None
    apply_impacts(report, doc)
    again = report_from_dict(report.as_dict())
    assert again.attribution == doc
    impacts = {f.name: f.impact for f in again.features}
    assert {name for name, impact in impacts.items() if impact is not None} == set(drifted)
    assert impacts["x1"] is not None and impacts["x1"]["impact"] > 0.9
    assert impacts["x2"] is not None and impacts["x2"]["message"].endswith(
        "explains none of the estimated ROC AUC change"
    )


def test_nothing_to_attribute() -> None:
    reference, profile = reference_and_profile(Task.BINARY, n=2_000)
    shifted = window(Task.BINARY, x1=1.0)
    predictor = model_predictor(Task.BINARY)
    assert (
        attribute(reference=reference, window=shifted, drifted=[], predictor=predictor, profile=profile)
        is None
    )
    assert (
        attribute(reference=reference, window=shifted, drifted=["nope"], predictor=predictor, profile=profile)
        is None
    )
    few = window(Task.BINARY, n=10, x1=1.0)
    assert (
        attribute(reference=reference, window=few, drifted=["x1"], predictor=predictor, profile=profile)
        is None
    )


# ---------------------------------------------------------------- weighted figures equal the plain ones


@pytest.mark.parametrize("task", list(Task))
def test_weighted_figures_equal_the_plain_ones_at_unit_weights(task: Task) -> None:
    reference, profile = reference_and_profile(task, n=4_000)
    cols = features(3_000, seed=9, x1=0.5)
    p = MODELS[task](cols)
    y = labels(task, cols, seed=9)
    ones = np.ones((1, y.size))
    realised = metrics_for(task, y_true=y, predictions=p)
    if task is Task.BINARY:
        estimated = estimate_classification_metrics(y_prob=p, calibration=profile.calibration).as_dict()
        extra: dict[str, Any] = {"calibration": profile.calibration}
        names, estimate = ("roc_auc", "accuracy"), "cbpe"
    elif task is Task.MULTICLASS:
        estimated = estimate_multiclass_metrics(y_prob=p, calibration=profile.calibration)
        extra, names, estimate = {"calibration": profile.calibration}, ("macro_f1", "accuracy"), "cbpe"
    else:
        estimated = estimate_regression_metrics(columns=cols, predictions=p, model=profile.loss_model)
        extra, names, estimate = {"loss_model": profile.loss_model}, ("rmse", "mae"), "dle"
    for metric in names:
        got = values(Figure(task, metric, "realised"), predictions=p, weights=ones, labels=y)
        assert got[0] == pytest.approx(realised[metric], abs=1e-10), metric
        got = values(Figure(task, metric, estimate, **extra), predictions=p, weights=ones, columns=cols)
        assert got[0] == pytest.approx(estimated[metric], abs=1e-10), metric


def test_weighted_figures_follow_the_weights() -> None:
    """Integer weights equal the rows repeated that many times."""
    cols = features(500, seed=2)
    p = binary_model(cols)
    y = labels(Task.BINARY, cols, seed=2)
    counts = np.random.default_rng(3).integers(0, 4, 500)
    repeated = np.repeat(np.arange(500), counts)
    got = values(
        Figure(Task.BINARY, "roc_auc", "realised"), predictions=p, weights=counts[None] * 1.0, labels=y
    )
    want = metrics_for(Task.BINARY, y_true=y[repeated], predictions=p[repeated])["roc_auc"]
    assert got[0] == pytest.approx(want, abs=1e-12)
    tied = np.round(p, 1)  # ties: each group of equal scores one step of the curve
    got = values(
        Figure(Task.BINARY, "roc_auc", "realised"), predictions=tied, weights=counts[None] * 1.0, labels=y
    )
    want = metrics_for(Task.BINARY, y_true=y[repeated], predictions=tied[repeated])["roc_auc"]
    assert got[0] == pytest.approx(want, abs=1e-12)


# ---------------------------------------------------------------- the surrogate


@pytest.mark.parametrize("task", list(Task))
def test_surrogate_fits_a_smooth_model(task: Task) -> None:
    reference, _ = reference_and_profile(task, n=6_000)
    surrogate = fit_surrogate(reference, task)
    assert surrogate is not None
    fit = surrogate["fit"]
    assert fit["rows"] == pytest.approx(0.2 * reference.rows, rel=0.1)
    if task is Task.MULTICLASS:
        assert fit["metric"] == "agreement" and fit["value"] > 0.95
    else:
        assert fit["metric"] == "r2" and fit["value"] > 0.97
    fresh = features(1_000, seed=30)
    answered, truth = surrogate_predict(surrogate, fresh), MODELS[task](fresh)
    assert answered.shape == truth.shape
    scale = 0.1 if task is Task.REGRESSION else 0.03
    assert np.mean(np.abs(answered - truth)) < scale


def test_surrogate_stored_in_a_profile_and_asked_for_a_version_served_elsewhere(
    binary: tuple[RowSample, Any],
) -> None:
    reference, profile = binary
    data: dict[str, Any] = {"sample": reference.as_dict()}
    surrogate = profile_surrogate(data, Task.BINARY)
    assert surrogate is not None and profile_surrogate({}, Task.BINARY) is None
    stored = profile_from_dict({**_binary_profile_dict(), "surrogate": surrogate})
    assert stored.surrogate == surrogate
    predictor = predictor_for(version_dir=None, profile=stored, schema=None)
    assert predictor is not None and predictor.method == "surrogate" and predictor.fit == surrogate["fit"]
    assert predictor_for(version_dir=None, profile=profile, schema=None) is None  # no model, no surrogate
    doc = attribute(
        reference=reference,
        window=window(Task.BINARY, s1=0.4, s2=0.4),
        drifted=["x1", "x2"],
        predictor=predictor,
        profile=stored,
    )
    assert doc is not None and doc["method"] == "surrogate" and doc["surrogate_fit"] == surrogate["fit"]
    assert doc["features"][0]["name"] == "x1" and doc["features"][0]["impact"] > 0.9
    assert by_name(doc)["x2"]["harmless"]
    assert "a surrogate of the model, r2" in doc["message"]


def _binary_profile_dict() -> dict[str, Any]:
    cols = features(3_000, seed=1)
    y = labels(Task.BINARY, cols, seed=1)
    schema = infer_schema({**cols, "y": y}, target="y")
    return build_reference_profile(cols, schema, predictions=binary_model(cols), labels=y)


def test_a_profile_with_a_sample_gets_its_surrogate(binary: tuple[RowSample, Any]) -> None:
    from monitors.profile import _add_surrogate

    reference, _ = binary
    built = _binary_profile_dict()
    built.pop("surrogate", None)
    built.pop("sample", None)  # as a profile written before samples were kept
    assert reference.labels is not None
    schema = infer_schema({**reference.columns, "y": reference.labels}, target="y")
    _add_surrogate(built, schema)
    assert "surrogate" not in built  # no sample, no surrogate
    built["sample"] = reference.as_dict()
    _add_surrogate(built, schema)
    assert (
        profile_from_dict(built).surrogate == built["surrogate"] and built["surrogate"]["fit"]["value"] > 0.97
    )


@pytest.mark.parametrize("task", [Task.BINARY, Task.MULTICLASS, Task.REGRESSION])
def test_a_surrogate_summed_by_parts_answers_as_asked_row_by_row(task: Task) -> None:
    """The additive path (each feature's part computed once, summed per coalition) gives the attribution the
    surrogate's own batched answers give, on every task."""
    import dataclasses

    reference, profile = reference_and_profile(task)
    surrogate = fit_surrogate(reference, task)
    assert surrogate is not None
    stored = dataclasses.replace(profile, extra={**profile.extra, "surrogate": surrogate})
    fast = predictor_for(version_dir=None, profile=stored, schema=None)
    assert fast is not None and fast.additive is not None
    slow = dataclasses.replace(fast, additive=None)
    shifted = window(task, x1=1.5, x2=1.5)
    docs = [
        attribute(reference=reference, window=shifted, drifted=["x1", "x2"], predictor=p, profile=stored)
        for p in (fast, slow)
    ]
    first, second = docs
    assert first is not None and second is not None
    a, b = ({k: v for k, v in d.items() if k != "seconds"} for d in (first, second))
    assert a.keys() == b.keys() and a["evaluations"] == b["evaluations"] == 4
    for x, y in zip(a["features"], b["features"], strict=True):
        assert x["name"] == y["name"]
        for key in ("effect", "lower", "upper", "prediction_effect"):
            assert x[key] == pytest.approx(y[key], rel=1e-9, abs=1e-12), (key, x, y)
    assert a["change"] == pytest.approx(b["change"], rel=1e-9, abs=1e-12)
