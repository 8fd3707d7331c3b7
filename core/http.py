"""The HTTP edge every domain's routes share: JSON bodies, the ``{"error": ...}`` shape and request ids."""

from __future__ import annotations

import os
import random
import re
from typing import Any

import orjson
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
