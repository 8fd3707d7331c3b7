"""An imported model's own signature at the serving edge (pure): TF Serving REST and OIP v2 as TensorFlow
Serving speaks them for the source SavedModel.

Requests in the source's form (its input names; ``[batch, 1]`` values as one-element lists, a dense
``[batch, D]`` input as one list per row; bare rows or a bare tensor for a single-input signature) become the
contract's named columns, the same values whatever the form (so the log and the monitors read a
``[batch, 1]`` value and a scalar alike). Answers carry the source's outputs under their own names, dtypes
and shapes: one output a list per row in its own shape, several a dict per row (row format), a tensor or a
dict of named tensors (columnar). driftwarden's own form stays accepted beside it: a ``[batch, 1]`` input
also takes a bare value per row, and the contract's features may be named one by one instead of a dense
input (a request without that input is read by the contract's feature names).
"""

from __future__ import annotations

import base64
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from registry.contracts import MAX_REPORTED, ContractViolation, Violation, check_columns, rows_to_columns
from registry.schema import ModelSchema
from registry.signature import SourceSignature, Tensor, output_key
from service.serving.codecs import BadRequest, Columns, predict_form

DEFAULT_SIGNATURE = "serving_default"


def check_signature_name(signature: SourceSignature, payload: Mapping[str, Any]) -> None:
    """``signature_name`` absent, empty, or the recorded signature's name (BadRequest otherwise)."""
    name = payload.get("signature_name")
    if name not in (None, "", signature.name):
        raise BadRequest(f"unknown signature_name {name!r}; this model has {signature.name!r}", "signature")


def parse_source_v1(schema: ModelSchema, signature: SourceSignature, payload: Any) -> Columns:
    """A ``:predict`` body in the source signature's form -> the contract's columns."""
    if not isinstance(payload, Mapping):
        raise BadRequest('the body must be a JSON object with "instances" or "inputs"')
    check_signature_name(signature, payload)
    form, body = predict_form(payload)
    if form == "row":
        rows = _rows(signature, body)
        values, n = rows_to_columns(schema, rows)
        return Columns(values, n, "row", rows=rows)
    if form == "columnar":
        inputs = body
        if isinstance(inputs, Mapping):
            named = inputs
        elif len(signature.inputs) == 1:
            named = {signature.inputs[0].name: inputs}
        else:
            raise BadRequest(
                f'"inputs" must be an object of named tensors ({_names(signature.inputs)})', "format"
            )
        columns = _columns(signature, named)
        return Columns(columns, check_columns(schema, columns), "columnar")
    raise BadRequest('missing "instances" (row format) or "inputs" (columnar format)')


def _names(inputs: Sequence[Tensor]) -> str:
    return ", ".join(f"{t.name} {_shape_text(t)}" for t in inputs)


def _shape_text(t: Tensor) -> str:
    return (
        "["
        + ", ".join("batch" if i == 0 else ("?" if d is None else str(d)) for i, d in enumerate(t.shape))
        + "]"
    )


def _rows(signature: SourceSignature, instances: list[Any]) -> list[dict[str, Any]]:
    """Each instance as an object of the contract's features (violations name the row and the input)."""
    by_name = {t.name: t for t in signature.inputs}
    single = signature.inputs[0] if len(signature.inputs) == 1 else None
    problems: list[Violation] = []
    rows: list[dict[str, Any]] = []
    for i, instance in enumerate(instances):
        if isinstance(instance, Mapping):
            named = instance
        elif single is not None:
            named = {single.name: instance}
        else:
            problems.append(
                Violation(
                    "type",
                    f"an instance must be an object of named inputs ({_names(signature.inputs)})",
                    row=i,
                )
            )
            continue
        row: dict[str, Any] = {}
        for key, value in named.items():
            tensor = by_name.get(key)
            if tensor is None:
                row[key] = value  # the contract names it: not an input of this model
            elif signature.dense:
                if isinstance(value, list) and len(value) == len(signature.features):
                    row.update(zip(signature.features, value, strict=True))
                else:
                    problems.append(_dense_violation(signature, tensor, value, row=i))
            else:
                unwrapped = _value(tensor, value)
                if unwrapped is _BAD:
                    problems.append(_column_violation(tensor, row=i))
                else:
                    row[key] = unwrapped
        rows.append(row)
        if len(problems) >= MAX_REPORTED:
            break
    if problems:
        raise ContractViolation(problems)
    return rows


_BAD = object()


def _value(tensor: Tensor, value: Any) -> Any:
    """A ``[batch, 1]`` input's one-element list as its value (a bare value too); others as sent."""
    if not tensor.column or not isinstance(value, list):
        return value
    return value[0] if len(value) == 1 else _BAD


def _column_violation(tensor: Tensor, *, row: int | None = None) -> Violation:
    return Violation(
        "shape", "is a [batch, 1] input: send [value] (or the value) per row", row=row, feature=tensor.name
    )


def _dense_violation(
    signature: SourceSignature, tensor: Tensor, value: Any, *, row: int | None = None
) -> Violation:
    width = len(signature.features)
    got = f"a list of {len(value)}" if isinstance(value, list) else type(value).__name__
    return Violation(
        "shape",
        f"is a [batch, {width}] input: send a list of {width} values per row "
        f"({', '.join(signature.features)}), got {got}",
        row=row,
        feature=tensor.name,
    )


def _columns(signature: SourceSignature, named: Mapping[str, Any]) -> dict[str, Any]:
    """Columnar inputs (named tensors) as the contract's columns."""
    by_name = {t.name: t for t in signature.inputs}
    columns: dict[str, Any] = {}
    problems: list[Violation] = []
    for key, tensor_values in named.items():
        tensor = by_name.get(key)
        if tensor is None:
            columns[key] = tensor_values  # the contract names it: not an input of this model
            continue
        if not isinstance(tensor_values, list):
            problems.append(
                Violation("shape", f"must be a tensor {_shape_text(tensor)} (a list)", feature=key)
            )
        elif signature.dense:
            width = len(signature.features)
            bad = next((v for v in tensor_values if not (isinstance(v, list) and len(v) == width)), _BAD)
            if bad is not _BAD:
                problems.append(_dense_violation(signature, tensor, bad))
            else:
                for j, feature in enumerate(signature.features):
                    columns[feature] = [v[j] for v in tensor_values]
        else:
            values = [_value(tensor, v) for v in tensor_values]
            if any(v is _BAD for v in values):
                problems.append(_column_violation(tensor))
            else:
                columns[key] = values
    if problems:
        raise ContractViolation(problems)
    return columns


# -- answers ----------------------------------------------------------------------------------------------
def _plain(value: np.ndarray, *, b64: bool = False) -> list[Any]:
    """A tensor as JSON values: strings as text, or as ``{"b64": ...}`` (``b64``: TF Serving's encoding of an
    output whose name ends in ``_bytes``)."""
    if value.dtype.kind in "OSU":
        convert = _b64 if b64 else _text
        return np.vectorize(convert, otypes=[object])(value).tolist() if value.size else value.tolist()
    result: list[Any] = value.tolist()
    return result


def _text(value: Any) -> Any:
    return value.decode("utf-8", errors="replace") if isinstance(value, bytes) else value


def _b64(value: Any) -> dict[str, str]:
    raw = value if isinstance(value, bytes) else str(value).encode()
    return {"b64": base64.b64encode(raw).decode("ascii")}


def outputs_of(
    signature: SourceSignature, outputs: Mapping[str, np.ndarray]
) -> list[tuple[Tensor, np.ndarray]]:
    """The source's outputs of one request, in the signature's order."""
    return [(t, np.asarray(outputs[output_key(i)])) for i, t in enumerate(signature.outputs)]


def v1_answer(signature: SourceSignature, outputs: Mapping[str, np.ndarray], *, rows: bool) -> Any:
    """TF Serving's ``predictions`` (``rows``) or ``outputs``: one output as its tensor, several by name."""
    named = {
        t.name: _plain(value, b64=t.name.endswith("_bytes")) for t, value in outputs_of(signature, outputs)
    }
    if len(named) == 1:
        return next(iter(named.values()))
    if not rows:
        return named
    n = len(next(iter(named.values()))) if named else 0
    return [{name: values[i] for name, values in named.items()} for i in range(n)]


def v2_outputs(
    signature: SourceSignature, outputs: Mapping[str, np.ndarray], wanted: set[str] | None
) -> list[dict[str, Any]]:
    """OIP v2 output tensors under the source's names, datatypes and shapes (``wanted``: those only)."""
    return [
        {
            "name": t.name,
            "datatype": t.v2_datatype,
            "shape": list(value.shape),
            "data": _plain(value.reshape(-1)),
        }
        for t, value in outputs_of(signature, outputs)
        if wanted is None or t.name in wanted
    ]


def requested_outputs(payload: Any) -> set[str] | None:
    """The output names an OIP v2 request asks for (None: all); parse_v2 has checked them."""
    outputs = payload.get("outputs") if isinstance(payload, Mapping) else None
    if not isinstance(outputs, list):
        return None
    return {str(o.get("name")) for o in outputs if isinstance(o, Mapping)}
