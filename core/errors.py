"""The one error type a domain raises for a request it cannot serve, mapped to HTTP and CLI in one place.

A domain raises a subclass with the HTTP status and the CLI exit code that fit; its message is one line that
names what is wrong and how to fix it. ``service/`` turns it into a ``{"error": ...}`` JSON body with that
status (any route) or into ``error: <message>`` on stderr with that exit code (any command). An error with a
``details`` dict adds its fields to the JSON body beside ``error``.
"""

from __future__ import annotations


class DomainError(Exception):
    """A request that cannot be served, answered as ``status_code`` over HTTP and ``exit_code`` in the CLI."""

    status_code: int = 409
    exit_code: int = 2


class NotFound(DomainError):
    """The named thing (model, version, run, ...) does not exist."""

    status_code = 404


class Conflict(DomainError):
    """The thing exists but is in a state that does not allow the request."""

    status_code = 409


class Invalid(DomainError):
    """The request itself is malformed (a name, a number, an option)."""

    status_code = 400


class Unavailable(DomainError):
    """A dependency (database schema, storage) is not in a usable state; the message says how to fix it."""

    status_code = 503
