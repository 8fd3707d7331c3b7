"""Scoped tokens in the database: only a hash is stored; unknown, wrong, revoked, expired tokens refused."""

from __future__ import annotations

import hashlib
from datetime import timedelta

import pytest
from sqlalchemy import text

from access.service import create_token, list_tokens, revoke_token, verify_token
from core.auth import Grant, token_id_of
from core.database import Database, utcnow
from core.errors import Invalid, NotFound


def test_the_database_holds_a_hash_never_the_secret(db: Database) -> None:
    with db.session() as s:
        made = create_token(session=s, name="ci", scopes=["read", "feedback"], expires_in=timedelta(days=1))
        secret, token_id = made.secret, made.row.id
    assert secret.startswith(f"dw_{token_id}_") and len(secret) > 40 and token_id_of(secret) == token_id
    with db.engine.connect() as conn:
        rows = [tuple(map(str, r)) for r in conn.execute(text("select * from api_tokens"))]
    assert len(rows) == 1
    stored = " ".join(rows[0])
    random_part = secret.split("_", 2)[2]  # the 43 random characters (they may hold "_")
    assert secret not in stored and random_part not in stored
    assert hashlib.sha256(secret.encode()).hexdigest() in rows[0]


def test_verify_accepts_the_token_and_refuses_a_wrong_one(db: Database) -> None:
    with db.session() as s:
        secret = create_token(session=s, name="labeler", scopes=["feedback"], expires_in=None).secret
    with db.session() as s:
        grant = verify_token(session=s, token=secret)
        assert isinstance(grant, Grant) and grant.scopes == {"feedback"} and grant.name == "labeler"
        assert grant.allows("feedback") and not grant.allows("read") and not grant.allows("admin")
        assert grant.expires_at is None
        token_id = grant.token_id
        for wrong in (
            secret[:-1] + ("A" if secret[-1] != "A" else "B"),
            f"dw_{token_id}_x",
            "dw_nope_x",
            "",
            "x",
        ):
            assert verify_token(session=s, token=wrong) is None, wrong


def test_admin_implies_every_scope(db: Database) -> None:
    with db.session() as s:
        secret = create_token(session=s, name="ops", scopes=["admin"], expires_in=timedelta(hours=1)).secret
    with db.session() as s:
        grant = verify_token(session=s, token=secret)
    assert grant is not None and all(grant.allows(x) for x in ("predict", "feedback", "read", "admin"))


def test_expired_and_revoked_tokens_are_refused(db: Database) -> None:
    now = utcnow()
    with db.session() as s:
        old = create_token(
            session=s,
            name="old",
            scopes=["read"],
            expires_in=timedelta(hours=1),
            now=now - timedelta(hours=2),
        ).secret
        soon = create_token(session=s, name="soon", scopes=["read"], expires_in=timedelta(minutes=5)).secret
        kept = create_token(session=s, name="kept", scopes=["read"], expires_in=None)
    with db.session() as s:
        assert verify_token(session=s, token=old) is None
        assert verify_token(session=s, token=soon) is not None
        assert verify_token(session=s, token=soon, now=now + timedelta(minutes=6)) is None
        assert verify_token(session=s, token=kept.secret) is not None
        revoke_token(session=s, token_id=kept.row.id)
    with db.session() as s:
        assert verify_token(session=s, token=kept.secret) is None
        states = {t.name: t.revoked_at is not None for t in list_tokens(session=s)}
        assert states == {"old": False, "soon": False, "kept": True}
        with pytest.raises(NotFound, match="tokens list"):
            revoke_token(session=s, token_id="nope")


@pytest.mark.parametrize(
    ("name", "scopes", "words"),
    [
        ("x", ["write"], "scope: ['write']"),
        ("x", [], "scope: none given"),
        ("", ["read"], "name: 1 to 100"),
        ("y" * 101, ["read"], "name: 1 to 100"),
    ],
)
def test_bad_input_names_the_field(db: Database, name: str, scopes: list[str], words: str) -> None:
    with db.session() as s, pytest.raises(Invalid, match=words.replace("[", r"\[").replace("]", r"\]")):
        create_token(session=s, name=name, scopes=scopes, expires_in=None)
