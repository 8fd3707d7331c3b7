"""HTTP routes: TF Serving REST (``/v1``), Open Inference Protocol v2 (``/v2``), feedback, status, metrics.

Thin: read the body, call a flow, shape the answer. Bodies are parsed by hand (not by pydantic) so that
every client error is a 400 in the ``{"error": ...}`` shape, naming the row, the feature and the rule.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from functools import partial
from typing import Any

from fastapi import APIRouter, Request, Response
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from core.errors import Invalid
from core.http import error_response, json_response, request_id_of
from predictions.writer import LogUnavailable
from registry.schema import FeatureKind, ModelSchema
from service.serving import docs
from service.serving.codecs import BadRequest, BodyTooLarge, parse_json, parse_v1, parse_v2, split_binary
from service.serving.contracts import ContractViolation
from service.serving.flows import AppState, OutputContractError, Prediction, feedback, parse_feedback, predict
from service.serving.manager import LoadedVersion, NotServed

router = APIRouter()
V1, V2 = "TF Serving REST", "Open Inference Protocol v2"


def _state(request: Request) -> AppState:
    state: AppState = request.app.state.dw
    return state


async def _body(request: Request, limit: int) -> bytes:
    declared = request.headers.get("content-length")
    if declared and declared.isdigit() and int(declared) > limit:
        raise BodyTooLarge(f"the body has {declared} bytes, more than the limit of {limit}", "max_body_bytes")
    chunks: list[bytes] = []
    size = 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            raise BodyTooLarge(f"the body exceeds the limit of {limit} bytes", "max_body_bytes")
        chunks.append(chunk)
    return b"".join(chunks)


class BadVersion(Invalid):
    """A version in the path that is not a number (400 through the app's DomainError handler)."""


def _version(value: str | None) -> int | None:
    if value is None:
        return None
    if not (value.isascii() and value.isdigit()):
        raise BadVersion(f"version must be a positive integer like 3, got {value!r} (rule: version)")
    return int(value)


async def _predict(
    request: Request,
    name: str,
    version: str | None,
    label: str | None,
    protocol: str,
    shape: Callable[[Prediction, Any], dict[str, Any]],
    decode: Callable[[Any, bytes], Callable[[ModelSchema], Any]],
) -> Response:
    started = time.perf_counter()
    state = _state(request)
    rid = request_id_of(request)
    try:
        raw = await _body(request, state.settings.max_body_bytes)
        header, binary = split_binary(raw, request.headers.get("inference-header-content-length"))
        payload = parse_json(header)
        result = await predict(
            state=state,
            model_name=name,
            version=_version(version),
            label=label,
            parse=decode(payload, binary),
            request_id=rid,
            protocol=protocol,
            started=started,
        )
    except ContractViolation as exc:
        state.metrics.violation(name, sorted({v.rule for v in exc.violations}))
        state.metrics.request(protocol, "rejected")
        return error_response(400, str(exc), rid, violations=[v.to_dict() for v in exc.violations])
    except BadRequest as exc:
        state.metrics.violation(name, [exc.rule])
        state.metrics.request(protocol, "rejected")
        return error_response(exc.status_code, str(exc), rid)
    except BadVersion as exc:
        state.metrics.request(protocol, "rejected")
        return error_response(400, str(exc), rid)
    except NotServed as exc:
        state.metrics.request(protocol, "not_found")
        return error_response(404, str(exc), rid)
    except OutputContractError as exc:
        state.metrics.request(protocol, "output_violation")
        return error_response(500, str(exc), rid, violations=[v.to_dict() for v in exc.violations])
    except LogUnavailable as exc:
        state.metrics.request(protocol, "log_unavailable")
        return error_response(503, f"prediction log unavailable: {exc}", rid)
    state.metrics.request(protocol, "ok")
    return json_response(shape(result, payload), 200, rid)


# -- TF Serving REST ------------------------------------------------------------------------------
def _v1_decode(payload: Any, _binary: bytes) -> Callable[[ModelSchema], Any]:
    return partial(parse_v1, payload=payload)


def _v1_shape(result: Prediction, payload: Any) -> dict[str, Any]:
    key = "predictions" if isinstance(payload, dict) and "instances" in payload else "outputs"
    return {key: result.values, "prediction_ids": result.prediction_ids, "model_version": str(result.version)}


PREDICT_DOC: dict[str, Any] = {
    "openapi_extra": docs.V1_PREDICT,
    "responses": docs.V1_PREDICT_RESPONSES,
    "tags": [V1],
}


@router.post("/v1/models/{name}:predict", summary="Predict with the serving version", **PREDICT_DOC)
async def v1_predict(request: Request, name: str) -> Response:
    """Row format `{"instances": [...]}` -> `predictions`; columnar `{"inputs": {...}}` -> `outputs`.
    Each row gets a `prediction_ids` entry (send it back with feedback)."""
    return await _predict(request, name, None, None, "v1", _v1_shape, _v1_decode)


@router.post(
    "/v1/models/{name}/versions/{version}:predict", summary="Predict with one version", **PREDICT_DOC
)
async def v1_predict_version(request: Request, name: str, version: str) -> Response:
    """Like `:predict`, answered by a specific loaded version (the serving one or a labelled one)."""
    return await _predict(request, name, version, None, "v1", _v1_shape, _v1_decode)


@router.post(
    "/v1/models/{name}/labels/{label}:predict", summary="Predict with a labelled version", **PREDICT_DOC
)
async def v1_predict_label(request: Request, name: str, label: str) -> Response:
    """Like `:predict`, answered by the version the label points to (e.g. `canary`)."""
    return await _predict(request, name, None, label, "v1", _v1_shape, _v1_decode)


async def _post_only(request: Request) -> Response:
    """Any other method on a ``:predict`` path: 405 naming POST (not "model 'x:predict' is not served")."""
    resp = error_response(
        405,
        f"{request.method} is not allowed on {request.url.path}: send the request with POST (rule: method)",
        request_id_of(request),
    )
    resp.headers["Allow"] = "POST"
    return resp


# before the GET routes below: their {name} would otherwise take "credit:predict" as a model name
for _path in (
    "/v1/models/{name}:predict",
    "/v1/models/{name}/versions/{version}:predict",
    "/v1/models/{name}/labels/{label}:predict",
):
    router.add_api_route(
        _path, _post_only, methods=["GET", "HEAD", "PUT", "PATCH", "DELETE"], include_in_schema=False
    )


def _status(state: AppState, name: str, version: str | None, label: str | None, rid: str) -> Response:
    served = state.manager.models.get(name)
    if served is None:
        return error_response(404, f"Servable not found for request: model '{name}' is not served here", rid)
    entries = [(v, "AVAILABLE", "") for v in served.versions] + [(v, "LOADING", "") for v in served.loading]
    entries += [(v, "END", err) for v, err in served.failed.items()]
    try:
        wanted = (
            state.manager.resolve(name, version=_version(version), label=label).version
            if (version or label)
            else None
        )
    except NotServed as exc:
        return error_response(404, str(exc), rid)
    rows = [
        {
            "version": str(v),
            "state": st,
            "status": {"error_code": "UNKNOWN" if err else "OK", "error_message": err},
        }
        for v, st, err in sorted(entries, reverse=True)
        if wanted is None or v == wanted
    ]
    return json_response({"model_version_status": rows}, 200, rid)


STATUS_DOC: dict[str, Any] = {"responses": docs.V1_STATUS_RESPONSES, "tags": [V1]}


@router.get("/v1/models/{name}", summary="Version status", **STATUS_DOC)
async def v1_status(request: Request, name: str) -> Response:
    """The loaded versions of a model and their state (AVAILABLE, LOADING, END)."""
    return _status(_state(request), name, None, None, request_id_of(request))


@router.get("/v1/models/{name}/versions/{version}", summary="Status of one version", **STATUS_DOC)
async def v1_status_version(request: Request, name: str, version: str) -> Response:
    """The state of one version."""
    return _status(_state(request), name, version, None, request_id_of(request))


@router.get("/v1/models/{name}/labels/{label}", summary="Status of a labelled version", **STATUS_DOC)
async def v1_status_label(request: Request, name: str, label: str) -> Response:
    """The state of the version a label points to."""
    return _status(_state(request), name, None, label, request_id_of(request))


def _tf_dtype(kind: FeatureKind) -> str:
    return "DT_FLOAT" if kind is FeatureKind.NUMERIC else "DT_STRING"


def _metadata(request: Request, name: str, version: str | None, label: str | None) -> Response:
    rid = request_id_of(request)
    try:
        lv = _state(request).manager.resolve(name, version=_version(version), label=label)
    except NotServed as exc:
        return error_response(404, str(exc), rid)
    dim = {"dim": [{"size": "-1", "name": ""}], "unknown_rank": False}
    inputs = {
        f.name: {"dtype": _tf_dtype(f.kind), "tensor_shape": dim, "name": f"serving_default_{f.name}:0"}
        for f in lv.schema.features
    }
    outputs = {
        o.name: {"dtype": "DT_FLOAT", "tensor_shape": dim, "name": "StatefulPartitionedCall:0"}
        for o in lv.schema.outputs
    }
    body = {
        "model_spec": {"name": name, "signature_name": "", "version": str(lv.version)},
        "metadata": {
            "signature_def": {
                "signature_def": {
                    "serving_default": {
                        "inputs": inputs,
                        "outputs": outputs,
                        "method_name": "tensorflow/serving/predict",
                    }
                }
            }
        },
        "driftwarden": {"schema": lv.schema.to_dict()},
    }
    return json_response(body, 200, rid)


META_DOC: dict[str, Any] = {"responses": docs.V1_METADATA_RESPONSES, "tags": [V1]}


@router.get("/v1/models/{name}/metadata", summary="Signature and contract", **META_DOC)
async def v1_metadata(request: Request, name: str) -> Response:
    """The `serving_default` signature of the serving version, plus its input/output contract."""
    return _metadata(request, name, None, None)


@router.get("/v1/models/{name}/versions/{version}/metadata", summary="Signature of one version", **META_DOC)
async def v1_metadata_version(request: Request, name: str, version: str) -> Response:
    """The signature and contract of one version."""
    return _metadata(request, name, version, None)


@router.get(
    "/v1/models/{name}/labels/{label}/metadata", summary="Signature of a labelled version", **META_DOC
)
async def v1_metadata_label(request: Request, name: str, label: str) -> Response:
    """The signature and contract of the version a label points to."""
    return _metadata(request, name, None, label)


@router.post(
    "/v1/models/{name}/feedback",
    summary="Ground-truth labels",
    openapi_extra=docs.FEEDBACK,
    responses=docs.FEEDBACK_RESPONSES,
    tags=["Feedback"],
)
async def v1_feedback(request: Request, name: str) -> Response:
    """Attach ground truth to earlier predictions by `prediction_id`; ids that are not logged predictions
    of this model come back in `unknown_ids`."""
    state = _state(request)
    rid = request_id_of(request)
    try:
        labels = parse_feedback(parse_json(await _body(request, state.settings.max_body_bytes)))
        result = await feedback(state=state, model_name=name, labels=labels)
    except BadRequest as exc:
        return error_response(exc.status_code, str(exc), rid)
    except NotServed as exc:
        return error_response(404, str(exc), rid)
    return json_response(result, 200, rid)


# -- Open Inference Protocol v2 -------------------------------------------------------------------
def _v2_decode(payload: Any, binary: bytes) -> Callable[[ModelSchema], Any]:
    return partial(parse_v2, payload=payload, binary=binary)


def _v2_shape(result: Prediction, payload: Any) -> dict[str, Any]:
    rid = payload.get("id") if isinstance(payload, dict) else None
    return {
        "model_name": result.model_name,
        "model_version": str(result.version),
        "id": rid if isinstance(rid, str) else "",
        "parameters": {"prediction_ids": ",".join(result.prediction_ids)},
        "outputs": [
            {
                "name": result.output_name,
                "shape": [len(result.values)],
                "datatype": "FP32",
                "data": result.values,
            }
        ],
    }


INFER_DOC: dict[str, Any] = {
    "openapi_extra": docs.V2_INFER,
    "responses": docs.V2_INFER_RESPONSES,
    "tags": [V2],
}


@router.post("/v2/models/{name}/infer", summary="Inference with the serving version", **INFER_DOC)
async def v2_infer(request: Request, name: str) -> Response:
    """Typed tensors: one per feature, or one `[rows, features]` tensor in schema order. Prediction ids are
    in `parameters.prediction_ids` (comma-separated, one per row)."""
    return await _predict(request, name, None, None, "v2", _v2_shape, _v2_decode)


@router.post("/v2/models/{name}/versions/{version}/infer", summary="Inference with one version", **INFER_DOC)
async def v2_infer_version(request: Request, name: str, version: str) -> Response:
    """Like `/infer`, answered by a specific loaded version."""
    return await _predict(request, name, version, None, "v2", _v2_shape, _v2_decode)


def _v2_dtype(kind: FeatureKind) -> str:
    return "FP32" if kind is FeatureKind.NUMERIC else "BYTES"


def _v2_model(request: Request, name: str, version: str | None) -> Response:
    rid = request_id_of(request)
    manager = _state(request).manager
    try:
        lv: LoadedVersion = manager.resolve(name, version=_version(version))
    except NotServed as exc:
        return error_response(404, str(exc), rid)
    body = {
        "name": name,
        "versions": [str(v) for v in sorted(manager.models[name].versions)],
        "platform": "tensorflow_savedmodel",
        "inputs": [
            {"name": f.name, "datatype": _v2_dtype(f.kind), "shape": [-1]} for f in lv.schema.features
        ],
        "outputs": [{"name": o.name, "datatype": "FP32", "shape": [-1]} for o in lv.schema.outputs],
    }
    return json_response(body, 200, rid)


@router.get("/v2/models/{name}", summary="Model metadata", responses=docs.V2_MODEL_RESPONSES, tags=[V2])
async def v2_model(request: Request, name: str) -> Response:
    """Inputs (one per feature) and outputs of the serving version, and the loaded versions."""
    return _v2_model(request, name, None)


@router.get(
    "/v2/models/{name}/versions/{version}",
    summary="Model version metadata",
    responses=docs.V2_MODEL_RESPONSES,
    tags=[V2],
)
async def v2_model_version(request: Request, name: str, version: str) -> Response:
    """Metadata of one loaded version."""
    return _v2_model(request, name, version)


def _ready(request: Request, name: str, version: str | None) -> Response:
    rid = request_id_of(request)
    try:
        _state(request).manager.resolve(name, version=_version(version))
    except NotServed as exc:
        return error_response(404, str(exc), rid)
    return Response(status_code=200, headers={"X-Request-Id": rid})


@router.get("/v2/models/{name}/ready", summary="Model ready", tags=[V2])
async def v2_model_ready(request: Request, name: str) -> Response:
    """200 when the model's serving version is loaded, 404 otherwise."""
    return _ready(request, name, None)


@router.get("/v2/models/{name}/versions/{version}/ready", summary="Model version ready", tags=[V2])
async def v2_model_version_ready(request: Request, name: str, version: str) -> Response:
    """200 when that version is loaded, 404 otherwise."""
    return _ready(request, name, version)


@router.get("/v2/health/live", summary="Server live", tags=[V2])
async def v2_live() -> Response:
    """200 while the process answers."""
    return Response(status_code=200)


@router.get("/v2/health/ready", summary="Server ready", tags=[V2])
async def v2_ready(request: Request) -> Response:
    """200 once the models the registry asks for are loaded, 400 before."""
    if _state(request).manager.ready():
        return Response(status_code=200)
    return error_response(400, "models are still loading", None)


@router.get("/v2", summary="Server metadata", tags=[V2])
async def v2_server() -> Response:
    """Name, version and protocol extensions of the server."""
    from importlib.metadata import version

    return json_response(
        {"name": "driftwarden", "version": version("driftwarden"), "extensions": ["binary_tensor_data"]}
    )


# -- operations -----------------------------------------------------------------------------------
@router.get("/status", summary="Serving and prediction log status", tags=["Operations"])
async def status(request: Request) -> Response:
    """Loaded versions per model, and the log writer's counters (queue depth, spool size, rows written,
    rows dropped, which must stay 0)."""
    state = _state(request)
    models = {
        name: {
            "serving": m.serving,
            "labels": m.labels,
            "loaded": sorted(m.versions),
            "loading": sorted(m.loading),
            "failed": m.failed,
            "batches": {
                str(v): {"calls": lv.batcher.calls, "rows": lv.batcher.rows} for v, lv in m.versions.items()
            },
        }
        for name, m in state.manager.models.items()
    }
    log: dict[str, Any] = {"enabled": state.writer is not None}
    if state.writer is not None:
        w = state.writer
        s = w.stats
        log.update(
            durability=w.durability,
            queue_rows=w.queued_rows,
            spool_rows=w.spool.pending_rows,
            spool_bytes=w.spool.pending_bytes,
            rows_written=s.rows_written,
            rows_replayed=s.rows_replayed,
            rows_spooled=s.rows_spooled,
            rows_dropped=s.rows_dropped,
            write_errors=s.write_errors,
            database_ok=s.database_ok,
            last_error=s.last_error,
        )
    return json_response(
        {"models": models, "prediction_log": log, "registry_error": state.manager.last_refresh_error}
    )


@router.get("/metrics", summary="Prometheus metrics", tags=["Operations"])
async def metrics(request: Request) -> Response:
    """Counters of requests, predictions, contract flags and violations, and the prediction log."""
    return Response(generate_latest(_state(request).metrics.registry), media_type=CONTENT_TYPE_LATEST)
