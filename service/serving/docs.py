"""OpenAPI request and response examples for ``/docs`` (bodies are parsed by hand, so declared here)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from core.openapi import ErrorBody

if TYPE_CHECKING:
    from fastapi import FastAPI

ROW = {
    "age": 42,
    "income": 58000.0,
    "debt_to_income": 0.21,
    "credit_score": 700,
    "loan_amount": 12000.0,
    "employment_years": 6.5,
    "num_open_accounts": 4,
    "home_ownership": "RENT",
    "loan_purpose": "car",
    "region": "north",
}
PID = "019ad6a5-3c4e-7b1f-9a2d-5e6f7a8b9c0d"
ERROR_400 = {
    "error": "row 0, feature 'income': value -5 is below the allowed minimum 0 (rule: allowed_range)",
    "violations": [
        {
            "row": 0,
            "feature": "income",
            "rule": "allowed_range",
            "message": "value -5 is below the allowed minimum 0",
        }
    ],
}


def _json_body(schema: dict[str, Any], examples: dict[str, Any], *, binary: bool = False) -> dict[str, Any]:
    content: dict[str, Any] = {
        "application/json": {
            "schema": schema,
            "examples": {k: {"summary": s, "value": v} for k, (s, v) in examples.items()},
        }
    }
    extra: dict[str, Any] = {}
    if binary:  # Triton's binary tensor extension: a JSON header, then the raw tensor bytes
        content["application/octet-stream"] = {
            "schema": {"type": "string", "format": "binary"},
            "description": "The JSON request (its length in Inference-Header-Content-Length), then the "
            "tensors' bytes in the order of their `parameters.binary_data_size`.",
        }
        extra["parameters"] = [
            {
                "name": "Inference-Header-Content-Length",
                "in": "header",
                "required": False,
                "description": "Binary tensor extension: the length of the JSON part of the body in bytes.",
                "schema": {"type": "integer", "minimum": 0},
            }
        ]
    return {"requestBody": {"required": True, "content": content}, **extra}


def _responses(ok: Any, *codes: int) -> dict[int | str, dict[str, Any]]:
    out: dict[int | str, dict[str, Any]] = {
        200: {"description": "OK", "content": {"application/json": {"example": ok}}}
    }
    texts = {
        400: ("Bad request: names the row, the feature and the rule", ERROR_400),
        404: ("Model, version or label not served", {"error": "model 'nope' is not served here"}),
        413: (
            "The body is larger than max_body_bytes",
            {"error": "the body has 5000000 bytes, more than the limit of 4194304 (rule: max_body_bytes)"},
        ),
        500: (
            "The model's output broke its contract",
            {
                "error": "the model's output broke its contract: "
                "row 0, feature 'probability': model output nan "
                "is not finite (rule: output_finite)"
            },
        ),
        401: (
            "No valid bearer token (`Authorization: Bearer <token>`)",
            {
                "error": "this route needs 'Authorization: Bearer <token>' with scope 'feedback' "
                "(rule: scopes)"
            },
        ),
        403: (
            "The bearer token lacks the route's scope",
            {
                "error": "token 'ab12cd34' has scopes ['read']; this route needs scope 'feedback' "
                "(rule: scopes)"
            },
        ),
        503: (
            "The prediction log is unavailable (disk and database)",
            {"error": "prediction log unavailable"},
        ),
    }
    for code in codes:
        desc, example = texts[code]
        out[code] = {
            "model": ErrorBody,
            "description": desc,
            "content": {"application/json": {"example": example}},
        }
    return out


# a feature value: a number, a category string, null for a missing value, or TF Serving's {"b64": ...}
VALUE: dict[str, Any] = {
    "anyOf": [
        {"type": ["number", "string", "null"]},
        {"type": "object", "required": ["b64"], "properties": {"b64": {"type": "string"}}},
    ]
}
V1_PREDICT = _json_body(
    {
        "type": "object",
        "description": "Either `instances` (row format) or `inputs` (columnar format). Every value is then "
        "checked against the version's input contract (`GET .../metadata`): a violation answers 400 naming "
        "the row, the feature and the rule. A version imported from your own SavedModel (`models import`) "
        "also takes, and answers in, its own signature's form as TF Serving does: its input names and shapes "
        "(`[batch, 1]` values as one-element lists, a dense input as a list per row), its `signature_name`, "
        "its output names and shapes (`GET .../metadata` states them).",
        "properties": {
            "signature_name": {"enum": ["serving_default", "", None], "default": "serving_default"},
            "instances": {
                "type": "array",
                "minItems": 1,
                "items": {"type": "object", "additionalProperties": VALUE},
                "description": "Row format: one object of named features per row.",
            },
            "inputs": {
                "type": "object",
                "minProperties": 1,
                "additionalProperties": {"type": "array", "minItems": 1, "items": VALUE},
                "description": "Columnar format: one list per feature, all of the same length.",
            },
        },
        "additionalProperties": False,
        "oneOf": [{"required": ["instances"]}, {"required": ["inputs"]}],
    },
    {
        "row": ("Row format (instances)", {"instances": [ROW]}),
        "columnar": ("Columnar format (inputs)", {"inputs": {k: [v] for k, v in ROW.items()}}),
    },
)
V1_PREDICT_RESPONSES = _responses(
    {"predictions": [0.0734], "prediction_ids": [PID], "model_version": "1"}, 400, 404, 413, 500, 503
)

V1_STATUS_RESPONSES = _responses(
    {
        "model_version_status": [
            {"version": "1", "state": "AVAILABLE", "status": {"error_code": "OK", "error_message": ""}}
        ]
    },
    400,
    404,
)
V1_METADATA_RESPONSES = _responses(
    {
        "model_spec": {"name": "credit", "signature_name": "", "version": "1"},
        "metadata": {
            "signature_def": {
                "signature_def": {
                    "serving_default": {
                        "inputs": {},
                        "outputs": {},
                        "method_name": "tensorflow/serving/predict",
                    }
                }
            }
        },
    },
    400,
    404,
)

FEEDBACK = _json_body(
    {
        "type": "object",
        "required": ["labels"],
        "properties": {
            "labels": {
                "type": "array",
                "minItems": 1,
                "maxItems": 10_000,
                "items": {
                    "type": "object",
                    "required": ["prediction_id", "label"],
                    "properties": {
                        "prediction_id": {"type": "string", "pattern": "^[!-~]{1,36}$"},
                        "label": {"enum": [0, 1, False, True], "description": "Binary ground truth."},
                    },
                },
            }
        },
    },
    {"labels": ("Ground truth for earlier predictions", {"labels": [{"prediction_id": PID, "label": 1}]})},
)
FEEDBACK_RESPONSES = _responses(
    {"stored": 1, "unknown_ids": [], "duplicate_ids": []}, 400, 401, 403, 404, 413
)

INGEST = _json_body(
    {
        "type": "object",
        "required": ["records"],
        "properties": {
            "records": {
                "type": "array",
                "minItems": 1,
                "maxItems": 10_000,
                "items": {
                    "type": "object",
                    "required": ["inputs", "prediction"],
                    "additionalProperties": False,
                    "properties": {
                        "id": {
                            "type": "string",
                            "minLength": 1,
                            "maxLength": 128,
                            "description": "Your own id of the record: a retried record with the same id is "
                            "stored once.",
                        },
                        "time": {
                            "type": "string",
                            "format": "date-time",
                            "description": "When the model answered (RFC 3339 with its offset, from "
                            "1970-01-01T00:00:00Z to 9999-12-30T23:59:59Z); default: arrival.",
                        },
                        "version": {
                            "type": "integer",
                            "minimum": 1,
                            "description": "The version that answered; default: the model's serving version.",
                        },
                        "inputs": {
                            "type": "object",
                            "additionalProperties": {"type": ["number", "string", "boolean", "null"]},
                            "description": "The features as the model received them (flagged against the "
                            "version's contract, never refused).",
                        },
                        "prediction": {
                            "description": "Binary: the positive class's probability; regression: the value; "
                            "multi-class: the class probabilities in the version's class order."
                        },
                        "label": {"description": "The ground truth, when known (the task's labels)."},
                    },
                },
            }
        },
    },
    {
        "records": (
            "Predictions another server answered",
            {
                "records": [
                    {
                        "id": "order-1841",
                        "time": "2026-12-01T10:00:00Z",
                        "inputs": {"income": 52000.0, "employment": "salaried"},
                        "prediction": 0.18,
                    }
                ]
            },
        )
    },
)
INGEST_RESPONSES = _responses(
    {
        "stored": 1,
        "duplicate_ids": [],
        "prediction_ids": [PID],
        "flagged": 0,
        "labels_stored": 0,
        "labels_already_stored": 0,
    },
    400,
    401,
    403,
    404,
    413,
    503,
)

CLOUDEVENTS: dict[str, Any] = {
    "security": [{"HTTPBearer": []}],  # or the same token as ?token= (KServe's logger sends no header)
    "requestBody": {
        "required": True,
        "description": "A CloudEvent 1.0 as KServe's logger sends it. Binary mode (what KServe sends): the "
        "headers ce-id, ce-type (org.kubeflow.serving.inference.request or ...response), ce-source, "
        "ce-specversion, ce-time and the extension ce-inferenceservicename; the body is the model's request "
        "or response (TF Serving REST or Open Inference Protocol v2). Structured mode: the whole event as "
        "application/cloudevents+json.",
        "content": {
            "application/json": {
                "schema": {"type": "object"},
                "example": {"instances": [{"age": 41, "income": 52000.0}]},
            },
            "application/cloudevents+json": {
                "schema": {"type": "object", "required": ["id", "type", "source", "specversion"]},
                "example": {
                    "specversion": "1.0",
                    "id": "5f0c7c1e-3d2a-4c55-9a1e-2f7d0b6a8c11",
                    "type": "org.kubeflow.serving.inference.response",
                    "source": "http://credit-predictor.default/",
                    "inferenceservicename": "credit",
                    "datacontenttype": "application/json",
                    "data": {"predictions": [0.12]},
                },
            },
        },
    },
    "parameters": [
        {
            "name": name,
            "in": "header",
            "required": False,
            "description": f"Binary mode: {text}",
            "schema": schema,
        }
        for name, text, schema in (
            ("ce-id", "the inference's id, shared by its request and response", {"type": "string"}),
            (
                "ce-type",
                "which half this is",
                {
                    "type": "string",
                    "enum": [
                        "org.kubeflow.serving.inference.request",
                        "org.kubeflow.serving.inference.response",
                    ],
                },
            ),
            ("ce-specversion", "1.0", {"type": "string", "enum": ["1.0"]}),
            ("ce-source", "the component's URL", {"type": "string"}),
            (
                "ce-time",
                "when the half was sent (RFC 3339, from 1970-01-01T00:00:00Z to 9999-12-30T23:59:59Z); "
                "default: arrival",
                {"type": "string"},
            ),
            ("ce-inferenceservicename", "the model (else ?model=)", {"type": "string"}),
        )
    ],
}
CLOUDEVENTS_RESPONSES = _responses(
    {"outcome": "logged", "model": "credit", "id": "5f0c7c1e-...", "prediction_ids": [PID]},
    400,
    401,
    403,
    404,
    413,
    503,
)

DATATYPES = ["BOOL", "UINT8", "UINT16", "UINT32", "UINT64", "INT8", "INT16", "INT32", "INT64"]
DATATYPES += ["FP16", "FP32", "FP64", "BYTES"]
V2_INFER = _json_body(
    {
        "type": "object",
        "required": ["inputs"],
        "description": "One tensor per feature (shape `[rows]` or `[rows, 1]`), or one `[rows, features]` "
        "tensor in schema order. A shape must match its data's length; values are then checked against the "
        "version's input contract (400 naming the row, the feature and the rule).",
        "properties": {
            "id": {"type": "string"},
            "parameters": {"type": ["object", "null"]},
            "inputs": {
                "type": "array",
                "minItems": 1,
                "items": {
                    "type": "object",
                    "required": ["name", "shape", "datatype"],
                    "properties": {
                        "name": {"type": "string"},
                        "shape": {"type": "array", "items": {"type": "integer", "minimum": 0}},
                        "datatype": {"enum": DATATYPES},
                        "data": {"description": "Values (nested lists are flattened in row-major order)."},
                        "parameters": {
                            "type": ["object", "null"],
                            "properties": {"binary_data_size": {"type": "integer", "minimum": 0}},
                        },
                    },
                },
            },
            "outputs": {
                "type": ["array", "null"],
                "items": {"type": "object", "required": ["name"], "properties": {"name": {"type": "string"}}},
            },
        },
    },
    {
        "tensors": (
            "One tensor per feature",
            {
                "id": "req-1",
                "inputs": [
                    {
                        "name": k,
                        "shape": [1],
                        "datatype": "BYTES" if isinstance(v, str) else "FP32",
                        "data": [v],
                    }
                    for k, v in ROW.items()
                ],
            },
        ),
        "matrix": (
            "One 2-D tensor in schema order",
            {
                "inputs": [
                    {
                        "name": "input",
                        "shape": [1, len(ROW)],
                        "datatype": "BYTES",
                        "data": [list(ROW.values())],
                    }
                ]
            },
        ),
    },
    binary=True,
)
V2_INFER_RESPONSES = _responses(
    {
        "model_name": "credit",
        "model_version": "1",
        "id": "req-1",
        "parameters": {"prediction_ids": PID},
        "outputs": [{"name": "probability", "shape": [1], "datatype": "FP32", "data": [0.0734]}],
    },
    400,
    404,
    413,
    500,
    503,
)
V2_MODEL_RESPONSES = _responses(
    {
        "name": "credit",
        "versions": ["1"],
        "platform": "tensorflow_savedmodel",
        "inputs": [{"name": "age", "datatype": "FP32", "shape": [-1]}],
        "outputs": [{"name": "probability", "datatype": "FP32", "shape": [-1]}],
    },
    400,
    404,
)


# -- /docs served offline -------------------------------------------------------------------------
DOCS_ASSETS = "/docs/assets"


def mount_docs(app: FastAPI) -> None:
    """``/docs`` (Swagger UI) with its script, style sheet and favicon served from the installed
    ``swagger_ui_bundle`` package, so the page renders on a network without internet access."""
    from fastapi.openapi.docs import get_swagger_ui_html
    from fastapi.staticfiles import StaticFiles
    from starlette.responses import HTMLResponse
    from swagger_ui_bundle import swagger_ui_path

    app.mount(DOCS_ASSETS, StaticFiles(directory=str(swagger_ui_path)), name="docs-assets")
    openapi_url = app.openapi_url or "/openapi.json"

    async def swagger_ui() -> HTMLResponse:
        return get_swagger_ui_html(
            openapi_url=openapi_url,
            title=f"{app.title} - API docs",
            swagger_js_url=f"{DOCS_ASSETS}/swagger-ui-bundle.js",
            swagger_css_url=f"{DOCS_ASSETS}/swagger-ui.css",
            swagger_favicon_url=f"{DOCS_ASSETS}/favicon-32x32.png",
        )

    app.add_api_route("/docs", swagger_ui, methods=["GET"], include_in_schema=False)
