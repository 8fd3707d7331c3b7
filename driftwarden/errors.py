"""The exceptions of the Python API: bad input to :func:`driftwarden.compare` and the HTTP API's answers.

Every one derives from :class:`DriftwardenError`, so ``except driftwarden.DriftwardenError`` catches them
all. :class:`InvalidInput` is also a ``ValueError`` (bad data or settings). :class:`ApiError` and its
subclasses carry the server's answer: the HTTP ``status``, the server's ``message`` (the ``error`` of its
JSON body) and the whole ``body``.
"""

from __future__ import annotations

from typing import Any


class DriftwardenError(Exception):
    """The base of every error the Python API raises."""


class InvalidInput(DriftwardenError, ValueError):
    """Data, a column name or a setting that cannot be compared; the message names it and the rule."""


class ApiError(DriftwardenError):
    """The server refused a request: ``status`` (HTTP), ``message`` (the server's words), ``body`` (its
    JSON answer, or the text when it was not JSON)."""

    def __init__(
        self, status: int, message: str, body: Any = None, *, method: str = "", url: str = ""
    ) -> None:
        self.status = status
        self.message = message
        self.body = body
        self.method = method
        self.url = url
        where = f" ({method} {url})" if method else ""
        super().__init__(f"HTTP {status}{where}: {message}")


class BadRequest(ApiError):
    """400 or 422: the request itself is malformed (the message names the field and the rule)."""


class Unauthorized(ApiError):
    """401 or 403: no token, a token that is not accepted, or one without the route's scope."""


class NotFound(ApiError):
    """404: the model, version, run or job does not exist."""


class Conflict(ApiError):
    """409: the thing exists but its state does not allow the request (e.g. no monitor run yet)."""


class ServerError(ApiError):
    """5xx: the server could not answer (503: a dependency such as its database is unavailable)."""


def error_for(status: int) -> type[ApiError]:
    """The exception class of an HTTP error status."""
    if status in (400, 422):
        return BadRequest
    if status in (401, 403):
        return Unauthorized
    if status == 404:
        return NotFound
    if status == 409:
        return Conflict
    if status >= 500:
        return ServerError
    return ApiError


class Unreachable(DriftwardenError, ConnectionError):
    """The server did not answer: refused, unresolvable or timed out (the message says which)."""
