"""The app's OpenAPI document and method routing, kept true to what the routes answer.

* The document: FastAPI's, with its never-sent 422 replaced by the 400 ``{"error": ...}`` answer the app
  gives for a malformed parameter; path and query parameters described with the rules the routes check by
  hand (model names and labels, versions, a signed link's); every route that answers 401 marked with the
  bearer scheme.
* Methods: a path answers a method it does not declare with 405 and an ``Allow`` header listing exactly
  the methods of its most specific route template (``/v1/models/{name}/versions/{version}:promote`` is
  not ``/v1/models/{name}/versions/{version}``), for every method, TRACE and OPTIONS included.
"""

from __future__ import annotations

import re
from functools import lru_cache
from typing import Any

from fastapi import FastAPI
from fastapi.openapi.utils import get_openapi
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.routing import BaseRoute, Match
from starlette.types import Receive, Scope, Send

from core.openapi import AUTH, DESCRIPTIONS, ErrorBody
from registry.names import MAX_NAME_LENGTH, MAX_VERSION, NAME_PATTERN

METHODS = ("GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS", "TRACE")
BEARER = "HTTPBearer"  # the scheme name FastAPI gives core.http's HTTPBearer dependency
_PARAMS = re.compile(r"{[^}]*}")
_TEXT = {"type": "string", "pattern": NAME_PATTERN, "minLength": 1, "maxLength": MAX_NAME_LENGTH}
PATH_RULES: dict[str, dict[str, Any]] = {
    "name": _TEXT,
    "label": _TEXT,
    "version": {"type": "integer", "minimum": 1, "maximum": MAX_VERSION},
}
QUERY_RULES: dict[str, dict[str, Any]] = {
    "model": _TEXT,
    # a signed link's parameters (core.http.require_scope_or_signed_link): optional, never null; the
    # signature's form is checked by hand (401 naming it), so the document gives it no pattern
    "expires": {"type": "integer"},
    "signature": {"type": "string"},
}


def _error_ref(description: str) -> dict[str, Any]:
    return {
        "description": description,
        "content": {"application/json": {"schema": {"$ref": "#/components/schemas/ErrorBody"}}},
    }


def document(app: FastAPI, *, predict_requires_token: bool = False) -> dict[str, Any]:
    """The OpenAPI document of ``app`` (built once, then cached on the app like FastAPI's own)."""
    if app.openapi_schema is not None:
        return app.openapi_schema
    doc = get_openapi(
        title=app.title,
        version=app.version,
        openapi_version=app.openapi_version,
        description=app.description,
        routes=app.routes,
    )
    components = doc.setdefault("components", {})
    schemas = components.setdefault("schemas", {})
    for unused in ("HTTPValidationError", "ValidationError"):
        schemas.pop(unused, None)
    schemas.setdefault("ErrorBody", ErrorBody.model_json_schema(ref_template="#/components/schemas/{model}"))
    for sub, sub_schema in (
        ErrorBody.model_json_schema(ref_template="#/components/schemas/{model}").get("$defs", {}).items()
    ):
        schemas.setdefault(sub, sub_schema)
    schemas["ErrorBody"].pop("$defs", None)
    # the routes' require_scope dependency declares FastAPI's HTTPBearer scheme; routes checking a token by
    # hand (the Alertmanager receiver, predict when it needs a token) point at the same scheme
    components.setdefault("securitySchemes", {}).setdefault(
        BEARER,
        {
            "type": "http",
            "scheme": "bearer",
            "description": "A driftwarden token (`driftwarden tokens create`).",
        },
    )
    for operations in doc.get("paths", {}).values():
        for op in operations.values():
            _finish(op, predict_requires_token=predict_requires_token)
    _link(doc)
    app.openapi_schema = doc
    return doc


FEEDBACK_LINK = {
    "operation": ("/v1/models/{name}/feedback", "post"),
    "parameters": {"name": "$request.path.name"},
    "requestBody": {"labels": [{"prediction_id": "$response.body#/prediction_ids/0", "label": 1}]},
    "description": "Ground truth for the first prediction of the answer.",
}
VERSION_ROUTES = [
    ("/v1/models/{name}/versions/{version}", "get"),
    ("/v1/models/{name}/versions/{version}/metadata", "get"),
    ("/v1/models/{name}/versions/{version}:predict", "post"),
    ("/v1/models/{name}/versions/{version}:promote", "post"),
    ("/v1/models/{name}/versions/{version}:reject", "post"),
    ("/v2/models/{name}/versions/{version}", "get"),
    ("/v2/models/{name}/versions/{version}/ready", "get"),
    ("/v2/models/{name}/versions/{version}/infer", "post"),
]
# (source path, method, status) -> links: the ids an answer hands to the operations that take them
LINKS: dict[tuple[str, str, str], dict[str, dict[str, Any]]] = {
    (path, "post", "200"): {"feedback": FEEDBACK_LINK}
    for path in (
        "/v1/models/{name}:predict",
        "/v1/models/{name}/versions/{version}:predict",
        "/v1/models/{name}/labels/{label}:predict",
    )
}
LINKS[("/v1/models/{name}/versions", "get", "200")] = {
    f"{method}{target.replace('/', '_')}": {
        "operation": (target, method),
        "parameters": {"name": "$request.path.name", "version": "$response.body#/versions/0/version"},
    }
    for target, method in VERSION_ROUTES
}


def _link(doc: dict[str, Any]) -> None:
    paths = doc.get("paths", {})
    for (path, method, status), links in LINKS.items():
        answer = paths.get(path, {}).get(method, {}).get("responses", {}).get(status)
        if answer is None:
            continue
        out = answer.setdefault("links", {})
        for name, link in links.items():
            target_path, target_method = link["operation"]
            target = paths.get(target_path, {}).get(target_method)
            if target is None:
                continue
            out[name] = {"operationId": target["operationId"]} | {
                k: v for k, v in link.items() if k != "operation"
            }


def _finish(op: dict[str, Any], *, predict_requires_token: bool) -> None:
    responses: dict[str, Any] = op.setdefault("responses", {})
    responses.pop("422", None)
    if (op.get("parameters") or op.get("requestBody")) and "400" not in responses:
        responses["400"] = _error_ref("Bad request: a malformed parameter or body; `error` names the rule")
    for param in op.get("parameters", []):
        where = param.get("in")
        rule = PATH_RULES.get(param["name"]) if where == "path" else QUERY_RULES.get(param["name"])
        if rule is not None:
            param["schema"] = {**rule, "title": param["schema"].get("title", param["name"])}
            if where == "query":
                param["schema"] = rule
    if predict_requires_token and op.get("x-driftwarden-scope") == "predict":
        responses.update({str(code): _error_ref(DESCRIPTIONS[code]) for code in AUTH})
    if "401" in responses and "security" not in op:
        op["security"] = [{BEARER: []}]
    for code, answer in responses.items():  # error answers are JSON {"error": ...}, on HTML routes too
        if code[:1] in "45":
            media = answer.get("content", {}).get("application/json", {})
            answer["content"] = {
                "application/json": {**media, **_error_ref("")["content"]["application/json"]}
            }


def _template_regex(template: str) -> re.Pattern[str]:
    parts = _PARAMS.split(template)
    return re.compile("[^/]+".join(re.escape(p) for p in parts) + "$")


def _route_table(app: FastAPI) -> list[tuple[re.Pattern[str], int, frozenset[str]]]:
    """(path regex, literal characters, declared methods) of every path of the document, built once."""
    table: list[tuple[re.Pattern[str], int, frozenset[str]]] | None = getattr(app.state, "route_table", None)
    if table is None:
        table = [
            (
                _template_regex(template),
                len(_PARAMS.sub("", template)),
                frozenset(m.upper() for m in operations if m.upper() in METHODS),
            )
            for template, operations in app.openapi().get("paths", {}).items()
        ]
        app.state.route_table = table
    return table


def allowed_methods(app: FastAPI, path: str) -> list[str]:
    """The methods the document declares on the most specific templates matching ``path``.

    The most specific: the most literal characters (``/v1/alerts/alertmanager`` over
    ``/v1/alerts/{alert_id}``, ``.../versions/{version}:promote`` over ``.../versions/{version}``).
    """
    best, methods = -1, set[str]()
    for regex, rank, declared in _route_table(app):
        if regex.match(path) is None:
            continue
        if rank > best:
            best, methods = rank, set(declared)
        elif rank == best:
            methods |= declared
    return [m for m in METHODS if m in methods]


class MethodGuard(BaseRoute):
    """The first route of the app: a request whose path's most specific template does not declare its
    method is answered 405 here (a GET on ``/v1/alerts/alertmanager`` would otherwise reach
    ``GET /v1/alerts/{alert_id}``). Paths' answers are cached, so a hot path costs one dict lookup."""

    def __init__(self, app: FastAPI, cache_size: int = 4096) -> None:
        self.app_ref = app
        self.allowed = lru_cache(maxsize=cache_size)(self._allowed)

    def _allowed(self, path: str) -> frozenset[str]:
        return frozenset(allowed_methods(self.app_ref, path))

    def matches(self, scope: Scope) -> tuple[Match, Scope]:
        if scope["type"] != "http":
            return Match.NONE, {}
        allowed = self.allowed(scope["path"])
        if not allowed or scope["method"] in allowed:
            return Match.NONE, {}
        return Match.FULL, {}

    async def handle(self, scope: Scope, receive: Receive, send: Send) -> None:
        raise StarletteHTTPException(405)


def guard_methods(app: FastAPI) -> None:
    """Put :class:`MethodGuard` in front of every route of ``app`` (after all routers are included)."""
    app.router.routes.insert(0, MethodGuard(app))
