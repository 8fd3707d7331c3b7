"""The ``api_tokens`` table (a token's public id, name, scopes, SHA-256 of its secret, expiry, revocation) and
the ``link_signing_key`` table (the one key of the signed report links when no key is configured)."""

from __future__ import annotations

from datetime import datetime

from pydantic import BaseModel, ConfigDict
from sqlalchemy import CheckConstraint, Integer, String
from sqlalchemy.orm import Mapped, mapped_column

from core.database import Base, UTCDateTime, utcnow


class ApiToken(Base):
    """One bearer token; the secret is never stored, only ``token_hash`` (SHA-256 of the whole token)."""

    __tablename__ = "api_tokens"

    id: Mapped[str] = mapped_column(String(32), primary_key=True)  # public: the token's prefix
    name: Mapped[str] = mapped_column(String(100))
    scopes: Mapped[str] = mapped_column(String(100))  # comma-separated, sorted
    token_hash: Mapped[str] = mapped_column(String(64))
    created_at: Mapped[datetime] = mapped_column(UTCDateTime(), default=utcnow)
    expires_at: Mapped[datetime | None] = mapped_column(UTCDateTime(), nullable=True)
    revoked_at: Mapped[datetime | None] = mapped_column(UTCDateTime(), nullable=True)

    def scope_set(self) -> frozenset[str]:
        return frozenset(s for s in self.scopes.split(",") if s)


class LinkKey(Base):
    """The key of the signed report links when ``DRIFTWARDEN_LINK_SIGNING_KEY`` is unset: one row (id 1),
    made by migration 0013 (or on first use), replaced by ``driftwarden tokens rotate-link-key``. It is
    kept in clear: verifying a link's HMAC needs the key itself."""

    __tablename__ = "link_signing_key"
    __table_args__ = (CheckConstraint("id = 1", name="one_row"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=False)
    secret: Mapped[str] = mapped_column(String(64))
    created_at: Mapped[datetime] = mapped_column(UTCDateTime(), default=utcnow)


class TokenRead(BaseModel):
    """A token as listed: never its secret nor its hash."""

    model_config = ConfigDict(from_attributes=True)

    id: str
    name: str
    scopes: list[str]
    created_at: datetime
    expires_at: datetime | None
    revoked_at: datetime | None
    state: str

    @classmethod
    def of(cls, row: ApiToken, *, now: datetime) -> TokenRead:
        expires, revoked = row.expires_at, row.revoked_at
        state = "revoked" if revoked else ("expired" if expires is not None and expires <= now else "active")
        return cls(
            id=row.id,
            name=row.name,
            scopes=sorted(row.scope_set()),
            created_at=row.created_at or now,
            expires_at=expires,
            revoked_at=revoked,
            state=state,
        )
