"""The validation gate per task on synthetic numpy: multi-class (macro F1, per-class calibration, outputs
summing to 1) and regression (RMSE, lower is better, with a relative tolerance; no calibration)."""

from __future__ import annotations

import numpy as np
import pytest

from registry.schema import FeatureKind, FeatureSpec, ModelSchema, OutputSpec, Policy, Task
from training.retraining.comparison import (
    bootstrap,
    bootstrap_classes,
    class_calibration_errors,
    one_vs_rest,
    value,
    weighted_accuracy,
    weighted_class_ece,
    weighted_ece,
    weighted_macro_f1,
    weighted_mae,
    weighted_rmse,
)
from training.retraining.gate import (
    MIN_ROWS,
    GateCheck,
    GatePolicy,
    GateResult,
    Holdout,
    Verdict,
    calibration,
    evaluate,
    metric,
    outputs,
    slices,
    task_metric,
)

N = 3000
CLASSES = ("alpha", "beta", "gamma")
POLICY = GatePolicy()  # the shipped defaults: metric roc_auc (the task's default), tolerances 0.02 / 0.05
REGIONS = np.array(["north", "south", "east"], dtype=object)


def _features() -> tuple[FeatureSpec, ...]:
    return (
        FeatureSpec("x", FeatureKind.NUMERIC, "float64", nullable=True),
        FeatureSpec(
            "region",
            FeatureKind.CATEGORICAL,
            "string",
            nullable=False,
            categories=tuple(REGIONS.tolist()),
            policy=Policy.FLAG,
        ),
    )


def _multiclass_schema() -> ModelSchema:
    return ModelSchema(
        features=_features(),
        outputs=(OutputSpec.for_task(Task.MULTICLASS, classes=len(CLASSES)),),
        target="y",
        task=Task.MULTICLASS.value,
        classes=CLASSES,
    )


def _regression_schema() -> ModelSchema:
    return ModelSchema(
        features=_features(),
        outputs=(OutputSpec.for_task(Task.REGRESSION, expected=(-6.0, 6.0)),),
        target="y",
        task=Task.REGRESSION.value,
    )


def _check(result: GateResult, name: str) -> GateCheck:
    return next(c for c in result.checks if c.name == name)


def _softmax(z: np.ndarray) -> np.ndarray:
    e = np.exp(z - z.max(axis=1, keepdims=True))
    return e / e.sum(axis=1, keepdims=True)


def _multiclass_world(seed: int = 0, n: int = N) -> tuple[dict[str, np.ndarray], np.ndarray, np.ndarray]:
    """Columns, class-index labels and the well-calibrated probabilities of a decent 3-class model."""
    rng = np.random.default_rng(seed)
    x = rng.normal(size=n)
    region = rng.choice(REGIONS, n)
    p = _softmax(rng.normal(0.0, 1.8, size=(n, len(CLASSES))))
    u = rng.random(n)[:, None]
    y = (u > np.cumsum(p, axis=1)).sum(axis=1).clip(0, len(CLASSES) - 1).astype(np.float64)
    return {"x": x, "region": region}, y, p


def _blurred(p: np.ndarray, seed: int, share: float) -> np.ndarray:
    """A weaker model: the probabilities of ``share`` of the rows replaced by another row's."""
    rng = np.random.default_rng(seed)
    out = p.copy()
    rows = rng.random(p.shape[0]) < share
    out[rows] = p[rng.permutation(np.flatnonzero(rows))]
    return out


def _regression_world(seed: int = 0, n: int = N) -> tuple[dict[str, np.ndarray], np.ndarray, np.ndarray]:
    """Columns, numeric labels and the predictions of a model with RMSE ~1 (the label's noise)."""
    rng = np.random.default_rng(seed)
    x = rng.normal(size=n)
    region = rng.choice(REGIONS, n)
    pred = 2.0 * x
    y = pred + rng.normal(0.0, 1.0, n)
    return {"x": x, "region": region}, y, pred


# --- comparison.py: the statistics of the new tasks -------------------------------------------------------


def test_the_weighted_statistics_of_the_new_tasks_match_their_definitions() -> None:
    y = np.array([0.0, 1.0, 2.0, 2.0, 1.0])
    p = np.array([[0.8, 0.1, 0.1], [0.2, 0.7, 0.1], [0.1, 0.1, 0.8], [0.5, 0.3, 0.2], [0.1, 0.2, 0.7]])
    ones = np.ones((1, y.size))
    assert weighted_accuracy(ones, y, p)[0] == pytest.approx(3 / 5)
    # argmax [0, 1, 2, 0, 2]; per class F1 = 2 tp / (2 tp + fp + fn): 0: 2/3, 1: 2/3, 2: 2/4
    assert weighted_macro_f1(ones, y, p)[0] == pytest.approx((2 / 3 + 2 / 3 + 1 / 2) / 3)
    # a class neither labelled nor predicted has no F1 and is not averaged in
    p4 = np.hstack([p, np.zeros((5, 1))])
    assert weighted_macro_f1(ones, y, p4)[0] == pytest.approx(weighted_macro_f1(ones, y, p)[0])
    t, v = np.array([1.0, 2.0, 3.0]), np.array([1.0, 4.0, 2.0])
    assert weighted_rmse(np.ones((1, 3)), t, v)[0] == pytest.approx(np.sqrt(5 / 3))
    assert weighted_mae(np.ones((1, 3)), t, v)[0] == pytest.approx(1.0)
    # weights count rows: the second row twice
    w = np.array([[1.0, 2.0, 0.0]])
    assert weighted_mae(w, t, v)[0] == pytest.approx(4 / 3)
    assert value("rmse", t, v) == pytest.approx(np.sqrt(5 / 3))
    errors = class_calibration_errors(y, p)
    assert errors.shape == (3,) and np.all(errors >= 0)


def test_per_class_ece_is_the_one_vs_rest_ece_of_each_class() -> None:
    cols, y, p = _multiclass_world(n=500)
    w = np.random.default_rng(2).integers(0, 3, size=(4, 500)).astype(np.float64)
    together = weighted_class_ece(w, y, p)
    for k in range(len(CLASSES)):
        assert together[:, k] == pytest.approx(weighted_ece(w, *one_vs_rest(y, p, k)), abs=1e-12)
    # the same bounds as the one-vs-rest bootstrap of a class, on shared replicates
    worse = _blurred(p, seed=1, share=0.3)
    diffs = bootstrap_classes(labels=y, candidate=worse, serving=p, confidence=0.95, reps=200, seed=4)
    alone = bootstrap(
        statistic="ece",
        labels=one_vs_rest(y, p, 1)[0],
        candidate=worse[:, 1],
        serving=p[:, 1],
        confidence=0.95,
        reps=200,
        seed=4,
    )
    assert (diffs[1].candidate, diffs[1].serving) == pytest.approx((alone.candidate, alone.serving))
    assert (diffs[1].low, diffs[1].high) == pytest.approx((alone.low, alone.high))


def test_the_task_decides_the_metric() -> None:
    assert task_metric(Task.BINARY, "roc_auc") == "roc_auc"
    assert task_metric(Task.BINARY, "f1") == "f1"
    assert task_metric(Task.MULTICLASS, "roc_auc") == "macro_f1"  # the binary default stands for the task's
    assert task_metric(Task.MULTICLASS, "accuracy") == "accuracy"
    assert task_metric(Task.MULTICLASS, "f1") is None
    assert task_metric(Task.REGRESSION, "roc_auc") == "rmse"
    assert task_metric(Task.REGRESSION, "mae") == "mae"
    assert task_metric(Task.REGRESSION, "accuracy") is None


# --- multi-class -------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("case", "verdict"),
    [("better", Verdict.PASSED), ("equal", Verdict.PASSED), ("worse", Verdict.FAILED)],
)
def test_multiclass_metric_is_macro_f1_in_the_right_direction(case: str, verdict: Verdict) -> None:
    cols, y, p = _multiclass_world()
    weak = _blurred(p, seed=5, share=0.6)
    candidate, serving = {"better": (p, weak), "equal": (p, p.copy()), "worse": (weak, p)}[case]
    result = evaluate(
        schema=_multiclass_schema(), holdout=Holdout(cols, y, candidate, serving), policy=POLICY
    )
    m = _check(result, "metric")
    assert m.figures["metric"] == "macro_f1" and m.figures["method"] == "bootstrap"
    assert m.verdict is verdict, m.message
    if case == "worse":
        assert m.figures["bounds"][1] < -0.02
        assert "macro_f1" in m.message and "lower than serving by more than the tolerance 0.02" in m.message
    if case == "better":
        assert m.figures["delta"] > 0.1
    assert _check(result, "outputs").passed
    # the equal candidate passes every check
    if case == "equal":
        assert result.passed, result.summary()


def test_multiclass_accuracy_when_configured_and_an_unfit_metric_is_undecided() -> None:
    cols, y, p = _multiclass_world()
    acc = metric(
        name="accuracy", labels=y, candidate=p, serving=p, tolerance=0.02, policy=POLICY, task=Task.MULTICLASS
    )
    assert acc.passed and acc.figures["metric"] == "accuracy"
    assert acc.figures["candidate"] == pytest.approx(np.mean(np.argmax(p, axis=1) == y), abs=1e-4)
    unfit = metric(name="f1", labels=y, candidate=p, serving=p, tolerance=0.02, task=Task.MULTICLASS)
    assert unfit.verdict is Verdict.UNDECIDED
    assert "'f1'" in unfit.message and "does not fit a multiclass model" in unfit.message
    assert "macro_f1 or accuracy" in unfit.message


def test_multiclass_needs_rows_per_class() -> None:
    cols, y, p = _multiclass_world(n=150)
    m = metric(name="roc_auc", labels=y, candidate=p, serving=p, tolerance=0.02, task=Task.MULTICLASS)
    assert m.verdict is Verdict.UNDECIDED
    assert f"150 holdout rows, fewer than the {MIN_ROWS['metric']} this check needs" in m.message
    assert m.figures["rows_needed"] == 200
    ten = np.hstack([p, np.zeros((150, 7))])  # 10 classes: 20 rows a class
    m10 = metric(name="roc_auc", labels=y, candidate=ten, serving=ten, tolerance=0.02, task=Task.MULTICLASS)
    assert m10.figures["rows_needed"] == 200 and "(20 a class, 10 classes)" in m10.message


def test_multiclass_outputs_must_sum_to_one() -> None:
    cols, y, p = _multiclass_world()
    bad = p.copy()
    rows = np.flatnonzero(p.max(axis=1) < 0.9)[:8]
    bad[rows[:7]] *= 1.1  # seven rows sum to 1.1, each value still in [0, 1]
    bad[rows[7], 0] = np.nan
    spec = _multiclass_schema().output
    check = outputs(spec, bad)
    assert check.verdict is Verdict.FAILED
    assert check.figures["violations"] == 8 and check.figures["sum_off"] == 7
    assert check.figures["non_finite"] == 1
    assert "(rule: output_sum)" in check.figures["first_violations"][0]
    assert "8 of 3000 output rows broke the output contract" in check.message
    assert outputs(spec, p).passed
    wrong_width = outputs(spec, p[:, :2])
    assert wrong_width.verdict is Verdict.FAILED and "[rows, 3]" in wrong_width.message
    result = evaluate(schema=_multiclass_schema(), holdout=Holdout(cols, y, bad, p), policy=POLICY)
    assert "outputs" in [c.name for c in result.failed]


def test_per_class_calibration_catches_one_miscalibrated_class() -> None:
    cols, y, p = _multiclass_world(n=6000)
    over = p.copy()
    over[:, 2] = p[:, 2] + 0.2 * (1.0 - p[:, 2])  # overconfident in gamma
    over[:, :2] *= ((1.0 - over[:, 2]) / (1.0 - p[:, 2]))[:, None]  # still sums to 1
    errors = class_calibration_errors(y, over)
    assert errors[2] > 0.1 and errors[2] > 1.5 * max(errors[0], errors[1])
    check = calibration(
        labels=y, candidate=over, serving=p, tolerance=0.02, task=Task.MULTICLASS, classes=CLASSES
    )
    assert check.verdict is Verdict.FAILED, check.message
    assert check.figures["class"] == "gamma" and check.figures["per_class"] is True
    assert check.figures["confidence"] == pytest.approx(1 - 0.05 / 3)  # Bonferroni over the classes
    assert [c["class"] for c in check.figures["classes"]] == list(CLASSES)
    assert check.figures["classes"][2]["verdict"] == "failed"
    assert check.message.startswith("class 'gamma' (one-vs-rest; the worst of 3 classes at 98.33% each)")
    fine = calibration(labels=y, candidate=p, serving=p.copy(), tolerance=0.02, task=Task.MULTICLASS)
    assert fine.passed and fine.figures["delta"] == 0.0
    nothing = calibration(labels=y, candidate=p, serving=None, tolerance=0.02, task=Task.MULTICLASS)
    assert nothing.passed and "no serving version" in nothing.message


def test_multiclass_slices_fall_back_to_accuracy_with_few_rows_of_a_class() -> None:
    cols, y, p = _multiclass_world()
    rare = y.copy()
    rare[(cols["region"] == "east") & (y == 1)] = 0.0  # east holds no "beta"
    check = slices(
        schema=_multiclass_schema(),
        columns=cols,
        labels=rare,
        candidate=p,
        serving=p.copy(),
        name="roc_auc",
        tolerance=0.05,
        min_rows=100,
    )
    assert check.passed
    by_value = {s["value"]: s["metric"] for s in check.figures["worst"]}
    assert by_value == {"east": "accuracy", "north": "macro_f1", "south": "macro_f1"}


def test_classes_changed_since_the_serving_version_are_undecided_not_a_crash() -> None:
    cols, y, p = _multiclass_world()
    four = np.hstack([p * 0.9, np.full((N, 1), 0.1)])
    result = evaluate(schema=_multiclass_schema(), holdout=Holdout(cols, y, p, four), policy=POLICY)
    for name in ("metric", "calibration", "slices"):
        c = _check(result, name)
        assert c.verdict is Verdict.UNDECIDED and "serving version answers 4 classes" in c.message


# --- regression --------------------------------------------------------------------------------------------


def test_regression_lower_rmse_passes_much_higher_rmse_fails() -> None:
    cols, y, pred = _regression_world()
    rng = np.random.default_rng(7)
    noisy = pred + rng.normal(0.0, 1.0, N)  # RMSE ~1.41
    better = evaluate(schema=_regression_schema(), holdout=Holdout(cols, y, pred, noisy), policy=POLICY)
    m = _check(better, "metric")
    assert m.verdict is Verdict.PASSED and m.figures["metric"] == "rmse"
    assert m.figures["candidate"] < m.figures["serving"] and m.figures["delta"] < -0.3
    assert "not higher than serving" in m.message and "(2% of serving's rmse)" in m.message
    assert m.figures["relative_tolerance"] == 0.02
    assert m.figures["tolerance"] == pytest.approx(0.02 * m.figures["serving"], rel=1e-4)
    assert better.passed, better.summary()
    worse = evaluate(schema=_regression_schema(), holdout=Holdout(cols, y, noisy, pred), policy=POLICY)
    w = _check(worse, "metric")
    assert w.verdict is Verdict.FAILED and w.figures["bounds"][0] > w.figures["tolerance"]
    assert "higher than serving by more than the tolerance" in w.message
    assert "with 95% confidence" in w.message
    mae = metric(name="mae", labels=y, candidate=noisy, serving=pred, tolerance=0.02, task=Task.REGRESSION)
    assert mae.verdict is Verdict.FAILED and mae.figures["metric"] == "mae"


def test_regression_within_the_relative_tolerance_passes() -> None:
    cols, y, pred = _regression_world()
    rng = np.random.default_rng(11)
    slightly = pred + rng.normal(0.0, 0.1, N)  # RMSE ~1.005: 0.5 % above serving
    m = metric(name="rmse", labels=y, candidate=slightly, serving=pred, tolerance=0.02, task=Task.REGRESSION)
    assert m.verdict is Verdict.PASSED, m.message


def test_regression_with_too_few_rows_is_undecided() -> None:
    cols, y, pred = _regression_world(n=50)
    worse = pred + 3.0
    result = evaluate(schema=_regression_schema(), holdout=Holdout(cols, y, worse, pred), policy=POLICY)
    m = _check(result, "metric")
    assert m.verdict is Verdict.UNDECIDED
    assert f"50 holdout rows, fewer than the {MIN_ROWS['metric']} this check needs" in m.message
    assert result.verdict is Verdict.UNDECIDED


def test_regression_calibration_is_not_applicable_and_outputs_flag_unexpected_values() -> None:
    cols, y, pred = _regression_world()
    values = pred.copy()
    values[:3] = 50.0  # far outside the expected range (-6 to 6 widened by half its span): flagged
    result = evaluate(schema=_regression_schema(), holdout=Holdout(cols, y, values, pred), policy=POLICY)
    cal = _check(result, "calibration")
    assert cal.passed and "not applicable to regression" in cal.message
    assert cal.figures["applicable"] is False
    out = _check(result, "outputs")
    assert out.figures["expected"] == [-12.0, 12.0]
    flagged = int(np.sum(np.abs(values) > 12.0))
    assert out.passed and out.figures["flagged"] == flagged == 3
    assert f"{flagged} flagged outside the expected range" in out.message
    values[4] = np.inf
    broken = outputs(_regression_schema().output, values)
    assert broken.verdict is Verdict.FAILED and broken.figures["non_finite"] == 1


def test_regression_slices_are_judged_by_rmse() -> None:
    cols, y, pred = _regression_world()
    rng = np.random.default_rng(3)
    south = cols["region"] == "south"
    candidate = pred.copy()
    candidate[south] += rng.normal(0.0, 1.5, int(south.sum()))  # much worse in the south only
    check = slices(
        schema=_regression_schema(),
        columns=cols,
        labels=y,
        candidate=candidate,
        serving=pred,
        name="roc_auc",
        tolerance=0.05,
        min_rows=100,
    )
    assert check.verdict is Verdict.FAILED, check.message
    assert check.figures["relative_tolerance"] == 0.05
    assert [(s["feature"], s["value"]) for s in check.figures["failed"]] == [("region", "south")]
    worst = check.figures["worst"][0]
    assert worst["value"] == "south" and worst["metric"] == "rmse" and worst["delta"] > 0.3
    assert worst["tolerance"] == pytest.approx(0.05 * worst["serving"], rel=1e-3)
    assert "region=south rmse" in check.message and "5% of serving's rmse on the slice" in check.message
    same = slices(
        schema=_regression_schema(),
        columns=cols,
        labels=y,
        candidate=pred,
        serving=pred.copy(),
        name="rmse",
        tolerance=0.05,
        min_rows=100,
    )
    assert same.passed and {s["metric"] for s in same.figures["worst"]} == {"rmse"}


def test_an_unfit_metric_for_regression_is_undecided_not_a_crash() -> None:
    cols, y, pred = _regression_world()
    policy = GatePolicy(metric="f1")
    result = evaluate(schema=_regression_schema(), holdout=Holdout(cols, y, pred, pred), policy=policy)
    assert result.verdict is Verdict.UNDECIDED
    m = _check(result, "metric")
    assert m.verdict is Verdict.UNDECIDED and "does not fit a regression model" in m.message
    assert "rmse or mae" in m.message
    assert _check(result, "slices").verdict is Verdict.UNDECIDED
    assert result.as_dict()["checks"][2]["verdict"] == "undecided"
