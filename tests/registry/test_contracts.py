"""Contract checks as pure functions: hard rules, soft rules per policy, outputs."""

from __future__ import annotations

import base64
from dataclasses import replace

import numpy as np
import pytest

from registry.contracts import ContractViolation, check_inputs, check_outputs
from registry.schema import FeatureKind, FeatureSpec, ModelSchema, OutputSpec, Policy, infer_feature
from service.serving.codecs import BadRequest, parse_v1, parse_v2

SCHEMA = ModelSchema(
    features=(
        FeatureSpec(
            "x",
            FeatureKind.NUMERIC,
            "float64",
            nullable=False,
            observed_min=0.0,
            observed_max=10.0,
            allowed_min=0.0,
            allowed_max=20.0,
        ),
        FeatureSpec("c", FeatureKind.CATEGORICAL, "string", nullable=True, categories=("a", "b")),
    ),
    outputs=(OutputSpec("probability"),),
    target="y",
    max_rows_per_request=4,
)


def _violation(schema: ModelSchema, values: dict[str, list[object]]) -> tuple[str, int | None, str | None]:
    with pytest.raises(ContractViolation) as info:
        cols = parse_v1(schema, {"inputs": values})
        check_inputs(schema, cols.values, cols.n)
    v = info.value.violations[0]
    return v.rule, v.row, v.feature


@pytest.mark.parametrize(
    ("values", "expected"),
    [
        ({"x": [1.0, "2"], "c": ["a", "a"]}, ("type", 1, "x")),
        ({"x": [1.0, float("nan")], "c": ["a", "a"]}, ("finite", 1, "x")),
        ({"x": [float("inf")], "c": ["a"]}, ("finite", 0, "x")),
        ({"x": [-1.0], "c": ["a"]}, ("allowed_range", 0, "x")),
        ({"x": [21.0], "c": ["a"]}, ("allowed_range", 0, "x")),
        ({"x": [1.0], "c": [5]}, ("type", 0, "c")),
        ({"x": [1.0, 2.0], "c": ["a", "z" * 257]}, ("max_length", 1, "c")),  # refused whatever the policy
        ({"x": [1.0] * 5, "c": ["a"] * 5}, ("max_rows", None, None)),
        ({"x": [], "c": []}, ("empty", None, None)),
        ({"x": [1.0]}, ("missing_feature", None, "c")),
        ({"x": [1.0], "c": ["a"], "z": [1]}, ("unknown_feature", None, "z")),
    ],
)
def test_hard_rules_name_row_feature_and_rule(
    values: dict[str, list[object]], expected: tuple[object, ...]
) -> None:
    assert _violation(SCHEMA, values) == expected


def test_soft_rules_flag_or_reject_by_policy() -> None:
    cols = parse_v1(
        SCHEMA, {"instances": [{"x": 15.0, "c": "zzz"}, {"x": None, "c": None}, {"x": 1, "c": "a"}]}
    )
    checked = check_inputs(SCHEMA, cols.values, cols.n)
    assert checked.flags == [["x:observed_range", "c:unseen_category"], ["x:not_null"], None]
    assert np.isnan(checked.arrays["x"][1]) and checked.arrays["c"][1] == ""
    assert checked.rows[1] == {"x": None, "c": None}
    strict = replace(SCHEMA, features=tuple(replace(f, policy=Policy.REJECT) for f in SCHEMA.features))
    assert _violation(strict, {"x": [1.0, 15.0], "c": ["a", "a"]}) == ("observed_range", 1, "x")
    assert _violation(strict, {"x": [1.0], "c": ["zzz"]}) == ("unseen_category", 0, "c")


def test_a_long_category_is_refused_without_echoing_it_and_training_sets_the_bound() -> None:
    long = "r" * 3_000_000  # 3 MB in one value: once answered, logged and printed twice in the report
    with pytest.raises(ContractViolation) as info:
        check_inputs(SCHEMA, {"x": [1.0], "c": [long]}, 1)
    (v,) = info.value.violations
    assert (v.rule, v.row, v.feature) == ("max_length", 0, "c")
    assert "3000000 characters; at most 256" in v.describe() and len(v.describe()) < 200
    assert check_inputs(SCHEMA, {"x": [1.0], "c": ["y" * 256]}, 1).flags == [["c:unseen_category"]]
    trained = infer_feature("c", np.array(["short", "L" * 300], dtype=object))
    assert trained.max_length == 300  # the longest value trained on is always accepted
    assert ModelSchema.from_dict({**SCHEMA.to_dict()}).features[1].max_length == 256
    old = SCHEMA.to_dict()
    del old["features"][1]["max_length"]  # a contract stored before the bound existed
    assert ModelSchema.from_dict(old).features[1].max_length == 256


def test_an_input_tensor_sent_twice_is_refused_not_answered_with_the_last() -> None:
    tensor = {"name": "x", "shape": [1], "datatype": "FP32", "data": [1.0]}
    c = {"name": "c", "shape": [1], "datatype": "BYTES", "data": ["a"]}
    payload = {"inputs": [tensor, c, {**tensor, "data": [2.0]}]}
    with pytest.raises(ContractViolation) as info:
        parse_v2(SCHEMA, payload)
    (v,) = info.value.violations
    assert (v.rule, v.feature) == ("duplicate_input", "x") and "sent twice (input tensor 2)" in v.describe()


def test_b64_strings_and_v2_binary_tensors() -> None:
    cols = parse_v1(SCHEMA, {"instances": [{"x": 1, "c": {"b64": base64.b64encode(b"b").decode()}}]})
    assert check_inputs(SCHEMA, cols.values, cols.n).arrays["c"].tolist() == ["b"]
    raw_x = np.array([1.0, 2.0], dtype="<f4").tobytes()
    raw_c = b"".join(len(s).to_bytes(4, "little") + s for s in (b"a", b"b"))
    payload = {
        "inputs": [
            {"name": "x", "shape": [2], "datatype": "FP32", "parameters": {"binary_data_size": len(raw_x)}},
            {
                "name": "c",
                "shape": [2, 1],
                "datatype": "BYTES",
                "parameters": {"binary_data_size": len(raw_c)},
            },
        ]
    }
    cols = parse_v2(SCHEMA, payload, raw_x + raw_c)
    assert cols.values == {"x": [1.0, 2.0], "c": ["a", "b"]}
    with pytest.raises(BadRequest, match="binary_data"):
        parse_v2(SCHEMA, payload, raw_x)


def test_outputs_must_be_finite_and_in_range() -> None:
    problems = check_outputs(OutputSpec("probability"), [0.2, float("nan"), 1.5, -0.1, 1.0])
    assert [(p.rule, p.row) for p in problems] == [
        ("output_finite", 1),
        ("output_range", 2),
        ("output_range", 3),
    ]
    assert check_outputs(OutputSpec("probability"), [0.0, 0.5, 1.0]) == []


def test_a_training_range_open_on_one_side_is_named_not_a_crash() -> None:
    """A contract may bound one side only (observed_max unset): a value below its minimum is a soft rule
    whose message shows the open side as infinite (it raised TypeError, a 500, before)."""
    x = replace(
        SCHEMA.features[0], observed_max=None, allowed_min=-10.0, allowed_max=None, policy=Policy.REJECT
    )
    one_sided = replace(SCHEMA, features=(x, SCHEMA.features[1]))
    with pytest.raises(ContractViolation) as info:
        cols = parse_v1(one_sided, {"inputs": {"x": [-0.5], "c": ["a"]}})
        check_inputs(one_sided, cols.values, cols.n)
    v = info.value.violations[0]
    assert (v.rule, v.row, v.feature) == ("observed_range", 0, "x")
    assert "outside the training range [0, inf]" in v.message
