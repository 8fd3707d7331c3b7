"""An imported model's own signature at the serving edge (pure): requests in TF Serving's forms for that
signature become the contract's columns, the same values whatever the form; answers carry the signature's
own output names and shapes; any body is the model's inputs or a 400 naming the rule (hypothesis)."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from registry.contracts import ContractViolation, check_inputs
from registry.schema import FeatureKind, FeatureSpec, ModelSchema, OutputSpec
from registry.signature import SourceSignature, Tensor, output_key
from service.serving.codecs import BadRequest
from service.serving.source_codec import parse_source_v1, requested_outputs, v1_answer, v2_outputs
from tests.service.decoderdata import SCHEMA, SETTINGS, _decoded_or_named, json_values

# SCHEMA's features as a Keras model takes them: [batch, 1] inputs, and two [batch] ones
PER_FEATURE = SourceSignature(
    name="serving_default",
    inputs=(
        Tensor("age", "int64", (None, 1)),
        Tensor("income", "float64", (None,)),
        Tensor("score", "float32", (None, 1)),
        Tensor("region", "string", (None, 1)),
        Tensor("plan", "string", (None,)),
    ),
    outputs=(Tensor("output_0", "float32", (None, 1)),),
)
DENSE_SCHEMA = ModelSchema(
    features=tuple(FeatureSpec(n, FeatureKind.NUMERIC, "float64", nullable=False) for n in ("a", "b", "c")),
    outputs=(OutputSpec("probabilities", width=3),),
    target="y",
)
DENSE = SourceSignature(
    name="predict",
    inputs=(Tensor("x", "float32", (None, 3)),),
    outputs=(Tensor("probs", "float32", (None, 3)), Tensor("label", "string", (None,))),
    features=("a", "b", "c"),
)
ONE = ModelSchema(
    features=(FeatureSpec("t", FeatureKind.NUMERIC, "float64", nullable=False),),
    outputs=(OutputSpec("value"),),
    target="y",
)
ROW = {"age": 41, "income": 5e4, "score": 0.5, "region": "north", "plan": "a"}


def _checked(schema: ModelSchema, signature: SourceSignature, body: Any) -> tuple[Any, Any]:
    cols = parse_source_v1(schema, signature, body)
    return cols, check_inputs(schema, cols.values, cols.n, rows=cols.rows)


def test_column_inputs_and_bare_values_decode_alike() -> None:
    column = {k: ([v] if k in ("age", "score", "region") else v) for k, v in ROW.items()}
    forms = [
        {"instances": [column, column]},
        {"instances": [ROW, ROW]},
        {"signature_name": "serving_default", "inputs": {k: [v, v] for k, v in column.items()}},
    ]
    decoded = [_checked(SCHEMA, PER_FEATURE, body) for body in forms]
    for cols, checked in decoded:
        assert cols.n == 2 and checked.rows == [ROW, ROW]  # what the log keeps
        for name in SCHEMA.feature_names:
            np.testing.assert_array_equal(checked.arrays[name], decoded[0][1].arrays[name])
    assert decoded[0][0].rows == [ROW, ROW]  # the row form's logged rows hold the values, not the lists


def test_a_list_of_two_for_a_column_input_names_the_row_and_input() -> None:
    with pytest.raises(ContractViolation) as exc:
        parse_source_v1(SCHEMA, PER_FEATURE, {"instances": [ROW, {**ROW, "score": [0.1, 0.2]}]})
    (v,) = exc.value.violations
    assert (v.rule, v.row, v.feature) == ("shape", 1, "score") and "[batch, 1]" in v.message
    with pytest.raises(BadRequest, match="signature_name 'predict'.*'serving_default'.*rule: signature"):
        parse_source_v1(SCHEMA, PER_FEATURE, {"signature_name": "predict", "instances": [ROW]})


def test_a_dense_input_takes_bare_rows_named_rows_tensors_and_feature_names() -> None:
    rows = [[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]]
    forms = [
        {"instances": rows},
        {"instances": [{"x": r} for r in rows], "signature_name": "predict"},
        {"inputs": rows},
        {"inputs": {"x": rows}},
        {"instances": [{"a": r[0], "b": r[1], "c": r[2]} for r in rows]},  # driftwarden's own form
    ]
    for body in forms:
        cols, checked = _checked(DENSE_SCHEMA, DENSE, body)
        np.testing.assert_array_equal(checked.arrays["b"], [2.0, 5.0])
        assert checked.rows == [{"a": 1.0, "b": 2.0, "c": 3.0}, {"a": 4.0, "b": 5.0, "c": 6.0}]
    with pytest.raises(ContractViolation) as exc:
        parse_source_v1(DENSE_SCHEMA, DENSE, {"instances": [[1.0, 2.0]]})
    (v,) = exc.value.violations
    assert (
        v.feature == "x"
        and "[batch, 3]" in v.message
        and "a, b, c" in v.message
        and "a list of 2" in v.message
    )
    with pytest.raises(ContractViolation, match="a list"):
        parse_source_v1(DENSE_SCHEMA, DENSE, {"inputs": {"x": 1.0}})


def test_a_single_batch_input_takes_bare_values_not_lists() -> None:
    one = SourceSignature(
        "serving_default", (Tensor("t", "float32", (None,)),), (Tensor("y", "float32", (None,)),)
    )
    for body in ({"instances": [1.5, 2.5]}, {"inputs": [1.5, 2.5]}, {"instances": [{"t": 1.5}, {"t": 2.5}]}):
        _, checked = _checked(ONE, one, body)
        np.testing.assert_array_equal(checked.arrays["t"], [1.5, 2.5])
    with pytest.raises(ContractViolation, match="got a list"):
        _checked(ONE, one, {"instances": [[1.5]]})  # a [batch] input: TF Serving refuses [1.5] too


def test_answers_keep_the_signatures_names_and_shapes() -> None:
    outputs = {
        "probabilities": np.array([[0.2, 0.3, 0.5], [0.6, 0.3, 0.1]], dtype=np.float32),  # the task's
        output_key(0): np.array([[0.2, 0.3, 0.5], [0.6, 0.3, 0.1]], dtype=np.float32),
        output_key(1): np.array([b"mid", b"low"], dtype=object),
    }
    rows = v1_answer(DENSE, outputs, rows=True)
    assert [set(r) for r in rows] == [{"probs", "label"}] * 2 and [r["label"] for r in rows] == ["mid", "low"]
    np.testing.assert_allclose([r["probs"] for r in rows], outputs[output_key(0)])
    columnar = v1_answer(DENSE, outputs, rows=False)
    assert set(columnar) == {"probs", "label"} and columnar["label"] == ["mid", "low"]
    one = {output_key(0): np.array([[895.6], [12.5]], dtype=np.float32)}
    answer = v1_answer(PER_FEATURE, one, rows=True)  # one [batch, 1] output: [[895.6], ...] as TF Serving
    assert np.shape(answer) == (2, 1) and answer == one[output_key(0)].tolist()
    raw = SourceSignature("s", DENSE.inputs, (Tensor("image_bytes", "string", (None,)),), DENSE.features)
    encoded = v1_answer(raw, {output_key(0): np.array([b"\xff\x00"], dtype=object)}, rows=True)
    assert encoded == [{"b64": "/wA="}]  # TF Serving's encoding of an output named *_bytes
    tensors = v2_outputs(DENSE, outputs, requested_outputs({"outputs": [{"name": "label"}]}))
    assert tensors == [{"name": "label", "datatype": "BYTES", "shape": [2], "data": ["mid", "low"]}]
    (probs, _) = v2_outputs(DENSE, outputs, None)
    assert probs["shape"] == [2, 3] and probs["datatype"] == "FP32" and len(probs["data"]) == 6


def test_the_record_reads_back() -> None:
    assert SourceSignature.from_dict(DENSE.to_dict()) == DENSE
    assert DENSE.to_dict()["outputs"][1] == {
        "name": "label",
        "dtype": "string",
        "shape": [None],
        "key": "source_1",
    }
    assert [t.v2_shape() for t in PER_FEATURE.inputs[:2]] == [[-1, 1], [-1]]
    assert PER_FEATURE.inputs[0].tf_dtype == "DT_INT64" and PER_FEATURE.inputs[3].v2_datatype == "BYTES"


single_rows = st.lists(
    st.one_of(json_values, st.fixed_dictionaries({k: json_values for k in ROW})), max_size=4
)


@SETTINGS
@given(
    body=st.one_of(
        json_values,
        st.fixed_dictionaries({"instances": single_rows}),
        st.fixed_dictionaries(
            {"inputs": st.one_of(json_values, st.dictionaries(st.sampled_from(list(ROW)), json_values))}
        ),
    )
)
def test_any_body_in_the_signatures_form_is_inputs_or_a_named_400(body: Any) -> None:
    _decoded_or_named(lambda: parse_source_v1(SCHEMA, PER_FEATURE, body))
