"""The gate's slices check searches the candidate's weak slices (monitors/slices.py) and judges them."""

from __future__ import annotations

import numpy as np

from registry.schema import FeatureKind, FeatureSpec, ModelSchema, OutputSpec
from registry.service import read_schema
from tests.support import TrainedModels
from training.cluster.datagen import TARGET, generate
from training.retraining.gate import GatePolicy, Holdout, Verdict, evaluate, slices
from training.retraining.job import score_version

N = 6000
POLICY = GatePolicy(slice_tolerance=0.05, slice_min_rows=100)


def _schema() -> ModelSchema:
    return ModelSchema(
        features=(
            FeatureSpec("income", FeatureKind.NUMERIC, "float64", nullable=True),
            FeatureSpec(
                "region",
                FeatureKind.CATEGORICAL,
                "string",
                nullable=False,
                categories=("north", "south", "east"),
            ),
            FeatureSpec(
                "channel",
                FeatureKind.CATEGORICAL,
                "string",
                nullable=False,
                categories=("web", "branch", "phone"),
            ),
        ),
        outputs=(OutputSpec("probability"),),
        target="default",
    )


def _world(seed: int = 0) -> tuple[dict[str, np.ndarray], np.ndarray, np.ndarray, np.ndarray]:
    """Holdout columns, labels, a calibrated model's probabilities, the pair region=north & channel=web."""
    rng = np.random.default_rng(seed)
    income = rng.lognormal(10.5, 0.5, N)
    region = rng.choice(np.array(["north", "south", "east"], dtype=object), N)
    channel = rng.choice(np.array(["web", "branch", "phone"], dtype=object), N)
    p = 1.0 / (1.0 + np.exp(-(rng.normal(0.0, 2.0, N) - 1.0)))
    y = (rng.random(N) < p).astype(np.float64)
    pair = (region == "north") & (channel == "web")
    return {"income": income, "region": region, "channel": channel}, y, p, pair


def _names(s: dict) -> set[tuple[str, str]]:
    return {(c["feature"], c["value"]) for c in s["conditions"]}


def test_labels_flipped_in_a_category_pair_make_it_the_top_weak_slice_of_the_gate() -> None:
    cols, y, p, pair = _world()
    y[pair] = 1.0 - y[pair]  # both versions answer the old concept there: equally wrong
    serving = p
    candidate = 1.0 / (1.0 + np.exp(-(np.log(p / (1 - p)) + np.random.default_rng(1).normal(0, 0.1, N))))
    result = evaluate(schema=_schema(), holdout=Holdout(cols, y, candidate, serving), policy=POLICY)
    check = next(c for c in result.checks if c.name == "slices")
    weak = check.figures["weak_slices"]
    assert weak["source"] == "labels" and weak["metric"] == "error_rate" and weak["tried"] > 9
    top = weak["slices"][0]
    assert _names(top) == {("region", "north"), ("channel", "web")}
    assert top["significant"] and top["judged"] and top["rows"] == int(pair.sum())
    # judged against the serving version on that pair: as bad as serving there, so the check passes
    judged = [s for s in check.figures["weak_judged"] if s["slice"] == top["slice"]]
    assert judged and judged[0]["conditions"] == top["conditions"] and judged[0]["rows"] == top["rows"]
    assert judged[0]["searched"]["value"] == top["value"]
    assert check.figures["slices"] == 6 + sum(
        1 for s in weak["slices"] if s["significant"] and "&" in s["slice"]
    )
    assert check.verdict is Verdict.PASSED, check.message
    assert "weak-slice search" in check.message and top["slice"] in check.message


def test_a_candidate_broken_on_one_category_pair_fails_the_slice_check_naming_the_pair() -> None:
    cols, y, p, pair = _world(seed=2)
    candidate = p.copy()
    candidate[pair] = 1.0 - p[pair]  # the candidate answers backwards on one pair only
    check = slices(
        schema=_schema(),
        columns=cols,
        labels=y,
        candidate=candidate,
        serving=p,
        name="roc_auc",
        tolerance=0.05,
        min_rows=100,
        policy=POLICY,
    )
    assert check.verdict is Verdict.FAILED
    top = check.figures["weak_slices"]["slices"][0]
    assert _names(top) == {("region", "north"), ("channel", "web")} and top["significant"]
    failed = {s.get("slice") for s in check.figures["failed"]}
    assert top["slice"] in failed
    assert check.figures["worst"][0]["slice"] == top["slice"] and check.figures["worst"][0]["delta"] < -0.5
    assert top["slice"] in check.message


def test_without_a_weak_slice_only_the_categorical_values_are_judged() -> None:
    cols, y, p, _ = _world(seed=3)
    check = slices(
        schema=_schema(),
        columns=cols,
        labels=y,
        candidate=p,
        serving=p,
        name="roc_auc",
        tolerance=0.05,
        min_rows=100,
        policy=POLICY,
    )
    assert check.verdict is Verdict.PASSED
    weak = check.figures["weak_slices"]
    assert weak["tried"] > 9 and not any(s["significant"] for s in weak["slices"])
    assert check.figures["slices"] == 6  # three regions, three channels
    assert "none significantly weak" in check.message


def test_on_a_trained_model_labels_flipped_in_a_category_pair_top_the_gate_search(
    trained: TrainedModels,
) -> None:
    """The generator's data scored by the session's two trained versions (TensorFlow), as the job scores
    its holdout: the pair whose labels were flipped is the top weak slice in the gate's figures."""
    columns = generate(6000, seed=31)
    labels = np.asarray(columns.pop(TARGET), dtype=np.float64)
    pair = (columns["region"] == "north") & (columns["home_ownership"] == "OWN")
    labels[pair] = 1.0 - labels[pair]
    schema = read_schema(path=trained.paths[2])
    candidate = score_version(trained.paths[2], schema, columns)
    serving = score_version(trained.paths[1], schema, columns)
    result = evaluate(schema=schema, holdout=Holdout(columns, labels, candidate, serving), policy=POLICY)
    check = next(c for c in result.checks if c.name == "slices")
    top = check.figures["weak_slices"]["slices"][0]
    assert _names(top) == {("region", "north"), ("home_ownership", "OWN")}
    assert top["significant"] and top["rows"] == int(pair.sum()) and top["gap"] > 0.3
    assert top["slice"] in [s["slice"] for s in check.figures["weak_judged"]]
