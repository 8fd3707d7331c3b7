"""Request bodies of both protocols -> named columns of raw values (pure, no I/O).

TF Serving REST: ``{"instances": [{...}, ...]}`` (row format) or ``{"inputs": {"f": [...], ...}}``
(columnar), never both. Open Inference Protocol v2: ``{"inputs": [{"name", "shape", "datatype", "data"}]}``
with one tensor per feature, or one 2-D tensor ``[rows, features]`` in schema order; tensor data may also
come in Triton's binary extension (``Inference-Header-Content-Length``).
"""

from __future__ import annotations

import json
import math
import struct
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import orjson

from core.http import DEPTH_REFUSAL, DEPTH_RULE, nests_deeper
from registry.contracts import ContractViolation, Violation, check_columns, rows_to_columns
from registry.schema import FeatureKind, ModelSchema

NUMERIC_TYPES = {
    "BOOL": None,
    "UINT8": "<u1",
    "UINT16": "<u2",
    "UINT32": "<u4",
    "UINT64": "<u8",
    "INT8": "<i1",
    "INT16": "<i2",
    "INT32": "<i4",
    "INT64": "<i8",
    "FP16": "<f2",
    "FP32": "<f4",
    "FP64": "<f8",
}


class BadRequest(ValueError):
    """A body that is not a valid request of its protocol (answered with ``status_code``, 400)."""

    status_code = 400

    def __init__(self, message: str, rule: str = "format") -> None:
        self.rule = rule
        super().__init__(f"{message} (rule: {rule})")


@dataclass(frozen=True)
class Columns:
    """Raw values per feature, the row count and which format the client used."""

    values: Mapping[str, Sequence[Any]]
    n: int
    fmt: str  # "row" | "columnar" | "tensors" | "matrix"
    rows: list[dict[str, Any]] | None = None  # row format: the request's own row objects (logged as sent)


def parse_json(body: bytes) -> Any:
    """Parse JSON; NaN and Infinity literals are accepted here so the contract can name them. Text nesting
    deeper than :data:`core.http.MAX_JSON_DEPTH` is refused before any parser reads it."""
    if nests_deeper(body):
        raise BadRequest(DEPTH_REFUSAL, DEPTH_RULE)
    try:
        return orjson.loads(body)
    except orjson.JSONDecodeError:
        pass
    try:
        value = json.loads(body)
    except (ValueError, UnicodeDecodeError) as exc:
        raise BadRequest(f"the body is not valid JSON: {exc}", "json") from None
    except RecursionError:
        raise BadRequest("the body is nested too deeply", "json") from None
    try:  # what the fast parser refused must still be representable: no lone surrogates, no huge integers
        orjson.dumps(value)
    except (orjson.JSONEncodeError, RecursionError) as exc:
        raise BadRequest(f"the body holds values that are not valid JSON text: {exc}", "json") from None
    return value


# -- TF Serving REST ------------------------------------------------------------------------------
def predict_form(payload: Mapping[str, Any]) -> tuple[str, Any]:
    """A ``:predict`` body's form: ``("row", instances)`` (a list), ``("columnar", inputs)``, or
    ``("", None)`` when it holds neither (BadRequest on unknown keys, both, or instances not a list)."""
    unknown = set(payload) - {"instances", "inputs", "signature_name"}
    if unknown:
        raise BadRequest(f"unknown request keys {sorted(unknown)}; use 'instances' or 'inputs'")
    if "instances" in payload and "inputs" in payload:
        raise BadRequest('send either "instances" (row format) or "inputs" (columnar format), not both')
    if "instances" in payload:
        if not isinstance(payload["instances"], list):
            raise BadRequest('"instances" must be a list of rows')
        return "row", payload["instances"]
    if "inputs" in payload:
        return "columnar", payload["inputs"]
    return "", None


def parse_v1(schema: ModelSchema, payload: Any) -> Columns:
    """A ``:predict`` body -> columns."""
    if not isinstance(payload, Mapping):
        raise BadRequest('the body must be a JSON object with "instances" or "inputs"')
    signature = payload.get("signature_name", "serving_default")
    if signature not in ("serving_default", "", None):
        raise BadRequest(
            f"unknown signature_name {signature!r}; this model has 'serving_default'", "signature"
        )
    form, body = predict_form(payload)
    if form == "row":
        values, n = rows_to_columns(schema, body)
        return Columns(values, n, "row", rows=body)
    if form == "columnar":
        inputs = body
        if not isinstance(inputs, Mapping):
            raise BadRequest('"inputs" must be an object of named lists (one per feature)')
        for name, col in inputs.items():
            if not isinstance(col, list):
                raise ContractViolation(
                    [Violation("shape", "must be a list of values (a 1-D tensor)", feature=str(name))]
                )
        n = check_columns(schema, inputs)
        return Columns(dict(inputs), n, "columnar")
    raise BadRequest('missing "instances" (row format) or "inputs" (columnar format)')


# -- Open Inference Protocol v2 -------------------------------------------------------------------
def split_binary(body: bytes, header_length: str | None) -> tuple[bytes, bytes]:
    """Triton's binary tensor extension: JSON header, then raw tensor bytes."""
    if header_length is None:
        return body, b""
    try:
        size = int(header_length)
    except ValueError:
        raise BadRequest("Inference-Header-Content-Length must be an integer", "binary_data") from None
    if not 0 <= size <= len(body):
        raise BadRequest("Inference-Header-Content-Length exceeds the body", "binary_data")
    return body[:size], body[size:]


def repeated_tensor(tensors: Sequence[Any]) -> tuple[int, str] | None:
    """The first tensor whose name an earlier tensor of the list already has (its index and the name), else
    None: the one rule of Open Inference Protocol v2 tensor names wherever tensors are read
    (``/v2/.../infer``, KServe's events): each name once; a repeated name is refused with a 4xx naming it,
    never the last one winning."""
    seen: set[str] = set()
    for k, tensor in enumerate(tensors):
        name = tensor.get("name") if isinstance(tensor, Mapping) else None
        if isinstance(name, str):
            if name in seen:
                return k, name
            seen.add(name)
    return None


Tensor = tuple[str, list[int], str, list[Any]]  # an input tensor decoded: name, shape, datatype, flat values


def parse_v2(
    schema: ModelSchema, payload: Any, binary: bytes = b"", *, outputs: Sequence[str] | None = None
) -> Columns:
    """An ``/infer`` body -> columns (``outputs``: the names it may ask for, default the contract's)."""
    tensors = _v2_tensors(schema, payload, outputs)
    decoded: list[Tensor] = []
    offset = 0
    for k, t in enumerate(tensors):
        tensor, offset = _decode_tensor(k, t, binary, offset)
        decoded.append(tensor)
    features = set(schema.feature_names)
    if len(decoded) == 1 and decoded[0][0] not in features:
        return _matrix(schema, *decoded[0])
    return _feature_columns(schema, decoded)


def _v2_tensors(schema: ModelSchema, payload: Any, outputs: Sequence[str] | None) -> list[Any]:
    """The body's input tensors, once its envelope (id, parameters, outputs, no input twice) is checked."""
    if not isinstance(payload, Mapping):
        raise BadRequest('the body must be a JSON object with "inputs"')
    if not isinstance(payload.get("id", ""), str):
        raise BadRequest('"id" must be a string (the request id echoed in the answer)')
    if not isinstance(payload.get("parameters") or {}, Mapping):
        raise BadRequest('"parameters" must be an object')
    tensors = payload.get("inputs")
    if not isinstance(tensors, list) or not tensors:
        raise BadRequest('"inputs" must be a non-empty list of tensors')
    requested = payload.get("outputs")
    if requested is not None:
        names = (
            {o.get("name") if isinstance(o, Mapping) else None for o in requested}
            if isinstance(requested, list)
            else {None}
        )
        known = set(outputs) if outputs is not None else {o.name for o in schema.outputs}
        if not names <= known:
            raise BadRequest(
                f"unknown requested outputs {sorted(map(str, names - known))}; this model has "
                f"{sorted(known)}",
                "outputs",
            )
    repeat = repeated_tensor(tensors)
    if repeat is not None:
        at, twice = repeat
        message = f"is sent twice (input tensor {at}): send each input once"
        raise ContractViolation([Violation("duplicate_input", message, feature=twice)])
    return tensors


def _decode_tensor(k: int, t: Any, binary: bytes, offset: int) -> tuple[Tensor, int]:
    """Input tensor ``k`` decoded (from JSON data or the binary part at ``offset``) and the next offset."""
    if not isinstance(t, Mapping):
        raise BadRequest(f"input tensor {k} must be an object")
    name, shape, dtype = t.get("name"), t.get("shape"), t.get("datatype")
    if not isinstance(name, str):
        raise BadRequest(f"input tensor {k} has no name")
    if not isinstance(shape, list) or not all(
        isinstance(d, int) and not isinstance(d, bool) and d >= 0 for d in shape
    ):
        raise ContractViolation(
            [Violation("shape", "needs a shape: a list of non-negative integers", feature=name)]
        )
    if not isinstance(dtype, str) or (dtype not in NUMERIC_TYPES and dtype != "BYTES"):
        raise ContractViolation([Violation("type", f"unknown datatype {dtype!r}", feature=name)])
    params = t.get("parameters") or {}
    if not isinstance(params, Mapping):
        raise BadRequest(f"the parameters of input tensor '{name}' must be an object")
    size = params.get("binary_data_size")
    if size is not None:
        if isinstance(size, bool) or not isinstance(size, int) or size < 0:
            raise BadRequest(
                f"binary_data_size of input '{name}' must be a non-negative integer", "binary_data"
            )
        if offset + size > len(binary):
            raise BadRequest(f"binary_data_size of input '{name}' exceeds the binary part", "binary_data")
        data = _decode_binary(name, dtype, binary[offset : offset + size])
        offset += size
    else:
        if "data" not in t:
            raise ContractViolation([Violation("shape", "has no data", feature=name)])
        data = _flatten(t["data"])
    expected = math.prod(shape)
    if len(data) != expected:
        raise ContractViolation(
            [Violation("shape", f"shape {shape} needs {expected} values, got {len(data)}", feature=name)]
        )
    return (name, shape, dtype, data), offset


def _feature_columns(schema: ModelSchema, decoded: list[Tensor]) -> Columns:
    """One tensor per feature -> columns, each tensor's name, shape and datatype checked on the contract."""
    features = set(schema.feature_names)
    values: dict[str, Sequence[Any]] = {}
    for name, shape, dtype, data in decoded:
        if name not in features:
            raise ContractViolation(
                [Violation("unknown_feature", "is not an input of this model", feature=name)]
            )
        if len(shape) > 2 or (len(shape) == 2 and shape[1] != 1):
            raise ContractViolation(
                [Violation("shape", f"shape {shape} must be [rows] or [rows, 1]", feature=name)]
            )
        kind = schema.feature(name).kind
        if kind is FeatureKind.NUMERIC and dtype in ("BYTES", "BOOL"):
            raise ContractViolation(
                [Violation("type", f"is numeric; datatype {dtype} is not allowed", feature=name)]
            )
        if kind is FeatureKind.CATEGORICAL and dtype != "BYTES":
            raise ContractViolation(
                [Violation("type", f"is categorical: use datatype BYTES, not {dtype}", feature=name)]
            )
        values[name] = data
    n = check_columns(schema, values)
    return Columns(values, n, "tensors")


def _matrix(schema: ModelSchema, name: str, shape: list[int], dtype: str, data: list[Any]) -> Columns:
    width = len(schema.features)
    if len(shape) != 2 or shape[1] != width:
        raise ContractViolation(
            [
                Violation(
                    "shape",
                    f"a single input tensor must have shape [rows, {width}] (features in schema order: "
                    f"{', '.join(schema.feature_names)}), got {shape}",
                    feature=name,
                )
            ]
        )
    n = shape[0]
    values: dict[str, Sequence[Any]] = {}
    for j, spec in enumerate(schema.features):
        col = data[j::width]
        if spec.kind is FeatureKind.NUMERIC and dtype == "BYTES":
            col = [_number(v) for v in col]
        values[spec.name] = col
    return Columns(values, n, "matrix")


def _number(value: Any) -> Any:
    if isinstance(value, str):
        try:
            return float(value)
        except ValueError:
            return value
    return value


def _flatten(data: Any) -> list[Any]:
    if not isinstance(data, list):
        return [data]
    if not any(isinstance(v, list) for v in data):
        return data
    out: list[Any] = []
    stack: list[Any] = [iter(data)]
    while stack:
        for v in stack[-1]:
            if isinstance(v, list):
                stack.append(iter(v))
                break
            out.append(v)
        else:
            stack.pop()
    return out


def _decode_binary(name: str, dtype: str, raw: bytes) -> list[Any]:
    if dtype == "BYTES":
        out: list[Any] = []
        pos = 0
        while pos < len(raw):
            if pos + 4 > len(raw):
                raise BadRequest(f"binary BYTES data of input '{name}' is truncated", "binary_data")
            (length,) = struct.unpack_from("<I", raw, pos)
            pos += 4
            chunk = raw[pos : pos + length]
            pos += length
            try:
                out.append(chunk.decode("utf-8"))
            except UnicodeDecodeError:
                raise ContractViolation(
                    [Violation("type", "BYTES values must be UTF-8 text", feature=name)]
                ) from None
        return out
    code = NUMERIC_TYPES[dtype]
    if code is None:
        return np.frombuffer(raw, dtype=np.bool_).tolist()
    item = np.dtype(code).itemsize
    if len(raw) % item:
        raise BadRequest(
            f"binary data of input '{name}' is not a whole number of {dtype} values", "binary_data"
        )
    values: list[Any] = np.frombuffer(raw, dtype=code).astype(np.float64).tolist()
    return values
