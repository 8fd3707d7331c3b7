"""Open Inference Protocol v2 routes (``/v2``, KServe/Triton): infer, model metadata, readiness, health."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from fastapi import APIRouter, Request, Response

from core.auth import Scope
from core.http import error_response, json_response, request_id_of, require_scope
from core.openapi import PREDICT_SCOPE, errors
from registry.schema import FeatureKind, ModelSchema
from registry.signature import SourceSignature, Tensor
from service.serving import docs
from service.serving.codecs import Columns, parse_v2
from service.serving.flows import Prediction
from service.serving.manager import LoadedVersion, NotServed
from service.serving.routing import app_state, path_version, predict_route
from service.serving.source_codec import requested_outputs, v2_outputs

router = APIRouter()
V2 = "Open Inference Protocol v2"


def _v2_decode(payload: Any, binary: bytes) -> Callable[[ModelSchema, SourceSignature | None], Columns]:
    def parse(schema: ModelSchema, signature: SourceSignature | None) -> Columns:
        if signature is None:
            return parse_v2(schema, payload, binary)
        return parse_v2(schema, payload, binary, outputs=[t.name for t in signature.outputs])

    return parse


def _v2_shape(result: Prediction, payload: Any) -> dict[str, Any]:
    rid = payload.get("id") if isinstance(payload, dict) else None
    return {
        "model_name": result.model_name,
        "model_version": str(result.version),
        "id": rid if isinstance(rid, str) else "",
        "parameters": {"prediction_ids": ",".join(result.prediction_ids)},
        "outputs": (
            v2_outputs(result.signature, result.outputs, requested_outputs(payload))
            if result.signature is not None and result.outputs is not None
            else [_v2_output(result)]
        ),
    }


def _v2_output(result: Prediction) -> dict[str, Any]:
    """The one output tensor: ``[rows]`` values, or ``[rows, K]`` probabilities flattened row-major."""
    values = result.values
    if values and isinstance(values[0], list):
        width = len(values[0])
        flat = [v for row in values for v in row]
        return {"name": result.output_name, "shape": [len(values), width], "datatype": "FP32", "data": flat}
    return {"name": result.output_name, "shape": [len(values)], "datatype": "FP32", "data": values}


PREDICT = [require_scope(Scope.PREDICT)]  # open unless predict_requires_token
INFER_DOC: dict[str, Any] = {  # the scope check of /infer is inside predict_route (no dependency cost)
    "openapi_extra": {**docs.V2_INFER, **PREDICT_SCOPE},
    "responses": docs.V2_INFER_RESPONSES,
    "tags": [V2],
}


@router.post("/v2/models/{name}/infer", summary="Inference with the serving version", **INFER_DOC)
async def v2_infer(request: Request, name: str) -> Response:
    """Typed tensors: one per feature, or one `[rows, features]` tensor in schema order. Prediction ids are
    in `parameters.prediction_ids` (comma-separated, one per row)."""
    return await predict_route(request, name, None, None, "v2", _v2_shape, _v2_decode)


@router.post("/v2/models/{name}/versions/{version}/infer", summary="Inference with one version", **INFER_DOC)
async def v2_infer_version(request: Request, name: str, version: str) -> Response:
    """Like `/infer`, answered by a specific loaded version."""
    return await predict_route(request, name, version, None, "v2", _v2_shape, _v2_decode)


def _v2_dtype(kind: FeatureKind) -> str:
    return "FP32" if kind is FeatureKind.NUMERIC else "BYTES"


def _v2_tensor(t: Tensor) -> dict[str, Any]:
    return {"name": t.name, "datatype": t.v2_datatype, "shape": t.v2_shape()}


def _v2_model(request: Request, name: str, version: str | None) -> Response:
    rid = request_id_of(request)
    manager = app_state(request).manager
    try:
        lv: LoadedVersion = manager.resolve(name, version=path_version(version))
    except NotServed as exc:
        return error_response(404, str(exc), rid)
    body = {
        "name": name,
        "versions": [str(v) for v in sorted(manager.models[name].versions)],
        "platform": "tensorflow_savedmodel",
        "inputs": [
            {"name": f.name, "datatype": _v2_dtype(f.kind), "shape": [-1]} for f in lv.schema.features
        ],
        "outputs": [
            {"name": o.name, "datatype": "FP32", "shape": [-1] if o.width == 1 else [-1, o.width]}
            for o in lv.schema.outputs
        ],
    }
    if lv.signature is not None:  # an imported model: its own signature's names, datatypes and shapes
        body["inputs"] = [_v2_tensor(t) for t in lv.signature.inputs]
        body["outputs"] = [_v2_tensor(t) for t in lv.signature.outputs]
    return json_response(body, 200, rid)


@router.get(
    "/v2/models/{name}",
    summary="Model metadata",
    responses=docs.V2_MODEL_RESPONSES,
    tags=[V2],
    dependencies=PREDICT,
    openapi_extra=PREDICT_SCOPE,
)
async def v2_model(request: Request, name: str) -> Response:
    """Inputs (one per feature) and outputs of the serving version, and the loaded versions."""
    return _v2_model(request, name, None)


@router.get(
    "/v2/models/{name}/versions/{version}",
    summary="Model version metadata",
    responses=docs.V2_MODEL_RESPONSES,
    tags=[V2],
    dependencies=PREDICT,
    openapi_extra=PREDICT_SCOPE,
)
async def v2_model_version(request: Request, name: str, version: str) -> Response:
    """Metadata of one loaded version."""
    return _v2_model(request, name, version)


def _ready(request: Request, name: str, version: str | None) -> Response:
    rid = request_id_of(request)
    try:
        app_state(request).manager.resolve(name, version=path_version(version))
    except NotServed as exc:
        return error_response(404, str(exc), rid)
    return json_response({"name": name, "ready": True}, 200, rid)


READY_DOC: dict[str, Any] = {
    "responses": errors(404, e404="The model or version is not loaded"),
    "tags": [V2],
}


@router.get("/v2/models/{name}/ready", summary="Model ready", **READY_DOC)
async def v2_model_ready(request: Request, name: str) -> Response:
    """200 when the model's serving version is loaded, 404 otherwise."""
    return _ready(request, name, None)


@router.get("/v2/models/{name}/versions/{version}/ready", summary="Model version ready", **READY_DOC)
async def v2_model_version_ready(request: Request, name: str, version: str) -> Response:
    """200 when that version is loaded, 404 otherwise."""
    return _ready(request, name, version)


@router.get("/v2/health/live", summary="Server live", tags=[V2])
async def v2_live() -> Response:
    """200 while the process answers (`{"live": true}`)."""
    return json_response({"live": True})


@router.get(
    "/v2/health/ready",
    summary="Server ready",
    tags=[V2],
    responses=errors(400, e400="Models are still loading (the protocol's 'not ready')"),
)
async def v2_ready(request: Request) -> Response:
    """200 once the models the registry asks for are loaded (`{"ready": true}`), 400 before."""
    if app_state(request).manager.ready():
        return json_response({"ready": True})
    return error_response(400, "models are still loading", None)


@router.get("/v2", summary="Server metadata", tags=[V2])
async def v2_server() -> Response:
    """Name, version and protocol extensions of the server."""
    from importlib.metadata import version

    return json_response(
        {"name": "driftwarden", "version": version("driftwarden"), "extensions": ["binary_tensor_data"]}
    )
