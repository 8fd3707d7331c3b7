"""KServe's inference logger read (pure, no I/O): its CloudEvents, the bodies it carries and the log rows of a
request/response pair.

KServe's logger (``pkg/logger``) posts each inference as two CloudEvents 1.0 in binary mode: the request
(``ce-type: org.kubeflow.serving.inference.request``) before the model answers and the response
(``...inference.response``) after, only when the model answered 200; both carry the same ``ce-id`` and the
extension ``inferenceservicename``, and the body is what the client sent or got, in TF Serving's REST format
(``instances`` / ``inputs``, ``predictions`` / ``outputs``) or the Open Inference Protocol v2's (``inputs`` /
``outputs`` tensors). Structured mode (``application/cloudevents+json``) is read too.

The request's rows are read leniently, like the ingest route's records: the model has already answered, so
the contract flags a value and never refuses it; only a body whose rows cannot be told apart is a 400. The
response is read by the version's task (``service.serving.records.read_value``), so a prediction of the wrong
shape is a 400 when its event arrives, before anything is kept.
"""

from __future__ import annotations

import base64
import binascii
import math
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import orjson
from cloudevents.core.bindings.http import HTTPMessage, from_http_event
from cloudevents.core.exceptions import BaseCloudEventException

from core.http import DEPTH_REFUSAL, DEPTH_RULE, nests_deeper
from core.times import outside, utc_in_range
from predictions.batch import LogBatch
from predictions.pending import build
from predictions.service.pairing import Half, Pair
from registry.contracts import ContractViolation, flag_rows
from registry.schema import ModelSchema, Task
from service.serving.codecs import BadRequest, parse_json, repeated_tensor
from service.serving.records import (
    MAX_RECORDS,
    MAX_RUN,
    UNANSWERED,
    Record,
    check_records,
    check_storable,
    keyed_ids,
    read_value,
    request_rows,
    segments,
)

SOURCE = "cloudevents"
PROTOCOL = "kserve"  # the log's protocol column (8 characters at most)
REQUEST_TYPE = "org.kubeflow.serving.inference.request"
RESPONSE_TYPE = "org.kubeflow.serving.inference.response"
TYPES: dict[str, Half] = {REQUEST_TYPE: "request", RESPONSE_TYPE: "response"}
MODEL_EXTENSION = "inferenceservicename"
MAX_EVENT_ID = 256
STRUCTURED = "application/cloudevents+json"


@dataclass(frozen=True)
class Event:
    """One half of an inference as KServe's logger reported it."""

    id: str
    half: Half
    model: str
    time: datetime | None  # ce-time
    body: bytes


def read_event(headers: Mapping[str, str], body: bytes, model: str | None) -> Event:
    """A CloudEvent of KServe's logger (binary or structured mode); ``model``: the ``?model=`` of the URL,
    used when the event names none. A :class:`BadRequest` names the missing or bad attribute."""
    lowered = {k.lower(): v for k, v in headers.items()}
    binary = any(k.startswith("ce-") for k in lowered)
    if binary:
        if nests_deeper(body):  # the SDK parses the body with Python's json, which recursion stops
            raise BadRequest(DEPTH_REFUSAL, DEPTH_RULE)
        attrs: Mapping[str, Any] = {k[3:]: v for k, v in lowered.items() if k.startswith("ce-")}
        where = "the header ce-{}"
    else:
        if not lowered.get("content-type", "").startswith(STRUCTURED):
            raise BadRequest(
                "not a CloudEvent: send binary mode (ce-id, ce-type, ce-source, ce-specversion headers) or "
                f"structured mode (Content-Type: {STRUCTURED})",
                "cloudevent",
            )
        document = parse_json(body)
        if not isinstance(document, Mapping):
            raise BadRequest("a structured CloudEvent must be a JSON object", "cloudevent")
        attrs = document
        where = "the attribute {}"
    for name in ("id", "type"):
        value = attrs.get(name)
        if not isinstance(value, str) or not value:
            raise BadRequest(f"{where.format(name)} is required (a non-empty string)", "required")
    event_id, kind = str(attrs["id"]), str(attrs["type"])
    if len(event_id) > MAX_EVENT_ID or not event_id.isprintable():
        raise BadRequest(f"{where.format('id')} must be 1 to {MAX_EVENT_ID} printable characters", "id")
    half = TYPES.get(kind)
    if half is None:
        raise BadRequest(
            f"{where.format('type')} {kind!r} is not KServe's logger's: {REQUEST_TYPE} or {RESPONSE_TYPE}",
            "type",
        )
    try:
        event = from_http_event(HTTPMessage(dict(headers), body))
    except (BaseCloudEventException, ValueError) as exc:  # a time that does not parse is a ValueError
        raise BadRequest(f"not a valid CloudEvent 1.0: {exc}", "cloudevent") from None
    named = event.get_extension(MODEL_EXTENSION)
    model_name: str | None = named if isinstance(named, str) and named else model
    if not model_name:
        raise BadRequest(
            f"{where.format(MODEL_EXTENSION)} (KServe sets it) or ?model=NAME in the URL names the model",
            "required",
        )
    moment = event.get_time()
    at = utc_in_range(moment) if isinstance(moment, datetime) else None
    if isinstance(moment, datetime) and at is None:
        raise BadRequest(f"{where.format('time')} {outside(attrs.get('time', moment))}", "time")
    return Event(
        id=event_id,
        half=half,
        model=model_name,
        time=at,
        body=body if binary else _data(event.get_data()),
    )


def _data(data: Any) -> bytes:
    """A structured event's data as the bytes KServe's logger would have posted in binary mode."""
    if isinstance(data, bytes):
        return data
    if isinstance(data, str):
        return data.encode()
    return orjson.dumps(data)


# -- request bodies -------------------------------------------------------------------------------
def read_inputs(schema: ModelSchema, payload: Any) -> list[dict[str, Any]]:
    """The rows of a request body (TF Serving v1 row or columnar, OIP v2 tensors), each an object of
    feature values; unknown or missing features are left for the contract to flag."""
    if not isinstance(payload, Mapping):
        raise BadRequest('the request body must be a JSON object with "instances" or "inputs"', "format")
    if "instances" in payload:
        rows = _row_format(schema, payload["instances"], "instances")
    elif isinstance(payload.get("inputs"), Mapping):
        rows = _columnar(payload["inputs"])
    elif isinstance(payload.get("inputs"), list):
        items = payload["inputs"]
        tensors = items and all(isinstance(t, Mapping) and "datatype" in t for t in items)
        rows = _tensors(schema, items) if tensors else _row_format(schema, items, "inputs")
    else:
        raise BadRequest(
            'the request body has no "instances" or "inputs" (TF Serving REST or Open Inference Protocol v2)',
            "format",
        )
    if not rows:
        raise BadRequest("the request body holds no rows", "empty")
    if len(rows) > MAX_RECORDS:
        raise BadRequest(f"{len(rows)} rows exceed the limit of {MAX_RECORDS} per event", "max_rows")
    for i, row in enumerate(rows):
        check_storable(row, f"the request's row {i}")
    return rows


def _row_format(schema: ModelSchema, items: Any, key: str) -> list[dict[str, Any]]:
    if not isinstance(items, list):
        raise BadRequest(f'"{key}" must be a list of rows', "format")
    names = schema.feature_names
    rows: list[dict[str, Any]] = []
    for i, item in enumerate(items):
        if isinstance(item, Mapping):
            rows.append(dict(item))
        elif isinstance(item, list) and len(item) == len(names):
            rows.append(dict(zip(names, item, strict=True)))
        elif not isinstance(item, list | Mapping) and len(names) == 1:
            rows.append({names[0]: item})
        else:
            raise BadRequest(
                f"{key}[{i}] must be an object of named features or a list of {len(names)} values in the "
                f"order {', '.join(names)}",
                "format",
            )
    return rows


def _columnar(columns: Mapping[str, Any]) -> list[dict[str, Any]]:
    lengths = {name: len(col) for name, col in columns.items() if isinstance(col, list)}
    odd = [name for name in columns if name not in lengths]
    if odd:
        raise BadRequest(f'inputs.{odd[0]} must be a list of values (columnar "inputs")', "format")
    if len(set(lengths.values())) > 1:
        raise BadRequest(f"the columns of inputs differ in length: {lengths}", "shape")
    n = next(iter(lengths.values()), 0)
    return [{name: columns[name][i] for name in columns} for i in range(n)]


def _tensors(schema: ModelSchema, tensors: list[Any]) -> list[dict[str, Any]]:
    """OIP v2 input tensors: one per feature (``[rows]`` or ``[rows, 1]``) or one ``[rows, features]``."""
    decoded = _decoded("inputs", tensors)
    names = schema.feature_names
    if len(decoded) == 1 and decoded[0][0] not in schema.feature_set:
        name, shape, data = decoded[0]
        if len(shape) != 2 or shape[1] != len(names):
            raise BadRequest(
                f"inputs[0] ({name!r}) must have shape [rows, {len(names)}] (features in the order "
                f"{', '.join(names)}), got {shape}",
                "shape",
            )
        width = len(names)
        return [dict(zip(names, data[i * width : (i + 1) * width], strict=True)) for i in range(shape[0])]
    columns: dict[str, list[Any]] = {}
    for k, (name, shape, data) in enumerate(decoded):
        if len(shape) > 2 or (len(shape) == 2 and shape[1] != 1):
            raise BadRequest(
                f"inputs[{k}] ({name!r}) must have shape [rows] or [rows, 1], got {shape}", "shape"
            )
        columns[name] = data
    return _columnar(columns)


def _decoded(key: str, tensors: list[Any]) -> list[tuple[str, list[int], list[Any]]]:
    """Each tensor of ``inputs`` or ``outputs`` read, its name unique (``codecs.repeated_tensor``, as
    ``/v2/.../infer``)."""
    repeat = repeated_tensor(tensors)
    if repeat is not None:
        k, name = repeat
        raise BadRequest(
            f"{key}[{k}].name: {name!r} is sent twice (an earlier tensor has the same name); each tensor "
            "name once",
            "duplicate_tensor",
        )
    return [_tensor(f"{key}[{k}]", t) for k, t in enumerate(tensors)]


def _tensor(where: str, tensor: Any) -> tuple[str, list[int], list[Any]]:
    """An OIP v2 tensor's name, shape and flat data (BYTES data as text)."""
    name, shape, dtype = tensor.get("name"), tensor.get("shape"), tensor.get("datatype")
    if not isinstance(name, str) or not name:
        raise BadRequest(f"{where}.name is required", "required")
    if (
        not isinstance(shape, list)
        or not shape
        or not all(isinstance(d, int) and not isinstance(d, bool) and d >= 0 for d in shape)
    ):
        raise BadRequest(f"{where}.shape must be a list of non-negative integers", "shape")
    data = _flat(tensor.get("data"))
    if data is None or len(data) != math.prod(shape):
        raise BadRequest(f"{where}.data must hold {math.prod(shape)} values for shape {shape}", "shape")
    if dtype == "BYTES":
        data = [_text(v) for v in data]
    return name, shape, data


def _flat(data: Any) -> list[Any] | None:
    if not isinstance(data, list):
        return None
    out: list[Any] = []
    stack = [iter(data)]
    while stack:
        for item in stack[-1]:
            if isinstance(item, list):
                stack.append(iter(item))
                break
            out.append(item)
        else:
            stack.pop()
    return out


def _text(value: Any) -> Any:
    """A BYTES element as text (KServe's JSON carries it as a string, base64 when it is not UTF-8)."""
    if isinstance(value, str):
        return value
    if isinstance(value, Mapping) and isinstance(value.get("b64"), str):
        try:
            return base64.b64decode(value["b64"], validate=True).decode()
        except (binascii.Error, UnicodeDecodeError):
            return value
    return value


# -- response bodies ------------------------------------------------------------------------------
def read_outputs(schema: ModelSchema, payload: Any) -> list[Any] | None:
    """The predictions of a response body, one per row, each checked by the task (a multi-class model's a
    vector); None for an error answer (``{"error": ...}``), which is counted and never logged."""
    if isinstance(payload, Mapping) and "error" in payload and not {"predictions", "outputs"} & set(payload):
        return None
    if not isinstance(payload, Mapping):
        raise BadRequest('the response body must be a JSON object with "predictions" or "outputs"', "format")
    if "predictions" in payload:
        items, key = payload["predictions"], "predictions"
    elif isinstance(payload.get("outputs"), list) and all(
        isinstance(t, Mapping) and "datatype" in t for t in payload["outputs"]
    ):
        items, key = _output_tensors(schema, payload["outputs"]), "outputs"
    elif isinstance(payload.get("outputs"), Mapping):
        items, key = _output_column(schema, payload["outputs"]), "outputs"
    elif "outputs" in payload:
        items, key = payload["outputs"], "outputs"
    else:
        raise BadRequest(
            'the response body has no "predictions" or "outputs" (TF Serving REST or Open Inference '
            "Protocol v2)",
            "format",
        )
    if not isinstance(items, list) or not items:
        raise BadRequest(f'"{key}" must be a non-empty list (one prediction per row)', "format")
    values = [_prediction(schema, item) for item in items]
    for i, value in enumerate(values):
        read_value(value, schema, f"{key}[{i}]")
    return values


def _prediction(schema: ModelSchema, item: Any) -> Any:
    """One row's answer as the task reads it: a named output picked, ``[p]`` unwrapped, a binary model's two
    class probabilities ``[p0, p1]`` as ``p1``."""
    if isinstance(item, Mapping):
        name = schema.output.name
        if name in item:
            item = item[name]
        elif len(item) == 1:
            item = next(iter(item.values()))
    if isinstance(item, list) and schema.kind is not Task.MULTICLASS:
        if len(item) == 1:
            return item[0]
        if len(item) == 2 and schema.kind is Task.BINARY:
            return item[1]
    return item


def _output_column(schema: ModelSchema, outputs: Mapping[str, Any]) -> Any:
    """TF Serving's columnar answer: the model's output by name, else the only one."""
    name = schema.output.name
    if name in outputs:
        return outputs[name]
    if len(outputs) == 1:
        return next(iter(outputs.values()))
    raise BadRequest(f'"outputs" has no output {name!r} (it has {sorted(outputs)})', "outputs")


def _output_tensors(schema: ModelSchema, tensors: list[Any]) -> list[Any]:
    """OIP v2 output tensors: the model's output by name, else the first; ``[rows]``, ``[rows, 1]`` or
    ``[rows, K]`` (K class probabilities)."""
    decoded = _decoded("outputs", tensors)
    chosen = next((d for d in decoded if d[0] == schema.output.name), decoded[0])
    _, shape, data = chosen
    if len(shape) == 1:
        return data
    if len(shape) == 2:
        k = shape[1]
        return [data[i * k : (i + 1) * k] for i in range(shape[0])]
    raise BadRequest(
        f"the output tensor {chosen[0]!r} must have shape [rows] or [rows, K], got {shape}", "shape"
    )


# -- pairs ----------------------------------------------------------------------------------------
def check_half(schema: ModelSchema, event: Event) -> int | None:
    """Read an arriving half by the version's contract (raises BadRequest): its rows, or None for an error
    answer."""
    payload = parse_json(event.body)
    if event.half == "request":
        rows = read_inputs(schema, payload)
        try:  # what the pairing would refuse to log, refused while the sender can still be answered
            flag_rows(schema, rows)
        except ContractViolation as exc:
            v = exc.violations[0]
            raise BadRequest(f"the request's row {v.row}, input {v.feature!r}: {v.message}", v.rule) from None
        return len(rows)
    outputs = read_outputs(schema, payload)
    return None if outputs is None else len(outputs)


def pair_rows(
    pair: Pair, contract: tuple[int, ModelSchema], *, received_at: datetime
) -> tuple[str, list[LogBatch]]:
    """What a pair becomes in the log: ``logged`` (both halves, one row per prediction at the response's
    time), ``unanswered`` (the request alone: its inputs with no prediction), ``mismatched`` (as many
    predictions as rows it was not: logged unanswered), ``error_response`` (the model answered an error:
    nothing logged) or ``expired_response`` (a response without its request: nothing to log)."""
    if pair.request is None:
        return "expired_response", []
    version, schema = contract
    inputs = read_inputs(schema, parse_json(pair.request))
    outcome, predictions = "unanswered", [UNANSWERED] * len(inputs)
    moment = pair.request_time or received_at
    if pair.response is not None:
        outputs = read_outputs(schema, parse_json(pair.response))
        if outputs is None:
            return "error_response", []
        if len(outputs) == len(inputs):
            outcome, predictions, moment = "logged", outputs, pair.response_time or received_at
        else:
            outcome = "mismatched"
    records = [
        Record(
            index=i,
            id=f"{pair.event_id}/{i}",
            time=moment,
            version=None,
            inputs=row,
            prediction=p,
            label=None,
            has_label=False,
        )
        for i, (row, p) in enumerate(zip(inputs, predictions, strict=True))
    ]
    rows: list[LogBatch] = []
    for group in check_records(records, {None: (version, schema)}):
        for seg in segments(pair.model_name, group, moment):
            built = request_rows(
                pair.model_name,
                group,
                seg.keep,
                seg.ids,
                moment,
                pair.event_id[:128],
                source=SOURCE,
                protocol=PROTOCOL,
            )
            rows += build([built])[0]
    return outcome, rows


def prediction_ids(model_name: str, event_id: str, n: int) -> list[str]:
    """The prediction ids of the rows of event ``event_id`` (labels go to the feedback route under them)."""
    keys = [f"{event_id}/{i}" for i in range(n)]
    return [pid for k in range(0, n, MAX_RUN) for pid in keyed_ids(model_name, keys[k : k + MAX_RUN])]
