"""Who may call what: the token scopes, a verified caller (:class:`Grant`), the verifier protocol, and
the signed links that open one resource without a token.

core owns no table: the tokens and the link key live in ``access/``, which the API process wires in as the
:class:`TokenVerifier` of ``request.app.state.verifier`` and the :class:`LinkKeySource` of
``request.app.state.link_keys`` (see :func:`core.http.require_scope` and
:func:`core.http.require_scope_or_signed_link`).

A signed link is ``<path>?expires=<unix seconds>&signature=<s>`` where ``s`` is the HMAC-SHA256, under the
server's link key, of ``dw-link-v1``, the expiry and the path (never the method, the host or the query), in
unpadded base64url. It grants exactly that path until that second; the key never leaves the server.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import re
import urllib.parse
from dataclasses import dataclass
from datetime import UTC, datetime
from enum import StrEnum
from typing import Protocol


class Scope(StrEnum):
    """What a token may do; ``admin`` implies every other scope."""

    PREDICT = "predict"  # :predict, /infer, model status and metadata (when predict_requires_token)
    FEEDBACK = "feedback"  # POST .../feedback
    INGEST = "ingest"  # POST /v1/models/{name}/predictions: predictions another stack answered, nothing else
    READ = "read"  # drift reports and history, alerts, rules, silences, jobs, versions
    ADMIN = "admin"  # every change: promote, rollback, labels, retrain, rules, silences, webhooks, runs


SCOPES: tuple[str, ...] = tuple(s.value for s in Scope)
SCOPES_LISTED = f"{', '.join(SCOPES[:-1])} or {SCOPES[-1]}"  # every help text's list of the scopes
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


LINK_SCHEME = "dw-link-v1"  # the first line of every signed message: a new scheme gets a new name
LINK_SIGNATURE = re.compile(r"[A-Za-z0-9_-]{43}")  # 32 bytes of HMAC-SHA256 in unpadded base64url


class LinkKeySource(Protocol):
    """The key that signs and verifies links (the API process: ``request.app.state.link_keys``)."""

    async def link_key(self) -> bytes: ...


def link_signature(*, key: bytes, path: str, expires: int) -> str:
    """HMAC-SHA256 under ``key`` of ``path`` valid until ``expires`` (Unix seconds), unpadded base64url."""
    message = f"{LINK_SCHEME}\n{expires}\n{path}".encode()
    digest = hmac.new(key, message, hashlib.sha256).digest()
    return base64.urlsafe_b64encode(digest).rstrip(b"=").decode()


def signed_path(*, key: bytes, path: str, expires: int) -> str:
    """``path?expires=...&signature=...``: ``path`` opened without a token until ``expires``."""
    query = urllib.parse.urlencode(
        {"expires": expires, "signature": link_signature(key=key, path=path, expires=expires)}
    )
    return f"{path}?{query}"


def link_refusal(*, key: bytes, path: str, expires: int, signature: str, now: float) -> str | None:
    """Why a signed link does not open ``path`` (malformed, invalid signature, expired), or None when it does.

    The signature is compared in constant time, and checked before the expiry: "expired" is said only of a
    link this server signed.
    """
    if not LINK_SIGNATURE.fullmatch(signature):
        return (
            "malformed signature: expected 43 base64url characters (make a link with "
            "`driftwarden reports link MODEL`)"
        )
    if not same_secret(signature, link_signature(key=key, path=path, expires=expires)):
        return (
            f"invalid signature: it does not sign {path} until the given expiry (a changed path, model or "
            "expiry, or a link signed with another key, e.g. before a rotation)"
        )
    if now >= expires:
        try:
            when = datetime.fromtimestamp(expires, UTC).isoformat(timespec="seconds")
        except (OverflowError, OSError, ValueError):
            when = str(expires)
        return f"expired at {when}: ask for a new link (`driftwarden reports link MODEL`)"
    return None
