"""Who may call what: the token scopes, a verified caller (:class:`Grant`) and the verifier protocol.

core owns no table: the tokens live in ``access/``, which the API process wires in as the
:class:`TokenVerifier` of ``request.app.state.verifier`` (see :func:`core.http.require_scope`).
"""

from __future__ import annotations

import hashlib
import hmac
from dataclasses import dataclass
from datetime import UTC, datetime
from enum import StrEnum
from typing import Protocol


class Scope(StrEnum):
    """What a token may do; ``admin`` implies every other scope."""

    PREDICT = "predict"  # :predict, /infer, model status and metadata (when predict_requires_token)
    FEEDBACK = "feedback"  # POST .../feedback
    READ = "read"  # drift reports and history, alerts, rules, silences, jobs, versions
    ADMIN = "admin"  # every change: promote, rollback, labels, retrain, rules, silences, webhooks, runs


SCOPES: tuple[str, ...] = tuple(s.value for s in Scope)
TOKEN_PREFIX = "dw_"


@dataclass(frozen=True)
class Grant:
    """A verified caller: the token's id (public), its name, its scopes and when it stops working."""

    token_id: str
    name: str
    scopes: frozenset[str]
    expires_at: datetime | None = None

    def allows(self, scope: str) -> bool:
        """True when the grant has ``scope`` or ``admin``."""
        return Scope.ADMIN.value in self.scopes or scope in self.scopes

    def expired(self, now: datetime | None = None) -> bool:
        """True once ``expires_at`` has passed."""
        return self.expires_at is not None and (now or datetime.now(UTC)) >= self.expires_at


BOOTSTRAP = Grant(
    token_id="admin_token", name="DRIFTWARDEN_ADMIN_TOKEN", scopes=frozenset({Scope.ADMIN.value})
)


class TokenVerifier(Protocol):
    """A presented bearer token to its :class:`Grant`; None when it is unknown, revoked or expired."""

    async def verify(self, token: str) -> Grant | None: ...


def token_digest(token: str) -> str:
    """SHA-256 of a token (hex): what the database stores; the secret itself is never stored."""
    return hashlib.sha256(token.encode()).hexdigest()


def token_id_of(token: str) -> str | None:
    """The public id inside a token ``dw_<id>_<secret>``, or None when the token is not of that shape."""
    if not token.startswith(TOKEN_PREFIX):
        return None
    token_id, sep, secret = token[len(TOKEN_PREFIX) :].partition("_")
    return token_id if sep and token_id.isalnum() and len(token_id) <= 32 and secret else None


def same_secret(given: str, expected: str) -> bool:
    """Constant-time equality of two secrets (or digests)."""
    return hmac.compare_digest(given.encode(), expected.encode())
