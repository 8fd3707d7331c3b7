"""The tokens table: create (the secret is returned once), list, revoke, and verify a presented token."""

from __future__ import annotations

import secrets
from dataclasses import dataclass
from datetime import datetime, timedelta

from sqlalchemy import select
from sqlalchemy.orm import Session

from access.models import ApiToken, aware, utcnow
from core.auth import SCOPES, TOKEN_PREFIX, Grant, same_secret, token_digest, token_id_of
from core.errors import Invalid, NotFound

MAX_NAME = 100


@dataclass(frozen=True)
class Created:
    """A new token: its row and the secret, which exists nowhere else after this."""

    row: ApiToken
    secret: str


def check_scopes(scopes: list[str]) -> frozenset[str]:
    """The scopes as a set, or Invalid naming an unknown one."""
    unknown = sorted(set(scopes) - set(SCOPES))
    if unknown or not scopes:
        raise Invalid(f"scope: {unknown or 'none given'} — choose from {list(SCOPES)} (admin implies all)")
    return frozenset(scopes)


def create_token(
    *,
    session: Session,
    name: str,
    scopes: list[str],
    expires_in: timedelta | None,
    now: datetime | None = None,
) -> Created:
    """A new token ``dw_<id>_<secret>`` with these scopes; only the SHA-256 of it is stored."""
    name = name.strip()
    if not name or len(name) > MAX_NAME:
        raise Invalid(f"name: 1 to {MAX_NAME} characters saying who uses the token, got {name!r}")
    wanted = check_scopes(scopes)
    if expires_in is not None and expires_in <= timedelta(0):
        raise Invalid("expires_in: must be positive")
    at = now or utcnow()
    token_id = secrets.token_hex(6)
    secret = f"{TOKEN_PREFIX}{token_id}_{secrets.token_urlsafe(32)}"
    row = ApiToken(
        id=token_id,
        name=name,
        scopes=",".join(sorted(wanted)),
        token_hash=token_digest(secret),
        created_at=at,
        expires_at=None if expires_in is None else at + expires_in,
    )
    session.add(row)
    session.flush()
    return Created(row=row, secret=secret)


def list_tokens(*, session: Session) -> list[ApiToken]:
    """Every token, newest first (revoked and expired ones too)."""
    return list(session.scalars(select(ApiToken).order_by(ApiToken.created_at.desc(), ApiToken.id)))


def revoke_token(*, session: Session, token_id: str, now: datetime | None = None) -> ApiToken:
    """Revoke a token by its public id (already revoked: unchanged)."""
    row = session.get(ApiToken, token_id)
    if row is None:
        raise NotFound(f"token {token_id!r} does not exist (see `driftwarden tokens list`)")
    if row.revoked_at is None:
        row.revoked_at = now or utcnow()
    return row


def verify_token(*, session: Session, token: str, now: datetime | None = None) -> Grant | None:
    """The grant of a presented token, or None when it is unknown, wrong, revoked or expired."""
    token_id = token_id_of(token)
    if token_id is None:
        return None
    row = session.get(ApiToken, token_id)
    if row is None or not same_secret(token_digest(token), row.token_hash) or row.revoked_at is not None:
        return None
    grant = Grant(token_id=row.id, name=row.name, scopes=row.scope_set(), expires_at=aware(row.expires_at))
    return None if grant.expired(now) else grant
