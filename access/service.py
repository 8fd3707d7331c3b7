"""The tokens table: create (the secret is returned once), list, revoke, and verify a presented token; the
key of the signed report links: read (made on first use), rotate, and sign a path with it."""

from __future__ import annotations

import secrets
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from sqlalchemy import select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from access.models import ApiToken, LinkKey
from core.auth import (
    SCOPES,
    TOKEN_PREFIX,
    Grant,
    same_secret,
    signed_path,
    token_digest,
    token_id_of,
)
from core.config import MAX_LINK_TTL_S, Settings
from core.database import utcnow
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
    grant = Grant(token_id=row.id, name=row.name, scopes=row.scope_set(), expires_at=row.expires_at)
    return None if grant.expired(now) else grant


LINK_KEY_ID = 1


def new_link_secret() -> str:
    """A fresh link key: 32 random bytes, base64url (43 characters)."""
    return secrets.token_urlsafe(32)


def stored_link_key(*, session: Session, now: datetime | None = None) -> str:
    """The database's link key, made now if there is none (two processes racing agree on one)."""
    row = session.get(LinkKey, LINK_KEY_ID)
    if row is not None:
        return row.secret
    try:
        with session.begin_nested():
            session.add(LinkKey(id=LINK_KEY_ID, secret=new_link_secret(), created_at=now or utcnow()))
    except IntegrityError:  # another process made it first: theirs is the key
        pass
    row = session.get(LinkKey, LINK_KEY_ID, populate_existing=True)
    if row is None:  # pragma: no cover - the insert either succeeded or met the other row
        raise RuntimeError("link_signing_key: no row after inserting one")
    return row.secret


def link_key(*, session: Session, settings: Settings) -> bytes:
    """The key signing report links: ``DRIFTWARDEN_LINK_SIGNING_KEY``, else the database's own."""
    configured = settings.link_signing_key
    secret = configured.get_secret_value() if configured is not None else stored_link_key(session=session)
    return secret.encode()


def rotate_link_key(*, session: Session, now: datetime | None = None) -> LinkKey:
    """Replace the database's link key: every link it signed stops working (within ``token_cache_s``)."""
    row = session.get(LinkKey, LINK_KEY_ID)
    if row is None:
        row = LinkKey(id=LINK_KEY_ID, secret=new_link_secret(), created_at=now or utcnow())
        session.add(row)
    else:
        row.secret = new_link_secret()
        row.created_at = now or utcnow()
    session.flush()
    return row


def check_link_ttl(ttl: timedelta) -> timedelta:
    """``ttl`` when it is positive and at most 90 days, else Invalid."""
    if not timedelta(0) < ttl <= timedelta(seconds=MAX_LINK_TTL_S):
        raise Invalid(
            f"ttl: a signed link lives more than 0 seconds and at most {MAX_LINK_TTL_S / 86400:g} days"
        )
    return ttl


def sign_path(
    *, session: Session, settings: Settings, path: str, ttl: timedelta, now: datetime | None = None
) -> tuple[str, datetime]:
    """``path`` signed to open without a token for ``ttl``: ``(path?expires=...&signature=..., expiry)``."""
    expires = int(((now or utcnow()) + check_link_ttl(ttl)).timestamp())
    key = link_key(session=session, settings=settings)
    return signed_path(key=key, path=path, expires=expires), datetime.fromtimestamp(expires, UTC)
