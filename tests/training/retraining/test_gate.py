"""The validation gate on synthetic numpy: a good candidate passes; each check fails the defect it targets."""

from __future__ import annotations

import math

import numpy as np
import pytest

from monitors.performance import roc_auc
from registry.schema import FeatureKind, FeatureSpec, ModelSchema, OutputSpec, Policy
from training.retraining.gate import (
    MIN_ROWS,
    GateCheck,
    GatePolicy,
    Holdout,
    Verdict,
    calibration,
    compare,
    evaluate,
    expected_calibration_error,
    input_contract,
    metric,
    outputs,
    slices,
)

N = 4000
POLICY = GatePolicy(
    metric="roc_auc",
    metric_tolerance=0.02,
    calibration_tolerance=0.02,
    slice_tolerance=0.05,
    slice_min_rows=100,
)


def _schema(*, income_max: float = 1e6, region_policy: Policy = Policy.FLAG) -> ModelSchema:
    return ModelSchema(
        features=(
            FeatureSpec(
                "income",
                FeatureKind.NUMERIC,
                "float64",
                nullable=True,
                observed_min=0.0,
                observed_max=income_max / 2,
                allowed_min=0.0,
                allowed_max=income_max,
            ),
            FeatureSpec(
                "region",
                FeatureKind.CATEGORICAL,
                "string",
                nullable=False,
                categories=("north", "south", "east"),
                policy=region_policy,
            ),
        ),
        outputs=(OutputSpec("probability"),),
        target="default",
    )


def _world(seed: int = 0) -> tuple[dict[str, np.ndarray], np.ndarray, np.ndarray]:
    """Holdout columns, labels and well-calibrated probabilities of a decent model (AUC ~0.8)."""
    rng = np.random.default_rng(seed)
    income = rng.lognormal(10.5, 0.5, N)
    income[rng.random(N) < 0.02] = np.nan
    region = rng.choice(
        np.array(["north", "south", "east", "west"], dtype=object), N, p=[0.4, 0.3, 0.285, 0.015]
    )
    logit = rng.normal(0.0, 1.6, N) - 1.0
    p = 1.0 / (1.0 + np.exp(-logit))
    y = (rng.random(N) < p).astype(np.float64)
    return {"income": income, "region": region}, y, p


def _noisy(p: np.ndarray, seed: int, scale: float = 0.15) -> np.ndarray:
    """Another decent model: the same scores, slightly perturbed on the logit scale."""
    logit = np.log(p / (1 - p)) + np.random.default_rng(seed).normal(0, scale, p.size)
    return 1.0 / (1.0 + np.exp(-logit))


def _check(result_checks: list[GateCheck], name: str) -> GateCheck:
    return next(c for c in result_checks if c.name == name)


def test_a_good_candidate_passes_every_check_with_its_figures() -> None:
    cols, y, p = _world()
    serving, candidate = _noisy(p, 1), _noisy(p, 2)
    result = evaluate(schema=_schema(), holdout=Holdout(cols, y, candidate, serving), policy=POLICY)
    assert result.passed, result.summary()
    assert [c.name for c in result.checks] == ["input_contract", "outputs", "metric", "calibration", "slices"]
    m = _check(result.checks, "metric")
    assert m.figures["metric"] == "roc_auc" and m.figures["tolerance"] == 0.02
    assert m.figures["candidate"] == pytest.approx(roc_auc(y_true=y, y_score=candidate), abs=1e-4)
    assert m.figures["serving"] == pytest.approx(roc_auc(y_true=y, y_score=serving), abs=1e-4)
    assert abs(m.figures["delta"]) < 0.02
    low, high = m.figures["bounds"]
    assert low < m.figures["delta"] < high and high - low < 0.02  # DeLong: paired, narrow at 4000 rows
    assert m.figures["confidence"] == 0.95 and m.figures["method"] == "delong"
    assert f"95% bounds {low:+.4f} to {high:+.4f}" in m.message
    cal = _check(result.checks, "calibration")
    assert cal.figures["method"] == "bootstrap" and cal.figures["verdict"] == "passed"
    assert cal.figures["bounds"][0] <= cal.figures["delta"] <= cal.figures["bounds"][1]
    contract = _check(result.checks, "input_contract")
    assert contract.figures["rejected"] == 0 and contract.figures["rows"] == N
    assert contract.figures["flagged"] > 0  # "west" is an unseen category: flagged, not rejected
    s = _check(result.checks, "slices")
    assert s.figures["slices"] == 3  # north, south, east; west has < 100 rows
    doc = result.as_dict()
    assert doc["passed"] is True and doc["verdict"] == "passed" and len(doc["checks"]) == 5
    assert {c["verdict"] for c in doc["checks"]} == {"passed"}
    assert result.summary().startswith("validation gate passed")


def test_a_shuffled_label_candidate_fails_the_metric() -> None:
    cols, y, p = _world()
    rng = np.random.default_rng(5)
    candidate = rng.permutation(p)  # what training on shuffled labels learns: scores unrelated to the rows
    result = evaluate(schema=_schema(), holdout=Holdout(cols, y, candidate, _noisy(p, 1)), policy=POLICY)
    assert not result.passed
    m = _check(result.checks, "metric")
    assert not m.passed
    assert 0.45 < m.figures["candidate"] < 0.55 and m.figures["serving"] > 0.75
    assert m.figures["delta"] < -0.2
    assert m.message.startswith(f"roc_auc {m.figures['candidate']:.4f} vs serving")
    assert "lower than serving by more than the tolerance 0.02 with 95% confidence" in m.message
    assert m.figures["bounds"][1] < -0.02 and result.verdict is Verdict.FAILED
    assert "metric: roc_auc" in result.summary()
    assert _check(result.checks, "input_contract").passed and _check(result.checks, "outputs").passed


def test_a_badly_calibrated_candidate_fails_calibration_though_it_ranks_as_well() -> None:
    cols, y, p = _world()
    squashed = 0.5 + (p - 0.5) * 0.3  # same order (same AUC), probabilities pulled towards 0.5
    result = evaluate(schema=_schema(), holdout=Holdout(cols, y, squashed, p), policy=POLICY)
    assert _check(result.checks, "metric").passed
    c = _check(result.checks, "calibration")
    assert not c.passed
    assert c.figures["metric"] == "ece" and c.figures["serving"] < 0.03 and c.figures["candidate"] > 0.1
    assert c.figures["delta"] == pytest.approx(c.figures["candidate"] - c.figures["serving"], abs=2e-4)
    assert c.figures["bounds"][0] > 0.02  # worse than the tolerance with 95 % confidence
    assert "higher than serving by more than the tolerance 0.02" in c.message
    assert [x.name for x in result.failed] == ["calibration"]


def test_a_regression_in_one_slice_fails_slices_naming_it() -> None:
    cols, y, p = _world()
    candidate = p.copy()
    south = cols["region"] == "south"
    candidate[south] = np.random.default_rng(3).permutation(p[south])  # useless for one region only
    result = evaluate(schema=_schema(), holdout=Holdout(cols, y, candidate, p), policy=POLICY)
    s = _check(result.checks, "slices")
    assert not s.passed
    assert [(f["feature"], f["value"]) for f in s.figures["failed"]] == [("region", "south")]
    worst = s.figures["worst"][0]
    assert worst["value"] == "south" and worst["rows"] == int(south.sum()) and worst["delta"] < -0.2
    assert "region=south roc_auc" in s.message
    assert worst["bounds"][1] < -0.05 and worst["verdict"] == "failed"
    assert s.figures["confidence"] == pytest.approx(1 - 0.05 / 3)  # Bonferroni over the 3 slices
    assert s.figures["too_small"] == 1  # west
    # the same slices with a minimum above their size are not judged
    lenient = slices(
        schema=_schema(),
        columns=cols,
        labels=y,
        candidate=candidate,
        serving=p,
        name="roc_auc",
        tolerance=0.05,
        min_rows=N,
    )
    assert lenient.passed and lenient.figures["slices"] == 0


def test_a_one_class_slice_is_judged_by_accuracy() -> None:
    cols = {"income": np.full(300, 1000.0), "region": np.array(["north"] * 300, dtype=object)}
    y = np.zeros(300)
    serving = np.full(300, 0.1)
    candidate = np.full(300, 0.9)  # every row wrong at threshold 0.5
    check = slices(
        schema=_schema(),
        columns=cols,
        labels=y,
        candidate=candidate,
        serving=serving,
        name="roc_auc",
        tolerance=0.05,
        min_rows=100,
    )
    assert not check.passed
    assert check.figures["failed"][0] == {
        "feature": "region",
        "value": "north",
        "rows": 300,
        "metric": "accuracy",
        "candidate": 0.0,
        "serving": 1.0,
        "delta": -1.0,
        "bounds": [-1.0, -1.0],
        "verdict": "failed",
    }


def test_a_contract_that_rejects_recent_traffic_fails_input_contract() -> None:
    cols, y, p = _world()
    narrow = _schema(income_max=40_000.0)  # recent incomes go beyond the candidate's allowed maximum
    check = input_contract(narrow, cols)
    assert not check.passed
    over = int(np.sum(cols["income"] > 40_000.0))
    assert check.figures["rejected"] == over and over > 100
    assert check.figures["rejected_share"] == pytest.approx(over / N, abs=1e-4)
    assert len(check.figures["first_violations"]) == 5
    assert "feature 'income': value" in check.figures["first_violations"][0]
    assert "(rule: allowed_range)" in check.figures["first_violations"][0]
    assert f"rejects {over} of {N} recent rows" in check.message
    strict = input_contract(_schema(region_policy=Policy.REJECT), cols)  # unseen "west" now rejects
    assert not strict.passed and strict.figures["rejected"] == int(np.sum(cols["region"] == "west"))
    result = evaluate(schema=narrow, holdout=Holdout(cols, y, p, p), policy=POLICY)
    assert [c.name for c in result.failed] == ["input_contract"]


def test_outputs_outside_the_contract_fail() -> None:
    p = np.array([0.1, 0.5, np.nan, 1.2, 0.9])
    check = outputs(OutputSpec("probability"), p)
    assert not check.passed
    assert check.figures["violations"] == 2 and check.figures["non_finite"] == 1
    assert any("not finite" in v for v in check.figures["first_violations"])
    assert any("outside [0, 1]" in v for v in check.figures["first_violations"])
    assert outputs(OutputSpec("probability"), np.array([0.0, 1.0, 0.3])).passed


def test_with_nothing_serving_only_the_contract_checks_decide() -> None:
    cols, y, p = _world()
    rng = np.random.default_rng(1)
    result = evaluate(schema=_schema(), holdout=Holdout(cols, y, rng.permutation(p), None), policy=POLICY)
    assert result.passed
    for name in ("metric", "calibration", "slices"):
        check = _check(result.checks, name)
        assert check.passed and "no serving version to compare with" in check.message
        assert check.verdict is Verdict.PASSED
        assert check.figures["serving"] is None if name != "slices" else check.figures["worst"] == []
    broken = evaluate(schema=_schema(income_max=40_000.0), holdout=Holdout(cols, y, p, None), policy=POLICY)
    assert [c.name for c in broken.failed] == ["input_contract"]


def test_expected_calibration_error_by_hand() -> None:
    # bin [0.1, 0.2): 10 rows at p 0.15, 5 of them positive: y - p is 0.85 five times and -0.15 five times,
    # gap 0.35, sample variance 2.5 / 9, the mean's variance 2.5 / 90 -> sqrt(0.35^2 - 2.5 / 90)
    # bin [0.9, 1.0]: 10 rows at p 0.95, all positive: y - p is 0.05 each, no variance -> 0.05
    y = np.array([1.0] * 5 + [0.0] * 5 + [1.0] * 10)
    p = np.array([0.15] * 10 + [0.95] * 10)
    low_bin = math.sqrt(0.35**2 - 2.5 / 90)
    assert expected_calibration_error(y, p) == pytest.approx(0.5 * low_bin + 0.5 * 0.05)
    # a gap smaller than its own noise counts as none: 2 rows at p 0.15, one positive (gap 0.35, var 0.25)
    assert expected_calibration_error(np.array([0.0, 1.0]), np.array([0.15, 0.15])) == 0.0
    assert expected_calibration_error(np.array([1.0, 0.0]), np.array([1.0, 0.0])) == 0.0
    assert math.isnan(expected_calibration_error(np.array([]), np.array([])))
    # on many rows the debiasing vanishes: the plain ECE of a model miscalibrated by 0.1 everywhere
    rng = np.random.default_rng(0)
    q = rng.uniform(0.2, 0.7, 200_000)
    truth = (rng.random(q.size) < q + 0.1).astype(np.float64)
    assert expected_calibration_error(truth, q) == pytest.approx(0.1, abs=0.003)


def test_the_interval_decides_against_the_tolerance() -> None:
    cols, y, p = _world()
    serving = _noisy(p, 1)
    lower = _noisy(p, 4, scale=1.0)  # ranks worse than serving
    c = compare(statistic="roc_auc", labels=y, candidate=lower, serving=serving, tolerance=0.0, policy=POLICY)
    assert c.diff.high < 0 and c.verdict is Verdict.FAILED  # confidently lower
    assert c.diff.half_width < -c.diff.estimate
    # a tolerance beyond the interval's far end: not worse by more than that
    far = -c.diff.low + 0.001
    assert (
        compare(
            statistic="roc_auc", labels=y, candidate=lower, serving=serving, tolerance=far, policy=POLICY
        ).verdict
        is Verdict.PASSED
    )
    # a tolerance just inside the interval's near end: confidently worse by more than that
    near = -c.diff.high - 0.001
    assert (
        compare(
            statistic="roc_auc", labels=y, candidate=lower, serving=serving, tolerance=near, policy=POLICY
        ).verdict
        is Verdict.FAILED
    )
    # the interval straddles a tolerance at least its half-width: passed (not confidently worse by more)
    mid = -c.diff.estimate
    assert c.diff.half_width <= mid
    assert (
        compare(
            statistic="roc_auc", labels=y, candidate=lower, serving=serving, tolerance=mid, policy=POLICY
        ).verdict
        is Verdict.PASSED
    )
    equal = compare(statistic="ece", labels=y, candidate=p, serving=p, tolerance=0.0, policy=POLICY)
    assert equal.diff.low == equal.diff.high == 0.0 and equal.verdict is Verdict.PASSED


def test_an_interval_straddling_a_tolerance_it_is_wider_than_is_undecided() -> None:
    cols, y, p = _world()
    n = 300  # ECE at 300 rows moves by a few hundredths
    serving = p[:n]
    worse = np.clip(p[:n] + 0.03, 0, 1)  # miscalibrated by about the tolerance
    c = compare(
        statistic="ece", labels=y[:n], candidate=worse, serving=serving, tolerance=0.02, policy=POLICY
    )
    assert c.diff.low < 0.02 < c.diff.high and c.diff.half_width > 0.02
    assert c.verdict is Verdict.UNDECIDED and c.rows_needed is not None and c.rows_needed > n
    check = calibration(labels=y[:n], candidate=worse, serving=serving, tolerance=0.02, policy=POLICY)
    assert check.verdict is Verdict.UNDECIDED and not check.passed
    needed = check.figures["rows_needed"]
    assert (
        needed > n
        and "undecided: the bounds (+-" in check.message
        and f"about {needed} would" in check.message
    )
    result = evaluate(
        schema=_schema(),
        holdout=Holdout({k: v[:n] for k, v in cols.items()}, y[:n], worse, serving),
        policy=POLICY,
    )
    assert result.verdict is Verdict.UNDECIDED and result.failed == [] and not result.passed
    assert result.summary().startswith("validation gate undecided: calibration: undecided")
    assert result.as_dict()["verdict"] == "undecided"


def test_too_few_rows_or_too_few_of_a_class_is_undecided_not_passed_or_failed() -> None:
    y = np.array([0, 0, 1, 1, 0, 1, 0, 1], dtype=float)
    serving = np.array([0.1, 0.2, 0.8, 0.9, 0.3, 0.7, 0.4, 0.6])  # AUC 1.0
    candidate = np.array([0.9, 0.8, 0.2, 0.1, 0.7, 0.3, 0.6, 0.4])  # AUC 0.0
    m = metric(name="roc_auc", labels=y, candidate=candidate, serving=serving, tolerance=0.02)
    assert m.verdict is Verdict.UNDECIDED
    assert f"8 holdout rows, fewer than the {MIN_ROWS['metric']} this check needs" in m.message
    assert m.figures["delta"] == -1.0
    rng = np.random.default_rng(0)
    scores = rng.random(1000)
    few = np.zeros(1000)
    few[:5] = 1  # 5 positives: ROC AUC's interval means nothing
    rare = metric(name="roc_auc", labels=few, candidate=scores, serving=scores[::-1].copy(), tolerance=0.02)
    assert rare.verdict is Verdict.UNDECIDED and "5 positive and 995 negative" in rare.message
    cal = calibration(labels=y, candidate=candidate, serving=serving, tolerance=0.02)
    assert cal.verdict is Verdict.UNDECIDED


def test_a_slice_the_holdout_cannot_decide_is_listed_not_judged() -> None:
    cols, y, p = _world()
    candidate = p.copy()
    west = np.flatnonzero(cols["region"] == "west")
    assert 50 <= west.size < 100
    right = west[(p[west] >= 0.5) == (y[west] > 0.5)][:3]
    candidate[right] = np.where(y[right] > 0.5, 0.1, 0.9)  # 3 of ~60 rows now wrong: accuracy -0.05
    check = slices(
        schema=_schema(),
        columns=cols,
        labels=y,
        candidate=candidate,
        serving=p,
        name="accuracy",
        tolerance=0.05,
        min_rows=50,
    )
    undecided = check.figures["undecided"]
    assert [(s["feature"], s["value"]) for s in undecided] == [("region", "west")]
    assert undecided[0]["bounds"][0] < -0.05 < undecided[0]["bounds"][1]
    assert check.figures["failed"] == [] and check.figures["slices"] == 4
    assert check.verdict is Verdict.PASSED
    assert "3 of 4 slice(s) judged" in check.message
    assert "1 too few rows to decide, not judged: region=west" in check.message
