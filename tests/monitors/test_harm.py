"""Harmful drift (monitors/harm.py): realised preferred to the estimate when labels suffice, the estimate
named, a drop within the tolerance harmless and one beyond it harmful, the run's level deciding near the
limit, and the stated rule of a profile without spread (pure, on profiles built from seeded data)."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from monitors.config import MonitorConfig
from monitors.engine import compare
from monitors.harm import NO_SPREAD_MARGIN, RELATIVE_TOLERANCE, TOLERANCE, assess
from monitors.horizon import performance_z, run_alpha, sd_allowance
from monitors.profile import Profile, build_reference_profile, metric_sd, profile_from_dict
from monitors.report import DriftReport, report_from_dict
from registry.schema import Task, infer_schema

ROWS = 8_000
EVERY_5_MIN = run_alpha(alpha=0.05, budget=0.5, every_s=300.0)


def binary_rows(n: int, *, seed: int) -> dict[str, np.ndarray]:
    """Two numbers and a colour, a calibrated probability ``score`` that uses ``a`` and ``color``, labels."""
    rng = np.random.default_rng(seed)
    a, b = rng.normal(size=n), rng.normal(size=n)
    color = rng.choice(np.array(["red", "green", "blue"], dtype=object), n)
    score = 1.0 / (1.0 + np.exp(-(1.5 * a + 0.8 * (color == "red") - 0.3)))
    return {"a": a, "b": b, "color": color, "score": score, "y": (rng.random(n) < score).astype(np.int64)}


def regression_rows(n: int, *, seed: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    a, b = rng.normal(size=n), rng.normal(size=n)
    value = 2.0 * a + 1.0
    return {"a": a, "b": b, "value": value, "y": value + rng.normal(scale=1.0, size=n)}


FEATURES = ("a", "b", "color")


@pytest.fixture(scope="module")
def binary() -> Profile:
    data = binary_rows(ROWS, seed=0)
    columns = {name: data[name] for name in FEATURES}
    schema = infer_schema({**columns, "y": data["y"]}, target="y")
    return profile_from_dict(
        build_reference_profile(columns, schema, predictions=data["score"], labels=data["y"])
    )


def window(
    profile: Profile, *, seed: int, labelled: int | None, flip: float = 0.0, n: int = 5_000
) -> DriftReport:
    """A one-off comparison of fresh rows; ``labelled`` rows keep their label (None: all), ``flip`` of the
    labels flipped."""
    data = binary_rows(n, seed=seed)
    y = data["y"].astype(np.float64)
    rng = np.random.default_rng(seed + 1)
    flipped = rng.random(n) < flip
    y[flipped] = 1.0 - y[flipped]
    if labelled is not None:
        y[labelled:] = np.nan
    columns = {name: data[name] for name in FEATURES}
    return compare(profile=profile, columns=columns, predictions=data["score"], labels=y)


def with_auc(report: DriftReport, auc: float, *, rows: int) -> DriftReport:
    """The report with a realised ROC AUC of ``auc`` on ``rows`` labelled rows."""
    return replace(report, performance={**(report.performance or {}), "roc_auc": auc, "rows": float(rows)})


def half_width(profile: Profile, *, rows: int, level: float) -> float:
    spread = profile.performance_spread
    assert spread is not None
    sd = metric_sd(spread, "roc_auc", rows=rows)
    assert sd is not None
    return performance_z(level) * sd * sd_allowance(int(spread["chunks"]))


def test_every_report_has_harm_in_the_agreed_shape_and_it_round_trips(binary: Profile) -> None:
    report = window(binary, seed=1, labelled=None)
    harm = report.harm
    assert harm is not None
    assert set(harm) == {
        "estimate", "metric", "value", "reference", "change", "tolerance", "limit", "lower", "upper",
        "level", "rows", "harmful", "message",
    }  # fmt: skip
    assert (harm["estimate"], harm["metric"], harm["level"], harm["harmful"]) == (
        "realised",
        "roc_auc",
        0.05,
        False,
    )
    assert harm["limit"] == pytest.approx(harm["reference"] - TOLERANCE)
    assert harm["lower"] < harm["value"] < harm["upper"]
    assert report_from_dict(report.as_dict()).harm == report.as_dict()["harm"]


def test_realised_is_judged_when_labels_suffice_else_the_named_estimate(binary: Profile) -> None:
    config = MonitorConfig()
    assert config.harm_min_labels == 500
    realised = window(binary, seed=2, labelled=2_000)
    assert realised.harm is not None and realised.harm["estimate"] == "realised"
    assert realised.harm["rows"] == 2_000
    few = window(binary, seed=2, labelled=200)  # realised figures exist, on too few rows
    assert few.performance is not None and few.performance["rows"] == 200
    assert few.harm is not None and few.harm["estimate"] == "cbpe"
    assert few.estimated_performance is not None
    assert few.harm["rows"] == 5_000 and few.harm["value"] == few.estimated_performance["roc_auc"]
    assert "estimated (CBPE) roc_auc" in few.harm["message"]
    none = window(binary, seed=2, labelled=0)
    assert none.harm is not None and none.harm["estimate"] == "cbpe"
    lower = assess(few, profile=binary, config=MonitorConfig(harm_min_labels=100), level=0.05)
    assert lower is not None and lower["estimate"] == "realised"


def test_a_drop_within_the_tolerance_is_not_harmful_and_one_beyond_it_is(binary: Profile) -> None:
    base = window(binary, seed=3, labelled=None)
    reference = binary.performance["roc_auc"] if binary.performance else None
    assert reference is not None
    width = half_width(binary, rows=5_000, level=0.05)
    config = MonitorConfig()
    inside = assess(
        with_auc(base, reference - TOLERANCE + width / 2, rows=5_000),
        profile=binary,
        config=config,
        level=0.05,
    )
    assert inside is not None and inside["harmful"] is False and "not harmful" in inside["message"]
    beyond = reference - TOLERANCE - 2 * width
    found = assess(with_auc(base, beyond, rows=5_000), profile=binary, config=config, level=0.05)
    assert found is not None and found["harmful"] is True
    assert found["upper"] == pytest.approx(beyond + width) and found["upper"] < found["limit"]
    assert found["change"] == pytest.approx(beyond - reference)
    # a larger tolerance makes the same drop harmless
    loose = assess(
        with_auc(base, beyond, rows=5_000),
        profile=binary,
        config=MonitorConfig(harm_tolerance=0.2),
        level=0.05,
    )
    assert loose is not None and loose["harmful"] is False and loose["tolerance"] == 0.2


def test_flipped_labels_are_harmful_and_a_feature_shift_the_model_ignores_is_not(binary: Profile) -> None:
    flipped = window(binary, seed=4, labelled=None, flip=0.25)
    assert flipped.harm is not None and flipped.harm["harmful"] is True
    data = binary_rows(5_000, seed=5)
    columns = {name: data[name] for name in FEATURES}
    columns["b"] = columns["b"] + 1.0  # the model's score does not use b
    report = compare(profile=binary, columns=columns, predictions=data["score"], labels=data["y"])
    assert any(f.name == "b" and f.drifted for f in report.features)
    assert report.harm is not None and report.harm["harmful"] is False


def test_a_five_minute_schedule_needs_a_larger_drop_than_a_one_off_comparison(binary: Profile) -> None:
    base = window(binary, seed=6, labelled=None)
    reference = binary.performance["roc_auc"] if binary.performance else 0.0
    one_off, scheduled = (
        half_width(binary, rows=5_000, level=0.05),
        half_width(binary, rows=5_000, level=EVERY_5_MIN),
    )
    assert scheduled > one_off
    value = reference - TOLERANCE - (one_off + scheduled) / 2  # between the two bounds
    report = with_auc(base, value, rows=5_000)
    at_once = assess(report, profile=binary, config=MonitorConfig(), level=0.05)
    every_5 = assess(report, profile=binary, config=MonitorConfig(), level=EVERY_5_MIN)
    assert at_once is not None and every_5 is not None
    assert (at_once["harmful"], every_5["harmful"]) == (True, False)
    assert every_5["level"] == EVERY_5_MIN and every_5["upper"] > at_once["upper"]
    # the engine passes the schedule's level
    data = binary_rows(5_000, seed=7)
    from monitors.engine import evaluate, sketch_columns

    sketch = sketch_columns(
        profile=binary, columns={n: data[n] for n in FEATURES}, predictions=data["score"], labels=data["y"]
    )
    run = evaluate(profile=binary, sketch=sketch, every_s=300.0)
    assert run.harm is not None and run.harm["level"] == pytest.approx(EVERY_5_MIN)


def test_without_spread_the_value_meets_a_widened_limit(binary: Profile) -> None:
    bare = replace(binary, performance_spread=None)
    base = window(binary, seed=8, labelled=None)
    reference = binary.performance["roc_auc"] if binary.performance else 0.0
    config = MonitorConfig()
    small = assess(
        with_auc(base, reference - TOLERANCE - 0.03, rows=5_000), profile=bare, config=config, level=0.05
    )
    assert small is not None and small["harmful"] is False
    assert small["limit"] == pytest.approx(reference - TOLERANCE - NO_SPREAD_MARGIN)
    assert small["lower"] == small["upper"] == small["value"]
    assert "no spread in the profile" in small["message"]
    large = assess(
        with_auc(base, reference - TOLERANCE - 0.06, rows=5_000), profile=bare, config=config, level=0.05
    )
    assert large is not None and large["harmful"] is True


def test_a_regression_is_judged_on_rmse_relative_to_the_reference_and_the_estimate_is_dle() -> None:
    data = regression_rows(ROWS, seed=10)
    columns = {"a": data["a"], "b": data["b"]}
    schema = infer_schema({**columns, "y": data["y"]}, target="y", task=Task.REGRESSION)
    profile = profile_from_dict(
        build_reference_profile(columns, schema, predictions=data["value"], labels=data["y"])
    )
    fresh = regression_rows(5_000, seed=11)
    cols = {"a": fresh["a"], "b": fresh["b"]}
    clean = compare(profile=profile, columns=cols, predictions=fresh["value"], labels=fresh["y"])
    assert clean.harm is not None and (clean.harm["estimate"], clean.harm["metric"]) == ("realised", "rmse")
    assert clean.harm["harmful"] is False
    assert clean.harm["limit"] == pytest.approx(clean.harm["reference"] * (1 + RELATIVE_TOLERANCE))
    worse = compare(
        profile=profile,
        columns=cols,
        predictions=fresh["value"],
        labels=fresh["y"] + np.random.default_rng(12).normal(scale=1.0, size=5_000),
    )
    assert (
        worse.harm is not None and worse.harm["harmful"] is True and worse.harm["lower"] > worse.harm["limit"]
    )
    unlabelled = compare(profile=profile, columns=cols, predictions=fresh["value"])
    assert unlabelled.harm is not None and unlabelled.harm["estimate"] == "dle"
    assert "estimated (DLE) rmse" in unlabelled.harm["message"]


def test_no_figure_no_harm(binary: Profile) -> None:
    report = window(binary, seed=13, labelled=None)
    bare = replace(report, performance=None, estimated_performance=None)
    assert assess(bare, profile=binary, config=MonitorConfig(), level=0.05) is None
    no_reference = replace(report, reference_performance=None)
    assert assess(no_reference, profile=binary, config=MonitorConfig(), level=0.05) is None


def multiclass_rows(n: int, *, seed: int) -> tuple[dict[str, np.ndarray], np.ndarray, np.ndarray]:
    """Two numbers, the probabilities of three classes (a softmax of ``a``) and class-index labels drawn
    from them."""
    rng = np.random.default_rng(seed)
    a, b = rng.normal(size=n), rng.normal(size=n)
    logits = np.stack([2.0 * a, np.zeros(n), -2.0 * a], axis=1)
    p = np.exp(logits) / np.exp(logits).sum(axis=1, keepdims=True)
    y = (rng.random(n)[:, None] > np.cumsum(p, axis=1)).sum(axis=1).astype(np.float64)
    return {"a": a, "b": b}, p, y


def test_a_multiclass_model_is_judged_on_macro_f1_realised_or_estimated() -> None:
    columns, p, y = multiclass_rows(ROWS, seed=20)
    classes = ("c0", "c1", "c2")
    target = np.array(classes, dtype=object)[y.astype(int)]
    schema = infer_schema({**columns, "y": target}, target="y", task=Task.MULTICLASS, classes=classes)
    profile = profile_from_dict(build_reference_profile(columns, schema, predictions=p, labels=y))
    fresh, q, labels = multiclass_rows(5_000, seed=21)
    clean = compare(profile=profile, columns=fresh, predictions=q, labels=labels)
    assert clean.harm is not None and (clean.harm["estimate"], clean.harm["metric"]) == (
        "realised",
        "macro_f1",
    )
    assert clean.harm["harmful"] is False
    moved = np.where(np.random.default_rng(22).random(5_000) < 0.3, (labels + 1) % 3, labels)
    hurt = compare(profile=profile, columns=fresh, predictions=q, labels=moved)
    assert hurt.harm is not None and hurt.harm["harmful"] is True and hurt.harm["upper"] < hurt.harm["limit"]
    unlabelled = compare(profile=profile, columns=fresh, predictions=q)
    assert unlabelled.harm is not None and unlabelled.harm["estimate"] == "cbpe"
    assert unlabelled.harm["metric"] == "macro_f1" and unlabelled.harm["harmful"] is False
