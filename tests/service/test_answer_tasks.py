"""The output contract per task on the serving path (pure): what is answered, logged, flagged or refused."""

from __future__ import annotations

import math

import numpy as np

from registry.schema import FeatureKind, FeatureSpec, ModelSchema, OutputSpec, Task
from service.serving.flows import _answer

FEATURES = (FeatureSpec(name="x", kind=FeatureKind.NUMERIC, dtype="float64", nullable=False),)


def _schema(task: Task, **output: object) -> ModelSchema:
    classes = ("a", "b", "c") if task is Task.MULTICLASS else ()
    spec = OutputSpec.for_task(task, classes=len(classes), **output)  # type: ignore[arg-type]
    return ModelSchema(features=FEATURES, outputs=(spec,), target="y", task=task.value, classes=classes)


def test_multiclass_vectors_are_answered_logged_and_refused_when_not_probabilities() -> None:
    schema = _schema(Task.MULTICLASS)
    ok = _answer(schema, {"probabilities": np.array([[0.2, 0.3, 0.5], [0.0, 1.0, 0.0]])}, [None, ["x:flag"]])
    assert ok.problems == [] and ok.values == [0.5, 1.0] and ok.vectors == [[0.2, 0.3, 0.5], [0.0, 1.0, 0.0]]
    assert ok.flags == [None, ["x:flag"]]
    bad = _answer(
        schema,
        {"probabilities": np.array([[0.2, 0.3, 0.6], [np.nan, 0.0, 1.0], [0.1, 0.1, 0.8]])},
        [None] * 3,
    )
    assert [(p.rule, p.row) for p in bad.problems] == [("output_sum", 0), ("output_range", 1)]
    assert bad.vectors is not None and bad.vectors[1] == [None, 0.0, 1.0] and bad.values[2] == 0.8
    shape = _answer(schema, {"probabilities": np.array([0.2, 0.8])}, [None, None])
    assert [p.rule for p in shape.problems] == ["output_shape"] and all(math.isnan(v) for v in shape.values)


def test_a_regression_value_outside_its_expected_range_is_flagged_and_an_infinite_one_refused() -> None:
    schema = _schema(Task.REGRESSION, expected=(0.0, 10.0))  # expected [-5, 15]: widened by half the span
    out = _answer(
        schema, {"value": np.array([3.0, 14.9, 15.1, -7.0])}, [None, None, ["x:observed_range"], None]
    )
    assert out.problems == [] and out.values == [3.0, 14.9, 15.1, -7.0]
    assert out.flags == [None, None, ["x:observed_range", "value:output_range"], ["value:output_range"]]
    refused = _answer(schema, {"value": np.array([1.0, np.inf])}, [None, None])
    assert [(p.rule, p.row) for p in refused.problems] == [("output_finite", 1)]


def test_binary_probabilities_keep_their_range() -> None:
    out = _answer(_schema(Task.BINARY), {"probability": np.array([0.1, 1.2])}, [None, None])
    assert [(p.rule, p.row) for p in out.problems] == [("output_range", 1)] and out.vectors is None
