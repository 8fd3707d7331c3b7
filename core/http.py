"""The HTTP edge every domain's routes share: bounded bodies, the ``{"error": ...}`` shape and request ids."""

from __future__ import annotations

import hmac
import os
import random
import re
from typing import Any

import orjson
from pydantic import SecretStr
from starlette.requests import Request
from starlette.responses import Response

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


def admin_denied(request: Request, token: SecretStr | None) -> Response | None:
    """None when the caller may use an admin route (no token configured, or the right bearer token).

    Otherwise the answer to send: 401 without a bearer token, 403 with a wrong one (constant-time compare).
    """
    if token is None:
        return None
    scheme, _, given = request.headers.get("authorization", "").partition(" ")
    if scheme.lower() != "bearer" or not given:
        return error_response(
            401, "this admin route needs 'Authorization: Bearer <admin token>'", request_id_of(request)
        )
    if not hmac.compare_digest(given.strip().encode(), token.get_secret_value().encode()):
        return error_response(403, "the admin token is wrong", request_id_of(request))
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
