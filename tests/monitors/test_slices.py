"""Weak slices (monitors/slices.py): where the model is worst, on labels and on the estimated per-row loss."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from core.tabular import Columns
from monitors.performance import fit_loss_model
from monitors.profile import Profile, profile_from_dict
from monitors.rows import RowSample
from monitors.slices import condition_mask, weak_slices
from registry.schema import FeatureKind, ModelSchema, Task
from tests.monitors.helpers import true_probability
from training.cluster.datagen import TARGET, generate


def _sample(
    cols: Columns, schema: ModelSchema, predictions: np.ndarray, labels: np.ndarray | None
) -> RowSample:
    kinds = {s.name: s.kind for s in schema.features}
    columns = {
        name: np.asarray(cols[name], dtype=np.float64 if kind is FeatureKind.NUMERIC else object)
        for name, kind in kinds.items()
    }
    return RowSample(columns=columns, kinds=kinds, predictions=predictions, labels=labels)


@pytest.fixture(scope="module")
def profile(profile_dict: dict[str, Any]) -> Profile:
    return profile_from_dict(profile_dict)


@pytest.fixture(scope="module")
def window() -> Columns:
    return generate(20_000, seed=7)


def _pair(s: dict[str, Any]) -> set[tuple[str, Any]]:
    return {(c["feature"], c.get("value")) for c in s["conditions"]}


def test_labels_flipped_in_one_category_pair_make_it_the_top_significant_slice(
    window: Columns, schema: ModelSchema, profile: Profile
) -> None:
    p = true_probability(window)
    y = np.asarray(window[TARGET], dtype=np.float64)
    pair = (window["region"] == "north") & (window["home_ownership"] == "OWN")
    y[pair] = 1.0 - y[pair]
    found = weak_slices(sample=_sample(window, schema, p, y), profile=profile, level=0.05, min_rows=100)
    assert found is not None
    assert found["source"] == "labels" and found["metric"] == "error_rate" and found["level"] == 0.05
    top = found["slices"][0]
    assert _pair(top) == {("region", "north"), ("home_ownership", "OWN")}
    assert top["significant"] and top["rows"] == int(pair.sum())
    assert top["lower"] > found["overall"] and top["gap"] == pytest.approx(
        top["value"] - found["overall"], abs=1e-5
    )
    assert top["lower"] <= top["value"] <= top["upper"]
    assert top["value"] > 0.8  # most of its labels are now the opposite of a calibrated model's answer
    # the parents are listed after the pair, each worse than overall but less than the pair
    parents = [s for s in found["slices"] if len(s["conditions"]) == 1]
    assert {s["slice"] for s in parents[:2]} == {"region=north", "home_ownership=OWN"}
    assert all(s["value"] < top["value"] for s in parents)
    assert found["tried"] > 100  # every level, bin and pair of them with 100 rows


def test_no_slice_is_significant_when_the_errors_are_spread_evenly(
    window: Columns, schema: ModelSchema, profile: Profile
) -> None:
    rng = np.random.default_rng(3)
    p = true_probability(window)
    wrong = rng.random(p.size) < 0.15  # an error independent of every feature
    y = np.where(wrong, p < 0.5, p >= 0.5).astype(np.float64)
    found = weak_slices(sample=_sample(window, schema, p, y), profile=profile, level=0.05, min_rows=100)
    assert found is not None and found["tried"] > 100
    assert found["overall"] == pytest.approx(0.15, abs=0.01)
    assert not any(s["significant"] for s in found["slices"])
    assert len(found["slices"]) == 5  # the others are still listed, worst first
    gaps = [s["gap"] for s in found["slices"]]
    assert gaps == sorted(gaps, reverse=True)


def test_a_weak_numeric_range_is_found_as_a_quantile_bin(
    window: Columns, schema: ModelSchema, profile: Profile
) -> None:
    p = true_probability(window)
    y = np.asarray(window[TARGET], dtype=np.float64)
    income = np.asarray(window["income"], dtype=np.float64)
    high = income >= np.quantile(income, 0.8)
    y[high] = 1.0 - y[high]
    sample = _sample(window, schema, p, y)
    found = weak_slices(sample=sample, profile=profile, level=0.05, min_rows=100)
    assert found is not None
    top = next(s for s in found["slices"] if len(s["conditions"]) == 1)
    (cond,) = top["conditions"]
    assert cond["feature"] == "income" and set(cond) == {"feature", "low", "high"}
    assert cond["low"] == pytest.approx(np.quantile(income, 0.8)) and cond["high"] > income.max()
    assert top["significant"] and top["rows"] == int(high.sum())
    assert condition_mask(sample.columns, top["conditions"]).sum() == top["rows"]
    # no pair inside the weak bin is reported unless it is worse than the bin
    for s in found["slices"]:
        if len(s["conditions"]) == 2 and ("income", None) in _pair(s):
            assert s["value"] > top["value"]


def test_min_rows_is_respected(window: Columns, schema: ModelSchema, profile: Profile) -> None:
    p = true_probability(window)
    y = np.asarray(window[TARGET], dtype=np.float64)
    sample = _sample(window, schema, p, y)
    found = weak_slices(sample=sample, profile=profile, level=0.05, min_rows=3000, top=50)
    assert found is not None and found["min_rows"] == 3000 and found["slices"]
    assert all(s["rows"] >= 3000 for s in found["slices"])
    smaller = weak_slices(sample=sample, profile=profile, level=0.05, min_rows=100)
    assert smaller is not None and smaller["tried"] > found["tried"]
    none = weak_slices(sample=sample, profile=profile, level=0.05, min_rows=30_000)
    assert none is not None and none["tried"] == 0 and none["slices"] == []


def test_without_labels_the_estimated_loss_finds_where_the_model_is_unsure(
    window: Columns, schema: ModelSchema, profile: Profile
) -> None:
    rng = np.random.default_rng(5)
    p = true_probability(window)
    unsure = (window["loan_purpose"] == "car") & (window["region"] == "east")
    p[unsure] = rng.uniform(0.4, 0.6, int(unsure.sum()))
    found = weak_slices(sample=_sample(window, schema, p, None), profile=profile, level=0.05, min_rows=100)
    assert found is not None and found["source"] == "estimated" and found["metric"] == "error_rate"
    top = found["slices"][0]
    assert _pair(top) == {("loan_purpose", "car"), ("region", "east")} and top["significant"]
    assert top["value"] > 0.35
    # too few labels: estimated as well
    few = np.full(p.size, np.nan)
    few[:50] = 1.0
    sparse = weak_slices(sample=_sample(window, schema, p, few), profile=profile, level=0.05, min_rows=100)
    assert sparse is not None and sparse["source"] == "estimated"


def _regression(rows: int, seed: int) -> tuple[Columns, np.ndarray, np.ndarray]:
    cols = generate(rows, seed=seed, task=Task.REGRESSION)
    y = np.asarray(cols.pop("loss_amount"), dtype=np.float64)
    rng = np.random.default_rng(seed)
    pred = y + rng.normal(0.0, 0.3, rows)
    return cols, pred, y


def test_regression_slices_by_absolute_error_on_labels_and_by_the_loss_model_without(
    schema: ModelSchema,
) -> None:
    cols, pred, y = _regression(20_000, 11)
    bad = cols["home_ownership"] == "RENT"
    pred[bad] += np.random.default_rng(12).normal(0.0, 1.5, int(bad.sum()))
    regression = Profile(rows=0, features={}, task=Task.REGRESSION)
    found = weak_slices(sample=_sample(cols, schema, pred, y), profile=regression, level=0.05, min_rows=100)
    assert found is not None and found["metric"] == "abs_error" and found["source"] == "labels"
    assert found["slices"][0]["slice"] == "home_ownership=RENT" and found["slices"][0]["significant"]
    # the loss model, fitted on reference rows with the same weakness, finds it without labels
    ref, ref_pred, ref_y = _regression(20_000, 13)
    ref_pred[ref["home_ownership"] == "RENT"] += np.random.default_rng(14).normal(
        0.0, 1.5, int(np.sum(ref["home_ownership"] == "RENT"))
    )
    features = [(s.name, s.kind.value) for s in schema.features]
    model = fit_loss_model(ref, ref_pred, ref_y, features=features)
    estimated = Profile(rows=0, features={}, task=Task.REGRESSION, loss_model=model)
    found = weak_slices(
        sample=_sample(cols, schema, pred, None), profile=estimated, level=0.05, min_rows=100, top=50
    )
    assert found is not None and found["source"] == "estimated" and found["metric"] == "abs_error"
    assert ("home_ownership", "RENT") in _pair(found["slices"][0]) and found["slices"][0]["significant"]
    rent = next(s for s in found["slices"] if s["slice"] == "home_ownership=RENT")
    assert rent["significant"] and rent["gap"] > 0.3
    # without a loss model there is nothing to estimate
    assert (
        weak_slices(sample=_sample(cols, schema, pred, None), profile=regression, level=0.05, min_rows=100)
        is None
    )


def test_multiclass_slices_by_the_error_of_the_argmax(window: Columns, schema: ModelSchema) -> None:
    rng = np.random.default_rng(21)
    n = len(window["region"])
    y = rng.integers(0, 3, n).astype(np.float64)
    probs = np.full((n, 3), 0.05)
    probs[np.arange(n), y.astype(np.int64)] = 0.9
    weak = window["loan_purpose"] == "medical"
    probs[weak] = probs[weak][:, ::-1]  # the wrong class, except where the true one is the middle one
    profile = Profile(rows=0, features={}, task=Task.MULTICLASS)
    found = weak_slices(sample=_sample(window, schema, probs, y), profile=profile, level=0.05, min_rows=100)
    assert found is not None and found["metric"] == "error_rate"
    assert found["slices"][0]["slice"] == "loan_purpose=medical" and found["slices"][0]["significant"]
    assert found["overall"] == pytest.approx(np.mean(np.argmax(probs, axis=1) != y), abs=1e-6)
    # without labels: 1 - the (calibrated) probability of the predicted class, low where the model hesitates
    unsure = probs.copy()
    unsure[weak] = [0.4, 0.35, 0.25]
    found = weak_slices(
        sample=_sample(window, schema, unsure, None), profile=profile, level=0.05, min_rows=100
    )
    assert found is not None and found["source"] == "estimated" and found["metric"] == "error_rate"
    assert found["slices"][0]["slice"] == "loan_purpose=medical" and found["slices"][0]["significant"]
    assert found["slices"][0]["value"] == pytest.approx(0.6, abs=1e-6)


def test_an_empty_sample_has_no_report(schema: ModelSchema, profile: Profile) -> None:
    empty = _sample({s.name: np.zeros(0) for s in schema.features}, schema, np.zeros(0), None)
    assert weak_slices(sample=empty, profile=profile, level=0.05, min_rows=100) is None


def test_only_labelled_rows_count_when_some_rows_have_a_label(
    window: Columns, schema: ModelSchema, profile: Profile
) -> None:
    p = true_probability(window)
    y = np.asarray(window[TARGET], dtype=np.float64)
    pair = (window["region"] == "south") & (window["loan_purpose"] == "debt_consolidation")
    y[pair] = 1.0 - y[pair]
    y[np.random.default_rng(8).random(y.size) < 0.5] = np.nan  # half the rows have no label yet
    sample = _sample(window, schema, p, y)
    found = weak_slices(sample=sample, profile=profile, level=0.05, min_rows=100)
    assert found is not None and found["source"] == "labels"
    top = found["slices"][0]
    assert _pair(top) == {("region", "south"), ("loan_purpose", "debt_consolidation")} and top["significant"]
    assert top["rows"] == int(np.sum(pair & ~np.isnan(y)))
    assert condition_mask(sample.columns, top["conditions"]).sum() == int(pair.sum())
    assert found["overall"] == pytest.approx(np.nanmean(((p >= 0.5) != (y > 0.5))[~np.isnan(y)]), abs=1e-6)


@pytest.mark.parametrize(
    ("level", "min_rows", "word"), [(0.0, 100, "level"), (1.5, 100, "level"), (0.05, 0, "min_rows")]
)
def test_a_bad_level_or_minimum_is_refused_naming_it(
    window: Columns, schema: ModelSchema, profile: Profile, level: float, min_rows: int, word: str
) -> None:
    sample = _sample(window, schema, true_probability(window), None)
    with pytest.raises(ValueError, match=word):
        weak_slices(sample=sample, profile=profile, level=level, min_rows=min_rows)
