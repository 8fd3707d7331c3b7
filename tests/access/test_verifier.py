"""The API process's token cache (``access.verifier.CachedVerifier``) on each backend: a flood of made-up
tokens fills it with refusals, which go first, so the grants (and their grace in an outage) stay."""

from __future__ import annotations

import asyncio
from datetime import timedelta

import pytest

from access import verifier
from access.service import create_token
from access.verifier import CachedVerifier
from core.database import Database


def test_a_flood_of_made_up_tokens_does_not_evict_the_grants(
    db: Database, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(verifier, "MAX_ENTRIES", 50)
    with db.session() as s:
        good = create_token(session=s, name="good", scopes=["read"], expires_in=timedelta(hours=1)).secret
    cache = CachedVerifier(db=db, ttl_s=3600, grace_s=900)

    async def flood() -> None:
        assert await cache.verify(good) is not None
        for i in range(120):  # more than twice the room
            assert await cache.verify(f"dw_madeup{i}_x") is None
        reads = cache.reads
        assert await cache.verify(good) is not None
        assert cache.reads == reads  # still cached: not read again
        assert await cache.verify("dw_madeup0_x") is None  # a refusal evicted: read again, still refused
        assert cache.reads == reads + 1

    asyncio.run(flood())
