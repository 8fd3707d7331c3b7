"""The API process's :class:`core.auth.TokenVerifier` (the tokens table behind a short cache) and its
:class:`core.auth.LinkKeySource` (the link key, read the same way).

A verified token (or a refused one) is remembered for ``token_cache_s`` seconds under the SHA-256 of the
token, so a request with a token costs a database read at most once per token and period; a revocation
takes effect within that period, an expiry at once (the cached grant carries its expiry). While the database
is unreachable, an answer the database gave within the last ``token_cache_s + token_grace_s`` seconds still
holds (so the routes that spool keep taking predictions), and a token without one is a 503, not a 401.
"""

from __future__ import annotations

import asyncio
import time

from sqlalchemy.exc import SQLAlchemyError

from access.service import link_key, verify_token
from core.auth import Grant, token_digest
from core.config import Settings
from core.database import Database, unreachable
from core.errors import Unavailable

Entry = tuple[float, float, Grant | None]
"""A cached answer: when the database last gave it, when it was last tried, the grant (None: refused)."""
MAX_ENTRIES = 10_000  # beyond: the refusals go, then all (bounds memory against floods of made-up tokens)


class CachedVerifier:
    """Verifies bearer tokens against the tokens table, caching each answer for ``ttl_s`` seconds and keeping
    it ``grace_s`` seconds more for the time the database is unreachable."""

    def __init__(self, *, db: Database, ttl_s: float, grace_s: float = 0.0) -> None:
        self.db = db
        self.ttl_s = ttl_s
        self.grace_s = grace_s
        self._cache: dict[str, Entry] = {}  # by the token's digest
        self._failed_at: float | None = None  # the last read that found the database unreachable
        self.reads = 0  # database reads so far (tests, diagnostics)

    def _read(self, token: str) -> Grant | None:
        self.reads += 1
        with self.db.session() as session:
            return verify_token(session=session, token=token)

    async def verify(self, token: str) -> Grant | None:
        """The token's grant, or None when it is unknown, revoked or expired.

        Unavailable (503) when the database is unreachable and the token was not verified (nor refused)
        within the last ``ttl_s + grace_s`` seconds: a token never seen cannot be told from a made-up one.
        Once a read found the database unreachable, no token is read for ``ttl_s`` seconds (a flood of
        made-up tokens costs one connection attempt per period, not one each).
        """
        key = token_digest(token)
        hit = self._cache.get(key)
        now = time.monotonic()
        if hit is not None and now - hit[1] < self.ttl_s:
            grant = hit[2]
        elif self._failed_at is not None and now - self._failed_at < self.ttl_s:
            grant = self._from_grace(key, hit, now)
        else:
            try:
                grant = await asyncio.to_thread(self._read, token)
            except Exception as exc:
                if not unreachable(exc):
                    raise
                self._failed_at = now
                grant = self._from_grace(key, hit, now)
            else:
                self._failed_at = None
                self._remember(key, (now, now, grant))
        return None if grant is None or grant.expired() else grant

    def _from_grace(self, key: str, hit: Entry | None, now: float) -> Grant | None:
        """The answer the database gave within ``ttl_s + grace_s``, else Unavailable (the database is out)."""
        if hit is None or now - hit[0] >= self.ttl_s + self.grace_s:
            raise Unavailable(
                "database unavailable; cannot verify a new token (a token verified within the last "
                f"{self.ttl_s + self.grace_s:g} s keeps its answer: token_grace_s); try again once the "
                "database is back (rule: token_grace_s)"
            )
        self._cache[key] = (hit[0], now, hit[2])  # its next read is tried after ttl_s again
        return hit[2]

    def _remember(self, key: str, entry: Entry) -> None:
        if len(self._cache) >= MAX_ENTRIES:  # made-up tokens: drop the refusals, keep the grants' grace
            self._cache = {k: v for k, v in self._cache.items() if v[2] is not None}
            if len(self._cache) >= MAX_ENTRIES:
                self._cache.clear()
        self._cache[key] = entry


class CachedLinkKey:
    """The key of signed links: ``DRIFTWARDEN_LINK_SIGNING_KEY``, else the database's, re-read every
    ``ttl_s`` seconds (a rotation takes effect within that period, as a revocation does)."""

    def __init__(self, *, db: Database, settings: Settings, ttl_s: float) -> None:
        self.db = db
        self.settings = settings
        self.ttl_s = ttl_s
        self._cached: tuple[float, bytes] | None = None
        self.reads = 0  # database reads so far (tests, diagnostics)

    def _read(self) -> bytes:
        self.reads += 1
        with self.db.session() as session:
            return link_key(session=session, settings=self.settings)

    async def link_key(self) -> bytes:
        """The current key; Unavailable (503) when the database cannot give it."""
        configured = self.settings.link_signing_key
        if configured is not None:
            return configured.get_secret_value().encode()
        now = time.monotonic()
        if self._cached is not None and now - self._cached[0] < self.ttl_s:
            return self._cached[1]
        try:
            key = await asyncio.to_thread(self._read)
        except SQLAlchemyError as exc:
            raise Unavailable(
                f"cannot check the signed link: the database is unavailable ({type(exc).__name__})"
            ) from None
        if self.ttl_s > 0:
            self._cached = (now, key)
        return key
