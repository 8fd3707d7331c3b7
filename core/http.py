"""The HTTP edge every domain's routes share: bounded bodies, the ``{"error": ...}`` shape, request ids and
the scope check of bearer tokens (:func:`require_scope`)."""

from __future__ import annotations

import os
import random
import re
from typing import Any

import orjson
from fastapi import Depends
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from starlette.requests import Request
from starlette.responses import Response

from core.auth import BOOTSTRAP, Grant, Scope, TokenVerifier, same_secret
from core.errors import DomainError

_random = random.Random(int.from_bytes(os.urandom(32), "big"))  # ids without a syscall per request
REQUEST_ID = re.compile(r"^[\x21-\x7e]{1,128}$")


class BodyTooLarge(DomainError):
    """A request body over its limit (413 Content Too Large); the message names the rule setting the limit."""

    status_code = 413

    def __init__(self, message: str, rule: str = "max_body_bytes") -> None:
        self.rule = rule
        super().__init__(f"{message} (rule: {rule})")


async def read_body(request: Request, limit: int, *, rule: str = "max_body_bytes") -> bytes:
    """The whole body, read as a stream and refused with :class:`BodyTooLarge` as soon as it passes ``limit``.

    A declared ``Content-Length`` over the limit is refused before reading anything; a body without one (or
    lying about it) is cut off while streaming, so memory never holds more than ``limit`` bytes of it.
    """
    declared = request.headers.get("content-length")
    if declared and declared.isdigit() and int(declared) > limit:
        raise BodyTooLarge(f"the body has {declared} bytes, more than the limit of {limit}", rule)
    chunks: list[bytes] = []
    size = 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            raise BodyTooLarge(f"the body exceeds the limit of {limit} bytes", rule)
        chunks.append(chunk)
    return b"".join(chunks)


def json_response(body: Any, status: int = 200, request_id: str | None = None) -> Response:
    headers = {"X-Request-Id": request_id} if request_id else None
    return Response(orjson.dumps(body), status_code=status, media_type="application/json", headers=headers)


def error_response(status: int, message: str, request_id: str | None, **extra: Any) -> Response:
    return json_response({"error": message, **extra}, status, request_id)


def request_id_of(request: Request) -> str:
    """The caller's ``X-Request-Id`` when it is sane, else a new one."""
    rid = request.headers.get("x-request-id")
    return rid if rid and REQUEST_ID.match(rid) else f"{_random.getrandbits(128):032x}"


def bearer_token(request: Request) -> str | None:
    """The token of an ``Authorization: Bearer <token>`` header, or None."""
    scheme, _, given = request.headers.get("authorization", "").partition(" ")
    given = given.strip()
    return given if scheme.lower() == "bearer" and given else None


class AuthFailed(DomainError):
    """401 (no valid token) or 403 (a token without the route's scope); ``headers`` go with the answer."""

    def __init__(self, status: int, message: str) -> None:
        self.status_code = status
        self.headers = {"WWW-Authenticate": 'Bearer realm="driftwarden"'} if status == 401 else {}
        super().__init__(f"{message} (rule: scopes)")


async def authorize(request: Request, scope: str) -> Grant | None:
    """The caller's grant for ``scope``; raises 401 without a valid token, 403 with one lacking the scope.

    ``DRIFTWARDEN_ADMIN_TOKEN`` (when set) is a bootstrap admin credential; any other token goes to the
    :class:`core.auth.TokenVerifier` in ``request.app.state.verifier``. ``predict`` is open (None) unless
    ``predict_requires_token`` is on.
    """
    settings = request.app.state.dw.settings
    if scope == Scope.PREDICT and not settings.predict_requires_token:
        return None
    token = bearer_token(request)
    if token is None:
        raise AuthFailed(
            401,
            f"this route needs 'Authorization: Bearer <token>' with scope '{scope}' (create one with "
            f"`driftwarden tokens create --name NAME --scope {scope}`)",
        )
    admin = settings.admin_token
    grant: Grant | None
    if admin is not None and same_secret(token, admin.get_secret_value()):
        grant = BOOTSTRAP
    else:
        verifier: TokenVerifier | None = getattr(request.app.state, "verifier", None)
        grant = None if verifier is None else await verifier.verify(token)
    if grant is None:
        raise AuthFailed(
            401, f"the bearer token is unknown, revoked or expired; this route needs scope '{scope}'"
        )
    if not grant.allows(scope):
        raise AuthFailed(
            403,
            f"token {grant.token_id!r} has scopes {sorted(grant.scopes)}; this route needs scope '{scope}' "
            "(or 'admin')",
        )
    return grant


_bearer = HTTPBearer(auto_error=False, description="A driftwarden token (`driftwarden tokens create`).")


def require_scope(scope: str) -> Any:
    """A route dependency: ``dependencies=[require_scope("read")]`` (documents bearer auth in OpenAPI).

    ``predict`` declares nothing in the document itself: whether it needs a token is a setting, and the
    document marks the operations carrying :data:`core.openapi.PREDICT_SCOPE` when it does.
    """
    if scope == Scope.PREDICT:

        async def check_predict(request: Request) -> Grant | None:
            return await authorize(request, scope)

        return Depends(check_predict)

    async def check(
        request: Request,
        _credentials: HTTPAuthorizationCredentials | None = Depends(_bearer),  # noqa: B008
    ) -> Grant | None:
        return await authorize(request, scope)

    return Depends(check)


def holds_nul(value: Any) -> bool:
    """Whether a parsed JSON value holds a NUL character in a string or key (no text column stores one)."""
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, str):
            if "\x00" in item:
                return True
        elif isinstance(item, dict):
            stack.extend(item.keys())
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)
    return False
