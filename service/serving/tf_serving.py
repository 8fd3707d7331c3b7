"""TensorFlow Serving REST routes (``/v1``): predict (row and columnar), status, metadata, feedback, and the
ingest route of predictions answered elsewhere.

Thin: read the body, call a flow, shape the answer. Bodies are parsed by hand (not by pydantic) so that
every client error is a 400 in the ``{"error": ...}`` shape, naming the row, the feature and the rule.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from fastapi import APIRouter, Request, Response

from core.auth import Scope
from core.http import (
    caller_request_id,
    error_response,
    json_response,
    read_body,
    request_id_of,
    require_scope,
)
from core.openapi import PREDICT_SCOPE
from predictions.writer import LogUnavailable
from registry.schema import FeatureKind, ModelSchema
from registry.signature import SourceSignature
from service.serving import docs
from service.serving.codecs import BadRequest, Columns, parse_json, parse_v1
from service.serving.flows import AppState, Prediction, feedback, parse_feedback
from service.serving.ingest import LogOff, ingest
from service.serving.manager import NotServed
from service.serving.routing import app_state, path_version, predict_route
from service.serving.source_codec import parse_source_v1, v1_answer

router = APIRouter()
V1 = "TF Serving REST"


def _v1_decode(payload: Any, _binary: bytes) -> Callable[[ModelSchema, SourceSignature | None], Columns]:
    def parse(schema: ModelSchema, signature: SourceSignature | None) -> Columns:
        if signature is None:
            return parse_v1(schema, payload)
        return parse_source_v1(schema, signature, payload)  # an imported model: its own signature

    return parse


def _v1_shape(result: Prediction, payload: Any) -> dict[str, Any]:
    rows = isinstance(payload, dict) and "instances" in payload
    values = result.values
    if result.signature is not None and result.outputs is not None:
        values = v1_answer(result.signature, result.outputs, rows=rows)
    key = "predictions" if rows else "outputs"
    return {key: values, "prediction_ids": result.prediction_ids, "model_version": str(result.version)}


PREDICT = [require_scope(Scope.PREDICT)]  # open unless predict_requires_token
PREDICT_DOC: dict[str, Any] = {  # the scope check of :predict is inside predict_route (no dependency cost)
    "openapi_extra": {**docs.V1_PREDICT, **PREDICT_SCOPE},
    "responses": docs.V1_PREDICT_RESPONSES,
    "tags": [V1],
}


@router.post("/v1/models/{name}:predict", summary="Predict with the serving version", **PREDICT_DOC)
async def v1_predict(request: Request, name: str) -> Response:
    """Row format `{"instances": [...]}` -> `predictions`; columnar `{"inputs": {...}}` -> `outputs`.
    Each row gets a `prediction_ids` entry (send it back with feedback)."""
    return await predict_route(request, name, None, None, "v1", _v1_shape, _v1_decode)


@router.post(
    "/v1/models/{name}/versions/{version}:predict", summary="Predict with one version", **PREDICT_DOC
)
async def v1_predict_version(request: Request, name: str, version: str) -> Response:
    """Like `:predict`, answered by a specific loaded version (the serving one or a labelled one)."""
    return await predict_route(request, name, version, None, "v1", _v1_shape, _v1_decode)


@router.post(
    "/v1/models/{name}/labels/{label}:predict", summary="Predict with a labelled version", **PREDICT_DOC
)
async def v1_predict_label(request: Request, name: str, label: str) -> Response:
    """Like `:predict`, answered by the version the label points to (e.g. `canary`)."""
    return await predict_route(request, name, None, label, "v1", _v1_shape, _v1_decode)


def _status(state: AppState, name: str, version: str | None, label: str | None, rid: str) -> Response:
    served = state.manager.models.get(name)
    if served is None:
        return error_response(404, f"Servable not found for request: model '{name}' is not served here", rid)
    entries = [(v, "AVAILABLE", "") for v in served.versions] + [(v, "LOADING", "") for v in served.loading]
    entries += [(v, "END", err) for v, err in served.failed.items()]
    try:
        wanted = (
            state.manager.resolve(name, version=path_version(version), label=label).version
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


STATUS_DOC: dict[str, Any] = {
    "responses": docs.V1_STATUS_RESPONSES,
    "tags": [V1],
    "dependencies": PREDICT,
    "openapi_extra": PREDICT_SCOPE,
}


@router.get("/v1/models/{name}", summary="Version status", **STATUS_DOC)
async def v1_status(request: Request, name: str) -> Response:
    """The loaded versions of a model and their state (AVAILABLE, LOADING, END)."""
    return _status(app_state(request), name, None, None, request_id_of(request))


@router.get("/v1/models/{name}/versions/{version}", summary="Status of one version", **STATUS_DOC)
async def v1_status_version(request: Request, name: str, version: str) -> Response:
    """The state of one version."""
    return _status(app_state(request), name, version, None, request_id_of(request))


@router.get("/v1/models/{name}/labels/{label}", summary="Status of a labelled version", **STATUS_DOC)
async def v1_status_label(request: Request, name: str, label: str) -> Response:
    """The state of the version a label points to."""
    return _status(app_state(request), name, None, label, request_id_of(request))


def _tf_dtype(kind: FeatureKind) -> str:
    return "DT_FLOAT" if kind is FeatureKind.NUMERIC else "DT_STRING"


def _metadata(request: Request, name: str, version: str | None, label: str | None) -> Response:
    rid = request_id_of(request)
    try:
        lv = app_state(request).manager.resolve(name, version=path_version(version), label=label)
    except NotServed as exc:
        return error_response(404, str(exc), rid)
    if lv.signature is not None:  # an imported model: its own signature
        signature_name, inputs, outputs = _source_signature_def(lv.signature)
    else:
        signature_name, inputs, outputs = "serving_default", *_signature_def(lv.schema)
    body = {
        "model_spec": {"name": name, "signature_name": "", "version": str(lv.version)},
        "metadata": {
            "signature_def": {
                "signature_def": {
                    signature_name: {
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


def _tensor_shape(shape: tuple[int | None, ...]) -> dict[str, Any]:
    dims = [{"size": "-1" if d is None else str(d), "name": ""} for d in shape]
    return {"dim": dims, "unknown_rank": False}


def _source_signature_def(signature: SourceSignature) -> tuple[str, dict[str, Any], dict[str, Any]]:
    """An imported model's signature as TF Serving's metadata states it: names, dtypes, shapes."""
    inputs = {
        t.name: {
            "dtype": t.tf_dtype,
            "tensor_shape": _tensor_shape(t.shape),
            "name": f"{signature.name}_{t.name}:0",
        }
        for t in signature.inputs
    }
    outputs = {
        t.name: {
            "dtype": t.tf_dtype,
            "tensor_shape": _tensor_shape(t.shape),
            "name": f"StatefulPartitionedCall:{i}",
        }
        for i, t in enumerate(signature.outputs)
    }
    return signature.name, inputs, outputs


def _signature_def(schema: ModelSchema) -> tuple[dict[str, Any], dict[str, Any]]:
    """driftwarden's own signature: one [batch] input per feature, the task's output."""
    rows = {"size": "-1", "name": ""}
    dim: dict[str, Any] = {"dim": [rows], "unknown_rank": False}
    inputs = {
        f.name: {"dtype": _tf_dtype(f.kind), "tensor_shape": dim, "name": f"serving_default_{f.name}:0"}
        for f in schema.features
    }
    outputs = {
        o.name: {
            "dtype": "DT_FLOAT",
            "tensor_shape": dim
            if o.width == 1
            else {"dim": [rows, {"size": str(o.width), "name": ""}], "unknown_rank": False},
            "name": "StatefulPartitionedCall:0",
        }
        for o in schema.outputs
    }
    return inputs, outputs


META_DOC: dict[str, Any] = {
    "responses": docs.V1_METADATA_RESPONSES,
    "tags": [V1],
    "dependencies": PREDICT,
    "openapi_extra": PREDICT_SCOPE,
}


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
    dependencies=[require_scope(Scope.FEEDBACK)],
)
async def v1_feedback(request: Request, name: str) -> Response:
    """Attach ground truth to earlier predictions by `prediction_id`; ids that are not logged predictions
    of this model come back in `unknown_ids`."""
    state = app_state(request)
    rid = request_id_of(request)
    try:
        schema = state.manager.contract(name)[1]
        labels = parse_feedback(parse_json(await read_body(request, state.settings.max_body_bytes)), schema)
        result = await feedback(state=state, model_name=name, labels=labels)
    except BadRequest as exc:
        return error_response(exc.status_code, str(exc), rid)
    except NotServed as exc:
        return error_response(404, str(exc), rid)
    return json_response(result, 200, rid)


@router.post(
    "/v1/models/{name}/predictions",
    summary="Predictions another server answered",
    openapi_extra=docs.INGEST,
    responses=docs.INGEST_RESPONSES,
    tags=["Ingest"],
    dependencies=[require_scope(Scope.INGEST)],
)
async def v1_ingest(request: Request, name: str) -> Response:
    """Log predictions your own serving answered (Seldon, SageMaker, a custom server, a batch job) into the
    same prediction log, checked against the version's contract (flagged, never refused): drift, quality,
    performance and alerts then work on them as on served predictions. A body that does not validate
    stores nothing."""
    state = app_state(request)
    rid = request_id_of(request)
    try:
        payload = parse_json(await read_body(request, state.settings.max_body_bytes))
        result = await ingest(
            state=state, model_name=name, payload=payload, request_id=caller_request_id(request)
        )
    except BadRequest as exc:
        return error_response(exc.status_code, str(exc), rid)
    except NotServed as exc:
        return error_response(404, str(exc), rid)
    except (LogOff, LogUnavailable) as exc:
        return error_response(503, f"prediction log unavailable: {exc}", rid)
    return json_response(result.as_dict(), 200, rid)
