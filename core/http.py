"""The HTTP edge every domain's routes share: the process's :class:`~core.runtime.Runtime` of a request
(:func:`runtime`), bounded bodies (:func:`read_body`) and JSON object bodies (:class:`JsonBody`), the
``{"error": ...}`` shape, request ids, the scope check of bearer tokens (:func:`require_scope`) and of signed
links (:func:`require_scope_or_signed_link`)."""

from __future__ import annotations

import os
import random
import re
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Annotated, Any, TypeVar

import orjson
from fastapi import Depends, Query
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from pydantic import BaseModel, ValidationError
from starlette.requests import Request
from starlette.responses import Response

from core.auth import BOOTSTRAP, Grant, LinkKeySource, Scope, TokenVerifier, link_refusal, same_secret
from core.errors import DomainError, Invalid
from core.runtime import Runtime

_random = random.Random(int.from_bytes(os.urandom(32), "big"))  # ids without a syscall per request
REQUEST_ID = re.compile(r"^[\x21-\x7e]{1,128}$")


M = TypeVar("M", bound=BaseModel)
GZIP_MAGIC = b"\x1f\x8b"
ENCODING_RULE = "content_encoding"


def runtime(request: Request) -> Runtime:
    """The process's handles (``request.app.state.dw``): a :class:`Runtime`, or the API process's subclass
    of it. A plain function, also usable as a route dependency (``Depends(runtime)``)."""
    state: Runtime = request.app.state.dw
    return state


class BodyRefused(DomainError):
    """A request body refused before it is parsed; the message names the rule (``rule``) refusing it."""

    def __init__(self, message: str, rule: str) -> None:
        self.rule = rule
        super().__init__(f"{message} (rule: {rule})")


class BodyTooLarge(BodyRefused):
    """A request body over its limit (413 Content Too Large); the message names the rule setting the limit."""

    status_code = 413

    def __init__(self, message: str, rule: str = "max_body_bytes") -> None:
        super().__init__(message, rule)


class BodyEncoded(BodyRefused):
    """A compressed request body (415 Unsupported Media Type): bodies are read as sent, never decompressed."""

    status_code = 415

    def __init__(self, message: str) -> None:
        super().__init__(message, ENCODING_RULE)


async def read_body(request: Request, limit: int, *, rule: str = "max_body_bytes") -> bytes:
    """The whole body, read as a stream and refused with :class:`BodyTooLarge` as soon as it passes ``limit``.

    A declared ``Content-Length`` over the limit is refused before reading anything; a body without one (or
    lying about it) is cut off while streaming, so memory never holds more than ``limit`` bytes of it. A
    compressed body (a ``Content-Encoding`` other than identity, or gzip's magic bytes without one) is
    refused with :class:`BodyEncoded` (415), rather than parsed as text it is not.
    """
    encoding = request.headers.get("content-encoding", "").strip()
    if encoding and encoding.lower() != "identity":
        raise BodyEncoded(
            f"Content-Encoding: {encoding[:64]} is not supported: send the body uncompressed, without that "
            "header"
        )
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
    body = b"".join(chunks)
    if body.startswith(GZIP_MAGIC):  # never JSON (nor any text): 0x1f is a control character
        raise BodyEncoded(
            "the body is gzip-compressed (gzip's magic bytes): gzip is not supported, send it uncompressed"
        )
    return body


MAX_JSON_DEPTH = 100
"""Levels of arrays and objects a JSON body may nest. Deeper text is refused before any parser reads it:
orjson parses 1024 levels, but Python's ``json`` (the CloudEvents SDK's parser, the NaN-tolerant fallback)
and any recursive code stop near the interpreter's recursion limit (1000) and orjson writes only 254."""
DEPTH_RULE = "max_json_depth"
DEPTH_REFUSAL = f"the body nests arrays and objects more than {MAX_JSON_DEPTH} levels deep"
_ESCAPE = re.compile(rb"\\.", re.DOTALL)  # a backslash and the byte it escapes
_STEP = bytes({ord("["): 1, ord("{"): 1, ord("]"): 255, ord("}"): 255}.get(b, 0) for b in range(256))
_NOT_BRACKET = bytes(b for b in range(256) if b not in b"[]{}")


def nests_deeper(body: bytes, limit: int = MAX_JSON_DEPTH) -> bool:
    """Whether the JSON text ``body`` nests arrays and objects more than ``limit`` levels deep (brackets
    inside strings do not count; text that is not JSON may count either way: its parser refuses it).

    In time linear in the body, without parsing it: fewer openers than ``limit`` settle it at once; else the
    escapes are dropped, the text between quotes (the strings) cut out, the brackets left mapped to +1/-1 and
    their running sum's maximum taken (with numpy past a few thousand brackets).
    """
    if body.count(b"[") + body.count(b"{") <= limit:
        return False
    if b"\\" in body:
        body = _ESCAPE.sub(b"", body)
    steps = b"".join(body.split(b'"')[::2]).translate(_STEP, _NOT_BRACKET)  # +1 opens, 255 (-1) closes
    if len(steps) <= 4096:
        level = 0
        for step in steps:
            level += 1 if step == 1 else -1
            if level > limit:
                return True
        return False
    import numpy as np  # only for a long run of brackets

    return int(np.cumsum(np.frombuffer(steps, dtype=np.int8), dtype=np.int64).max(initial=0)) > limit


def pydantic_errors(exc: ValidationError) -> str:
    """``path: message`` of each error of a pydantic validation, joined by ``; ``."""
    return "; ".join(
        f"{'.'.join(str(x) for x in e.get('loc', ())) or 'body'}: {e.get('msg', 'invalid')}"
        for e in exc.errors()
    )


@dataclass(frozen=True)
class JsonBody:
    """How a route reads its JSON body: read (bounded), parse, check that it is an object, validate, each
    refusal a :class:`core.errors.Invalid` (400) naming what is wrong. One per route family, e.g.
    ``BODY = JsonBody(limit=64 * 1024, rule="admin body limit", example='{"version": 3}')``, then in a route
    ``data = await BODY.object(request)`` or ``spec = await BODY.model(request, Spec)``.

    ``limit``: the bytes allowed (None: the ``max_body_bytes`` setting) under ``rule``; ``example``: an
    object to show in the answer to an empty body or one that is not an object (None: no example);
    ``optional``: an empty body is ``{}`` rather than refused; ``nul``: what cannot store a NUL character
    (e.g. "text fields"), refusing a body holding one (None: allowed); ``not_json`` and ``not_object``: the
    words of those refusals (``{error}``: the parser's, ``{type}``: the JSON value's Python type, and
    ``{example}``); ``describe``: the words of a pydantic validation's errors (:meth:`model`).
    """

    limit: int | None = None
    rule: str = "max_body_bytes"
    example: str | None = None
    optional: bool = False
    nul: str | None = None
    not_json: str = "the body is not valid JSON ({error})"
    not_object: str = "the body must be a JSON object, got {type}"
    describe: Callable[[ValidationError], str] = pydantic_errors

    async def value(self, request: Request) -> Any:
        """The body's JSON value (``{}`` for an empty optional body); refuses an empty or malformed one."""
        limit = runtime(request).settings.max_body_bytes if self.limit is None else self.limit
        body = await read_body(request, limit, rule=self.rule)
        if not body.strip():
            if self.optional:
                return {}
            example = f", e.g. {self.example}" if self.example else ""
            raise Invalid(f"the body is empty: send a JSON object{example}")
        if nests_deeper(body):
            raise Invalid(f"{DEPTH_REFUSAL} (rule: {DEPTH_RULE})")
        try:
            return orjson.loads(body)  # refuses lone surrogates, which no text column can store
        except orjson.JSONDecodeError as exc:
            raise Invalid(self.not_json.format(error=exc, example=self.example)) from None

    async def object(self, request: Request) -> dict[str, Any]:
        """The body's JSON object; refuses any other value, and a NUL character when ``nul`` says so."""
        data = await self.value(request)
        if not isinstance(data, dict):
            raise Invalid(self.not_object.format(type=type(data).__name__, example=self.example))
        if self.nul is not None and holds_nul(data):
            raise Invalid(f"the body holds a NUL character (\\u0000), which {self.nul} cannot store")
        return data

    async def model(self, request: Request, model: type[M]) -> M:
        """The body's object validated as ``model``; a validation error: Invalid, in ``describe``'s words."""
        data = await self.object(request)
        try:
            return model.model_validate(data)
        except ValidationError as exc:
            raise Invalid(self.describe(exc)) from None


def json_response(body: Any, status: int = 200, request_id: str | None = None) -> Response:
    headers = {"X-Request-Id": request_id} if request_id else None
    return Response(orjson.dumps(body), status_code=status, media_type="application/json", headers=headers)


def error_response(status: int, message: str, request_id: str | None, **extra: Any) -> Response:
    return json_response({"error": message, **extra}, status, request_id)


def request_id_of(request: Request) -> str:
    """The caller's ``X-Request-Id`` when it is sane, else a new one."""
    return caller_request_id(request) or f"{_random.getrandbits(128):032x}"


def caller_request_id(request: Request) -> str | None:
    """The caller's ``X-Request-Id`` when it is sane (what :func:`request_id_of` echoes), else None: the id a
    prediction log row keeps (one the server made up links nothing the answer's prediction ids do not)."""
    rid = request.headers.get("x-request-id")
    return rid if rid and REQUEST_ID.match(rid) else None


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


async def authorize(
    request: Request, scope: str, *, alternative: str = "", token_param: str | None = None
) -> Grant | None:
    """The caller's grant for ``scope``; raises 401 without a valid token, 403 with one lacking the scope.

    ``DRIFTWARDEN_ADMIN_TOKEN`` (when set) is a bootstrap admin credential; any other token goes to the
    :class:`core.auth.TokenVerifier` in ``request.app.state.verifier``. ``predict`` is open (None) unless
    ``predict_requires_token`` is on. ``alternative``: how else the route may be opened, said in the 401
    of a request without a token. ``token_param``: a query parameter that may carry the token instead of the
    header (for senders that can only be given a URL; the server's logs never show a query).
    """
    settings = request.app.state.dw.settings
    if scope == Scope.PREDICT and not settings.predict_requires_token:
        return None
    token = bearer_token(request)
    if token is None and token_param is not None:
        token = request.query_params.get(token_param) or None
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


NUL_RULE = "feature names and text values may not contain U+0000 (NUL), which PostgreSQL cannot store"


def nul_in_row(row: Mapping[str, Any]) -> str | None:
    """The first name of ``row`` (a record's inputs: names to values) whose name or text value holds a NUL
    character, or None: the one check of every ingest path's inputs (:data:`NUL_RULE`), on every backend."""
    for name, value in row.items():
        if (isinstance(name, str) and "\x00" in name) or (isinstance(value, str) and "\x00" in value):
            return name
    return None


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
