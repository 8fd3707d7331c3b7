"""OpenAPI request and response examples for ``/docs`` (bodies are parsed by hand, so declared here)."""

from __future__ import annotations

from typing import Any

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


def _json_body(schema: dict[str, Any], examples: dict[str, Any]) -> dict[str, Any]:
    return {
        "requestBody": {
            "required": True,
            "content": {
                "application/json": {
                    "schema": schema,
                    "examples": {k: {"summary": s, "value": v} for k, (s, v) in examples.items()},
                }
            },
        }
    }


def _responses(ok: Any, *codes: int) -> dict[int | str, dict[str, Any]]:
    out: dict[int | str, dict[str, Any]] = {
        200: {"description": "OK", "content": {"application/json": {"example": ok}}}
    }
    texts = {
        400: ("Bad request: names the row, the feature and the rule", ERROR_400),
        404: ("Model, version or label not served", {"error": "model 'nope' is not served here"}),
        500: (
            "The model's output broke its contract",
            {
                "error": "the model's output broke its contract: "
                "row 0, feature 'probability': model output nan "
                "is not finite (rule: output_finite)"
            },
        ),
        503: (
            "The prediction log is unavailable (disk and database)",
            {"error": "prediction log unavailable"},
        ),
    }
    for code in codes:
        desc, example = texts[code]
        out[code] = {"description": desc, "content": {"application/json": {"example": example}}}
    return out


V1_PREDICT = _json_body(
    {
        "type": "object",
        "properties": {
            "signature_name": {"type": "string", "default": "serving_default"},
            "instances": {"type": "array", "items": {"type": "object"}, "description": "Row format."},
            "inputs": {"type": "object", "description": "Columnar format: one list per feature."},
        },
    },
    {
        "row": ("Row format (instances)", {"instances": [ROW]}),
        "columnar": ("Columnar format (inputs)", {"inputs": {k: [v] for k, v in ROW.items()}}),
    },
)
V1_PREDICT_RESPONSES = _responses(
    {"predictions": [0.0734], "prediction_ids": [PID], "model_version": "1"}, 400, 404, 500, 503
)

V1_STATUS_RESPONSES = _responses(
    {
        "model_version_status": [
            {"version": "1", "state": "AVAILABLE", "status": {"error_code": "OK", "error_message": ""}}
        ]
    },
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
    404,
)

FEEDBACK = _json_body(
    {
        "type": "object",
        "required": ["labels"],
        "properties": {
            "labels": {
                "type": "array",
                "items": {
                    "type": "object",
                    "properties": {"prediction_id": {"type": "string"}, "label": {"type": "integer"}},
                },
            }
        },
    },
    {"labels": ("Ground truth for earlier predictions", {"labels": [{"prediction_id": PID, "label": 1}]})},
)
FEEDBACK_RESPONSES = _responses({"stored": 1, "unknown_ids": []}, 400, 404)

V2_INFER = _json_body(
    {
        "type": "object",
        "required": ["inputs"],
        "properties": {
            "id": {"type": "string"},
            "parameters": {"type": "object"},
            "inputs": {
                "type": "array",
                "items": {
                    "type": "object",
                    "properties": {
                        "name": {"type": "string"},
                        "shape": {"type": "array", "items": {"type": "integer"}},
                        "datatype": {"type": "string"},
                        "data": {"type": "array"},
                    },
                },
            },
            "outputs": {"type": "array", "items": {"type": "object"}},
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
    404,
)
