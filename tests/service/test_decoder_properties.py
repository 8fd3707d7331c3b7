"""Properties of the request decoders (hypothesis): any body is either a request or a 4xx naming the rule.

For any JSON value (and any bytes) as a ``:predict`` or ``/infer`` body, decoding plus the contract check
either yields the model's inputs or raises :class:`BadRequest` / :class:`ContractViolation`, whose message
names the rule (the routes answer those 400); nothing else may escape (it would be a 500). Feedback bodies
likewise. Structured strategies reach past the first checks: rows and columns of the model's own features,
v2 tensors with plausible names, shapes, datatypes and binary parts.
"""

from __future__ import annotations

import struct
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from service.serving.codecs import NUMERIC_TYPES, BadRequest, parse_json, parse_v1, parse_v2, split_binary
from service.serving.flows import parse_feedback
from tests.service.decoderdata import NAMES, SCHEMA, SETTINGS, _decoded_or_named, json_scalars, json_values

DATATYPES = [*NUMERIC_TYPES, "BYTES", "FP8", "", 3]

feature_value = st.one_of(json_scalars, st.just({"b64": "bm9ydGg="}), st.just({"b64": "%%"}), json_values)
numbers = st.one_of(st.integers(-5, 200), st.floats(allow_nan=False, allow_infinity=False), st.none())
# rows of the model's own features with mostly plausible values: requests that pass, or fail late
plausible_row = st.fixed_dictionaries(
    {
        "age": st.one_of(st.integers(0, 120), numbers),
        "income": numbers,
        "score": numbers,
        "region": st.one_of(st.sampled_from(["north", "south", "east", None, "", "a\x00"]), feature_value),
        "plan": st.sampled_from(["a", None, "b"]),
    }
)
rows = st.one_of(
    st.lists(st.dictionaries(st.sampled_from(NAMES), feature_value, max_size=6), max_size=20),
    st.lists(plausible_row, max_size=20),
)
columns = st.dictionaries(
    st.sampled_from(NAMES), st.one_of(st.lists(feature_value, max_size=20), feature_value), max_size=6
)
v1_bodies = st.one_of(
    json_values,
    st.fixed_dictionaries({"instances": st.one_of(rows, json_values)}),
    st.fixed_dictionaries({"inputs": st.one_of(columns, json_values)}),
    st.fixed_dictionaries(
        {"instances": rows, "signature_name": st.sampled_from(["serving_default", "", None, "other", 1])}
    ),
)
shapes = st.one_of(st.lists(st.integers(-1, 5), max_size=3), json_values)
tensor = st.fixed_dictionaries(
    {
        "name": st.one_of(st.sampled_from(NAMES), json_scalars),
        "shape": shapes,
        "datatype": st.sampled_from(DATATYPES),
    },
    optional={
        "data": st.one_of(
            st.lists(feature_value, max_size=12), st.lists(st.lists(feature_value, max_size=4), max_size=4)
        ),
        "parameters": st.one_of(
            st.fixed_dictionaries({"binary_data_size": st.one_of(st.integers(-4, 40), json_scalars)}),
            json_values,
        ),
    },
)
v2_bodies = st.one_of(
    json_values,
    st.fixed_dictionaries(
        {"inputs": st.one_of(st.lists(tensor, max_size=5), json_values)},
        optional={"id": json_scalars, "parameters": json_values, "outputs": json_values},
    ),
)
binary_parts = st.one_of(
    st.binary(max_size=48),
    st.lists(st.text(max_size=5), max_size=4).map(
        lambda xs: b"".join(struct.pack("<I", len(x.encode())) + x.encode() for x in xs)
    ),
)


@SETTINGS
@given(body=v1_bodies)
def test_any_predict_body_is_inputs_or_a_named_400(body: Any) -> None:
    _decoded_or_named(lambda: parse_v1(SCHEMA, body))


@SETTINGS
@given(body=v2_bodies, binary=binary_parts)
def test_any_infer_body_is_inputs_or_a_named_400(body: Any, binary: bytes) -> None:
    _decoded_or_named(lambda: parse_v2(SCHEMA, body, binary))


@SETTINGS
@given(
    raw=st.one_of(st.binary(max_size=64), json_values.map(lambda v: repr(v).encode())),
    header=st.one_of(st.none(), st.text(max_size=4)),
)
def test_any_bytes_are_json_or_a_named_400(raw: bytes, header: str | None) -> None:
    try:
        head, _ = split_binary(raw, header)
        parse_json(head)
    except BadRequest as exc:
        assert "(rule: " in str(exc)


@SETTINGS
@given(
    body=st.one_of(
        json_values,
        st.fixed_dictionaries(
            {
                "labels": st.lists(
                    st.fixed_dictionaries({"prediction_id": json_scalars, "label": json_scalars}), max_size=4
                )
            }
        ),
    )
)
def test_any_feedback_body_is_labels_or_a_named_400(body: Any) -> None:
    try:
        labels = parse_feedback(body)
    except BadRequest as exc:
        assert "(rule: " in str(exc)
        return
    assert labels and all(label in (0.0, 1.0) and 1 <= len(pid) <= 36 for pid, label in labels)


@SETTINGS
@given(
    value=st.one_of(st.floats(allow_nan=False, allow_infinity=False), st.integers(-(2**1100), 2**1100)),
    n=st.integers(1, 12),
    feature=st.sampled_from(["income", "score"]),
)
def test_a_finite_number_never_reaches_the_model_as_infinity(value: float, n: int, feature: str) -> None:
    """Row walk (fewer than 8 rows) and whole-column check (8 or more) alike: float32 overflow is a 400."""
    row = {"age": 30, "income": 10.0, "score": 0.5, "region": "north", "plan": "a", feature: value}
    _decoded_or_named(lambda: parse_v1(SCHEMA, {"instances": [row] * n}))
    _decoded_or_named(lambda: parse_v1(SCHEMA, {"inputs": {k: [v] * n for k, v in row.items()}}))
