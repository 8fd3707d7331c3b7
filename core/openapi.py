"""What every route's OpenAPI entry shares: the ``{"error": ...}`` body and the error statuses it answers.

Routes declare the statuses they can answer with ``responses=errors(404, 409)``; the app's document (see
``service/serving/openapi.py``) adds what every operation has in common (400 for a malformed parameter,
the bearer scheme of the admin routes).
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field


class ViolationBody(BaseModel):
    """One broken rule of a request (contract violations of predict and infer)."""

    model_config = ConfigDict(extra="allow")

    rule: str
    message: str
    row: int | None = None
    feature: str | None = None


class ErrorBody(BaseModel):
    """Every error answer: a one-line message naming the field and the rule."""

    model_config = ConfigDict(extra="allow")

    error: str = Field(description="What is wrong, naming the field and the rule.")
    violations: list[ViolationBody] | None = Field(
        default=None, description="Predict and infer: every broken rule of the request (row, feature, rule)."
    )


DESCRIPTIONS = {
    400: "Bad request: a malformed parameter or body; `error` names the field and the rule",
    401: "No credentials, or credentials that are not accepted (`Authorization: Bearer <token>`)",
    403: "The bearer token is not the one this route needs",
    404: "Unknown model, version, label or resource",
    409: "The resource's state does not allow the change",
    413: "The body is larger than the route's limit",
    500: "The model's output broke its output contract (the value is never answered)",
    503: "A dependency is unavailable (the prediction log, a health check)",
}
PREDICT_SCOPE: dict[str, Any] = {"x-driftwarden-scope": "predict"}
"""``openapi_extra`` of the routes open to scope ``predict``: the document gives them the bearer scheme, 401
and 403 when ``predict_requires_token`` is on (``service/serving/openapi.py``)."""
AUTH = (401, 403)
"""The statuses of a route that needs a bearer token with a scope (`core.http.require_scope`)."""


def errors(*codes: int, **described: str) -> dict[int | str, dict[str, Any]]:
    """``responses=`` for the error statuses a route answers, each with the ``{"error": ...}`` body.

    ``described``: a route's own wording for a status, as ``e404="no run yet"``.
    """
    out: dict[int | str, dict[str, Any]] = {}
    for code in codes:
        text = described.get(f"e{code}", DESCRIPTIONS[code])
        out[code] = {"model": ErrorBody, "description": text}
    return out


def json_body(
    schema: dict[str, Any], *, required: bool = True, examples: dict[str, Any] | None = None
) -> dict[str, Any]:
    """``openapi_extra=`` describing a JSON request body the route reads by hand (no pydantic parsing)."""
    media: dict[str, Any] = {"schema": schema}
    if examples:
        media["examples"] = {k: {"value": v} for k, v in examples.items()}
    return {"requestBody": {"required": required, "content": {"application/json": media}}}


def model_schema(model: type[BaseModel]) -> dict[str, Any]:
    """``model``'s JSON Schema with its ``$defs`` written in place (an ``openapi_extra`` schema cannot refer
    to definitions of its own)."""
    schema = model.model_json_schema()
    defs = schema.pop("$defs", {})

    def inline(node: Any) -> Any:
        if isinstance(node, dict):
            ref = node.get("$ref")
            if isinstance(ref, str) and ref.startswith("#/$defs/"):
                rest = {k: v for k, v in node.items() if k != "$ref"}
                return inline({**defs[ref.removeprefix("#/$defs/")], **rest})
            return {k: inline(v) for k, v in node.items()}
        if isinstance(node, list):
            return [inline(v) for v in node]
        return node

    out: dict[str, Any] = inline(schema)
    return out


def model_body(model: type[BaseModel], *, required: bool = True, **extra: Any) -> dict[str, Any]:
    """``openapi_extra=`` describing a body a route validates with ``model`` itself (for its 400 wording);
    ``extra``: JSON Schema keywords for the rules the model checks in code (e.g. ``allOf``)."""
    return json_body({**model_schema(model), **extra}, required=required)
