"""The app's OpenAPI document and method routing, kept true to what the routes answer.

* The document: FastAPI's, with its never-sent 422 replaced by the 400 ``{"error": ...}`` answer the app
  gives for a malformed parameter; path parameters described with the rules the routes check by hand
  (model names and labels, versions); the admin routes marked with the bearer scheme when a token is set.
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
from fastapi.routing import APIRoute
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.routing import BaseRoute, Match, Route
from starlette.types import Receive, Scope, Send

from core.openapi import ErrorBody
from registry.names import MAX_NAME_LENGTH, MAX_VERSION, NAME_PATTERN

METHODS = ("GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS", "TRACE")
BEARER = "adminToken"
_PARAMS = re.compile(r"{[^}]*}")
_TEXT = {"type": "string", "pattern": NAME_PATTERN, "minLength": 1, "maxLength": MAX_NAME_LENGTH}
PATH_RULES: dict[str, dict[str, Any]] = {
    "name": _TEXT,
    "label": _TEXT,
    "version": {"type": "integer", "minimum": 1, "maximum": MAX_VERSION},
}
QUERY_RULES: dict[str, dict[str, Any]] = {"model": _TEXT}


def _error_ref(description: str) -> dict[str, Any]:
    return {
        "description": description,
        "content": {"application/json": {"schema": {"$ref": "#/components/schemas/ErrorBody"}}},
    }


def document(app: FastAPI, *, secured: bool) -> dict[str, Any]:
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
    if secured:
        components["securitySchemes"] = {
            BEARER: {"type": "http", "scheme": "bearer", "description": "DRIFTWARDEN_ADMIN_TOKEN"}
        }
    for operations in doc.get("paths", {}).values():
        for op in operations.values():
            _finish(op, secured=secured)
    app.openapi_schema = doc
    return doc


def _finish(op: dict[str, Any], *, secured: bool) -> None:
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
    if secured and "401" in responses:
        op["security"] = [{BEARER: []}]
    for code, answer in responses.items():  # error answers always carry the {"error": ...} body
        if code[:1] in "45" and "content" not in answer:
            answer["content"] = _error_ref(answer.get("description", ""))["content"]


def _specificity(route: Route) -> int:
    """Literal characters of a route's template: the more, the more specific."""
    return len(_PARAMS.sub("", route.path))


def allowed_methods(app: FastAPI, path: str) -> list[str]:
    """The methods of the most specific route templates matching ``path`` (HEAD with GET, as Starlette)."""
    best, methods = -1, set[str]()
    for route in app.routes:
        if not isinstance(route, APIRoute) or not route.include_in_schema:
            continue
        if route.path_regex.match(path) is None:
            continue
        rank = _specificity(route)
        if rank > best:
            best, methods = rank, set(route.methods or ())
        elif rank == best:
            methods |= route.methods or set()
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
