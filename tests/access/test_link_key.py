"""The key of the signed report links: one row per database (made by the migration, or on first use by
processes racing for it, which agree), rotated on demand, cached by the API process; and the signing
itself (core.auth): what a signature covers, and why a link is refused."""

from __future__ import annotations

import asyncio
import threading
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext
from pydantic import SecretStr
from sqlalchemy import delete, func, select, text
from sqlalchemy.exc import IntegrityError

from access.models import LinkKey
from access.service import link_key, rotate_link_key, sign_path, stored_link_key
from access.verifier import CachedLinkKey
from core.auth import link_refusal, link_signature, signed_path
from core.config import Settings
from core.database import Base, Database, make_engine, open_database
from core.errors import Invalid, Unavailable

KEY = b"k" * 32


def rows(db: Database) -> int:
    with db.session() as s:
        return int(s.scalar(select(func.count()).select_from(LinkKey)) or 0)


def test_the_migration_makes_the_table_and_one_random_key(db: Database, tmp_path: Path) -> None:
    with db.engine.connect() as conn:
        diff = compare_metadata(MigrationContext.configure(conn), Base.metadata)
    assert [d for d in diff if "link_signing_key" in repr(d)] == []
    assert rows(db) == 1
    with db.session() as s:
        secret = stored_link_key(session=s)
    assert len(secret) == 43 and secret != stored_link_key_of_another_database(tmp_path)
    with pytest.raises(IntegrityError), db.session() as s:  # one row only
        s.execute(
            text("INSERT INTO link_signing_key (id, secret, created_at) VALUES (2, 'x', :t)"),
            {"t": datetime.now(UTC)},
        )


def stored_link_key_of_another_database(tmp_path: Path) -> str:
    other = open_database(f"sqlite:///{tmp_path / 'other.db'}", upgrade=True)
    try:
        with other.session() as s:
            return stored_link_key(session=s)
    finally:
        other.dispose()


def race_for_the_key(db: Database, n: int) -> tuple[list[str], list[BaseException]]:
    """``n`` threads, released at once, each reading the key in its own transaction."""
    got: list[str] = []
    errors: list[BaseException] = []
    barrier = threading.Barrier(n)

    def read() -> None:
        try:
            barrier.wait()
            with db.session() as s:
                got.append(stored_link_key(session=s))
        except BaseException as exc:  # noqa: BLE001 - reported by the caller
            errors.append(exc)

    threads = [threading.Thread(target=read) for _ in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return got, errors


def test_processes_racing_for_a_missing_key_agree_on_one(db: Database) -> None:
    for _ in range(3):
        with db.session() as s:
            s.execute(delete(LinkKey))
        got, errors = race_for_the_key(db, 6)
        assert errors == [] and len(got) == 6 and len(set(got)) == 1
        assert rows(db) == 1


def test_rotation_replaces_the_key_and_a_configured_key_wins(db: Database) -> None:
    settings = Settings(database_url=SecretStr(db.url))
    with db.session() as s:
        before = link_key(session=s, settings=settings)
        link, _ = sign_path(session=s, settings=settings, path="/reports/m/drift", ttl=timedelta(hours=1))
    with db.session() as s:
        rotate_link_key(session=s)
    with db.session() as s:
        after = link_key(session=s, settings=settings)
        configured = Settings(database_url=SecretStr(db.url), link_signing_key=SecretStr("c" * 40))
        assert link_key(session=s, settings=configured) == b"c" * 40
    assert after != before and rows(db) == 1
    path, query = link.split("?")
    expires = int(query.split("&")[0].removeprefix("expires="))
    signature = query.split("signature=")[1]
    now = datetime.now(UTC).timestamp()
    assert link_refusal(key=before, path=path, expires=expires, signature=signature, now=now) is None
    refused = link_refusal(key=after, path=path, expires=expires, signature=signature, now=now)
    assert refused is not None and refused.startswith("invalid signature")


def test_sign_path_bounds_the_lifetime(db: Database) -> None:
    settings = Settings(database_url=SecretStr(db.url))
    with db.session() as s:
        for ttl in (timedelta(0), timedelta(seconds=-1), timedelta(days=91)):
            with pytest.raises(Invalid, match="at most 90 days"):
                sign_path(session=s, settings=settings, path="/reports/m/drift", ttl=ttl)
        now = datetime(2027, 1, 1, tzinfo=UTC)
        _, expiry = sign_path(session=s, settings=settings, path="/x", ttl=timedelta(days=90), now=now)
    assert expiry == now + timedelta(days=90)


def test_the_cache_reads_the_database_once_per_period(db: Database) -> None:
    settings = Settings(database_url=SecretStr(db.url))
    cached = CachedLinkKey(db=db, settings=settings, ttl_s=3600)
    first = asyncio.run(cached.link_key())
    with db.session() as s:
        rotate_link_key(session=s)
    assert asyncio.run(cached.link_key()) == first and cached.reads == 1  # inside the period: cached
    fresh = CachedLinkKey(db=db, settings=settings, ttl_s=0)
    assert asyncio.run(fresh.link_key()) != first and asyncio.run(fresh.link_key()) != first
    assert fresh.reads == 2  # 0: read every time


def test_an_unreachable_database_is_503_not_500() -> None:
    url = "postgresql+psycopg://postgres@127.0.0.1:1/none"
    broken = Database(url=url, engine=make_engine(url), factory=None)  # type: ignore[arg-type]
    from sqlalchemy.orm import sessionmaker

    broken.factory = sessionmaker(broken.engine)
    cached = CachedLinkKey(db=broken, settings=Settings(database_url=SecretStr(url)), ttl_s=0)
    with pytest.raises(Unavailable, match="database is unavailable") as caught:
        asyncio.run(cached.link_key())
    assert caught.value.status_code == 503
    broken.dispose()


def test_what_a_signature_covers() -> None:
    sig = link_signature(key=KEY, path="/reports/credit/drift", expires=2_000_000_000)
    assert len(sig) == 43 and "=" not in sig
    assert sig == link_signature(key=KEY, path="/reports/credit/drift", expires=2_000_000_000)
    others = {
        link_signature(key=KEY, path="/reports/credit2/drift", expires=2_000_000_000),
        link_signature(key=KEY, path="/reports/credit/drift", expires=2_000_000_001),
        link_signature(key=b"j" * 32, path="/reports/credit/drift", expires=2_000_000_000),
    }
    assert sig not in others and len(others) == 3
    assert (
        signed_path(key=KEY, path="/p", expires=5)
        == f"/p?expires=5&signature={link_signature(key=KEY, path='/p', expires=5)}"
    )


@pytest.mark.parametrize(
    ("expires", "signature", "now", "why"),
    [
        (100, "good", 99.0, None),
        (100, "good", 100.0, "expired at 1970-01-01T00:01:40+00:00"),
        (101, "good", 99.0, "invalid signature"),
        (100, "bad", 99.0, "invalid signature"),
        (100, "short", 99.0, "malformed signature"),
        (100, "good+newline", 99.0, "malformed signature"),
    ],
)
def test_why_a_link_is_refused(expires: int, signature: str, now: float, why: str | None) -> None:
    good = link_signature(key=KEY, path="/r", expires=100)
    given = {
        "good": good,
        "bad": ("A" if good[0] != "A" else "B") + good[1:],
        "short": good[:-1],
        "good+newline": good + "\n",
    }[signature]
    got = link_refusal(key=KEY, path="/r", expires=expires, signature=given, now=now)
    assert got == why if why is None else (got is not None and got.startswith(why)), got
