"""The HTTP edge every domain's routes share: bounded bodies, the ``{"error": ...}`` shape, request ids,
the scope check of bearer tokens (:func:`require_scope`) and of signed links
(:func:`require_scope_or_signed_link`)."""

from __future__ import annotations

import os
import random
import re
import time
from datetime import UTC, datetime
from typing import Annotated, Any

import orjson
from fastapi import Depends, Query
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from starlette.requests import Request
from starlette.responses import Response

from core.auth import BOOTSTRAP, Grant, LinkKeySource, Scope, TokenVerifier, link_refusal, same_secret
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
    """401 (no valid token or link) or 403 (a token without the route's scope); ``headers`` go with the
    answer."""

    def __init__(self, status: int, message: str, rule: str = "scopes") -> None:
        self.status_code = status
        self.headers = {"WWW-Authenticate": 'Bearer realm="driftwarden"'} if status == 401 else {}
        super().__init__(f"{message} (rule: {rule})")


async def authorize(request: Request, scope: str, *, alternative: str = "") -> Grant | None:
    """The caller's grant for ``scope``; raises 401 without a valid token, 403 with one lacking the scope.

    ``DRIFTWARDEN_ADMIN_TOKEN`` (when set) is a bootstrap admin credential; any other token goes to the
    :class:`core.auth.TokenVerifier` in ``request.app.state.verifier``. ``predict`` is open (None) unless
    ``predict_requires_token`` is on. ``alternative``: how else the route may be opened, said in the 401
    of a request without a token.
    """
    settings = request.app.state.dw.settings
    if scope == Scope.PREDICT and not settings.predict_requires_token:
        return None
    token = bearer_token(request)
    if token is None:
        raise AuthFailed(
            401,
            f"this route needs 'Authorization: Bearer <token>' with scope '{scope}' (create one with "
            f"`driftwarden tokens create --name NAME --scope {scope}`){alternative}",
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
            f"token {grant.token_id!r} has scopes {sorted(grant.scopes)}; this route needs scope '{scope}'"
            + (" (or 'admin')" if scope != "admin" else ""),
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


LINK_RULE = "signed_link"
LAST_SECOND = 253402300799  # 9999-12-31T23:59:59Z, the last second a datetime holds
SIGNED_LINK_HINT = ", or a signed link (`driftwarden reports link MODEL`)"


def _link_path(request: Request) -> str:
    """The path a link to this request must sign: the route's template filled with the path parameters
    (independent of a proxy's prefix and of the percent-encoding the client chose)."""
    route = request.scope.get("route")
    template = getattr(route, "path_format", None)
    return template.format_map(request.path_params) if isinstance(template, str) else request.url.path


async def authorize_link(
    request: Request, scope: str, *, expires: int | None, signature: str | None
) -> Grant:
    """The grant of a signed link to exactly this path (``expires`` and ``signature`` from its query), else
    401 naming why: incomplete, malformed, invalid signature or expired."""
    if expires is None or signature is None:
        missing = "expires" if expires is None else "signature"
        raise AuthFailed(401, f"signed link refused: '{missing}' is missing (a link carries both)", LINK_RULE)
    keys: LinkKeySource | None = getattr(request.app.state, "link_keys", None)
    if keys is None:
        raise AuthFailed(401, "signed link refused: this server accepts no signed links", LINK_RULE)
    path = _link_path(request)
    why = link_refusal(
        key=await keys.link_key(), path=path, expires=expires, signature=signature, now=time.time()
    )
    if why is not None:
        raise AuthFailed(401, f"signed link refused: {why}", LINK_RULE)
    return Grant(
        token_id="signed-link",
        name=f"signed link to {path}",
        scopes=frozenset({scope}),
        expires_at=datetime.fromtimestamp(min(expires, LAST_SECOND), UTC),
    )


EXPIRES_DOC = (
    "Signed link: when it stops working, in Unix seconds (with `signature`; a link opens the page without "
    "a bearer token). Make one with `driftwarden reports link MODEL`; webhook messages carry one."
)
SIGNATURE_DOC = (
    "Signed link: HMAC-SHA256 under the server's link key of the path and `expires`, unpadded base64url "
    "(43 characters). A wrong, tampered or expired one answers 401 naming why."
)


def require_scope_or_signed_link(scope: str) -> Any:
    """A route dependency like :func:`require_scope`, which also lets in a request without a bearer token
    that carries a valid signed link to its path (``?expires=...&signature=...``; both documented in
    OpenAPI). A bearer token, when present, decides alone."""

    async def check(
        request: Request,
        expires: Annotated[int | None, Query(description=EXPIRES_DOC)] = None,
        signature: Annotated[str | None, Query(description=SIGNATURE_DOC)] = None,
        _credentials: HTTPAuthorizationCredentials | None = Depends(_bearer),  # noqa: B008
    ) -> Grant | None:
        if bearer_token(request) is None and (expires is not None or signature is not None):
            return await authorize_link(request, scope, expires=expires, signature=signature)
        return await authorize(request, scope, alternative=SIGNED_LINK_HINT)

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
