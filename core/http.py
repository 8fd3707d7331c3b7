"""The HTTP edge every domain's routes share: JSON bodies, the ``{"error": ...}`` shape and request ids."""

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

_random = random.Random(int.from_bytes(os.urandom(32), "big"))  # ids without a syscall per request
REQUEST_ID = re.compile(r"^[\x21-\x7e]{1,128}$")


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
