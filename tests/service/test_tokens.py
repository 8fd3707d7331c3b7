"""Scoped tokens over real HTTP: 401 without a valid token, 403 without the scope, the route's answer with it.

A server (uvicorn, in a thread) on each backend; tokens made with ``access.service`` in its database. The
model ``credit`` is not served here (``serve_models=["__none__"]``): a request that passes the scope check
gets the route's own answer (404 "not served", 200 a list), which is how these tests tell it passed.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest

from access.service import create_token, revoke_token
from core.database import Database, utcnow
from tests.service.routes import ADMIN_ROUTES, READ_ROUTES, SILENCE, Route
from tests.support import NO_AUTH, Server, auth, serve_settings

ADMIN = "bootstrap-admin-token"
FEEDBACK = {"labels": [{"prediction_id": "00000000000000000000000000000000", "label": 1}]}


@dataclass
class Tokens:
    predict: str
    feedback: str
    read: str
    admin: str
    expired: str
    revoked: str


def make_tokens(db: Database) -> Tokens:
    with db.session() as s:

        def make(scope: str, **kw: Any) -> str:
            made = create_token(
                session=s, name=f"t-{scope}", scopes=[scope], expires_in=timedelta(hours=1), **kw
            )
            return made.secret

        past = utcnow() - timedelta(hours=3)
        tokens = Tokens(
            predict=make("predict"),
            feedback=make("feedback"),
            read=make("read"),
            admin=make("admin"),
            expired=make("read", now=past),
            revoked=make("read"),
        )
        revoke_token(session=s, token_id=tokens.revoked.split("_")[1])
    return tokens


def start(db: Database, tmp_path: Path, **overrides: Any) -> Server:
    return Server(
        serve_settings(db.url, tmp_path / "spool", serve_models=["__none__"], admin_token=ADMIN, **overrides)
    )


def call(c: httpx.Client, route: Route, token: str | None) -> httpx.Response:
    method, path, body = route
    return c.request(method, path, json=body, headers=auth(token) if token else NO_AUTH)


FEEDBACK_ROUTE = ("POST", "/v1/models/credit/feedback", FEEDBACK)
PREDICT_ROUTES: list[Route] = [
    ("POST", "/v1/models/credit:predict", {"instances": [{"age": 1}]}),
    ("POST", "/v2/models/credit/infer", {"inputs": []}),
    ("GET", "/v1/models/credit/metadata", None),
    ("GET", "/v2/models/credit", None),
]


def assert_denied(r: httpx.Response, status: int, *words: str) -> None:
    assert r.status_code == status, (r.request.url, r.status_code, r.text)
    assert r.headers["content-type"].startswith("application/json")
    for w in words:
        assert w in r.json()["error"], (w, r.json())
    if status == 401:
        assert r.headers["www-authenticate"].startswith("Bearer")


def passed(r: httpx.Response) -> bool:
    """The scope check let the request through (the route answered for itself)."""
    return r.status_code not in (401, 403)


def test_each_scope_opens_its_routes_and_no_other(db: Database, tmp_path: Path) -> None:
    t = make_tokens(db)
    with start(db, tmp_path) as server, server.client() as c:
        for route in READ_ROUTES:
            assert_denied(call(c, route, None), 401, "Authorization: Bearer", "scope 'read'")
            assert_denied(call(c, route, "dw_abc_garbage"), 401, "unknown, revoked or expired")
            for bad in (t.expired, t.revoked):
                assert_denied(call(c, route, bad), 401, "unknown, revoked or expired")
            for lacking in (t.predict, t.feedback):
                assert_denied(call(c, route, lacking), 403, "needs scope 'read' (or 'admin')")
            for ok in (t.read, t.admin, ADMIN):
                assert passed(call(c, route, ok)), route
        for route in ADMIN_ROUTES:
            assert_denied(call(c, route, None), 401, "scope 'admin'")
            for lacking in (t.predict, t.feedback, t.read):
                assert_denied(call(c, route, lacking), 403, "needs scope 'admin'")
                assert "(or 'admin')" not in call(c, route, lacking).json()["error"]  # said once
            for ok in (t.admin, ADMIN):
                assert passed(call(c, route, ok)), route
        assert_denied(call(c, FEEDBACK_ROUTE, None), 401, "scope 'feedback'")
        for lacking in (t.predict, t.read):
            assert_denied(call(c, FEEDBACK_ROUTE, lacking), 403, "needs scope 'feedback'")
        for ok in (t.feedback, t.admin):
            r = call(c, FEEDBACK_ROUTE, ok)
            assert r.status_code == 404 and "credit" in r.json()["error"], r.text
        # predict is open by default (predict_requires_token off), with or without a token
        for route in PREDICT_ROUTES:
            for token in (None, t.read, "dw_abc_garbage"):
                r = call(c, route, token)
                assert r.status_code == 404, (route, r.text)
        # operations and the API description stay open
        for path in ("/healthz", "/readyz", "/metrics", "/openapi.json", "/status", "/v2/health/live"):
            assert c.get(path, headers=NO_AUTH).status_code == 200, path


def test_an_admin_token_changes_state(db: Database, tmp_path: Path) -> None:
    t = make_tokens(db)
    with start(db, tmp_path) as server, server.client() as c:
        r = call(c, ("POST", "/v1/silences", SILENCE), t.admin)
        assert r.status_code == 201, r.text
        listed = call(c, ("GET", "/v1/silences", None), t.read).json()["silences"]
        assert [x["id"] for x in listed] == [r.json()["id"]]


def test_predict_can_require_its_scope(db: Database, tmp_path: Path) -> None:
    t = make_tokens(db)
    with start(db, tmp_path, predict_requires_token=True) as server, server.client() as c:
        for route in PREDICT_ROUTES:
            assert_denied(call(c, route, None), 401, "scope 'predict'")
            assert_denied(call(c, route, t.expired), 401)
            for lacking in (t.read, t.feedback):
                assert_denied(call(c, route, lacking), 403, "needs scope 'predict'")
            for ok in (t.predict, t.admin, ADMIN):
                assert call(c, route, ok).status_code == 404, route  # through the check: not served here
        doc = c.get("/openapi.json").json()  # the document says so too
        for path, method in [
            ("/v1/models/{name}:predict", "post"),
            ("/v2/models/{name}/infer", "post"),
            ("/v1/models/{name}/metadata", "get"),
            ("/v2/models/{name}", "get"),
        ]:
            op = doc["paths"][path][method]
            assert op["security"] == [{"HTTPBearer": []}], (method, path)
            assert {"401", "403"} <= set(op["responses"]), (method, path)
        assert "security" not in doc["paths"]["/v2/health/live"]["get"]


def test_revocation_takes_effect_within_the_cache_period(db: Database, tmp_path: Path) -> None:
    with db.session() as s:
        made = create_token(session=s, name="r", scopes=["read"], expires_in=None)
    route = ("GET", "/v1/alerts", None)
    with start(db, tmp_path, token_cache_s=0.5) as server, server.client() as c:
        verifier = server.app.state.verifier
        for _ in range(5):
            assert call(c, route, made.secret).status_code == 200
        assert verifier.reads == 1  # one database read for five requests inside the cache period
        with db.session() as s:
            revoke_token(session=s, token_id=made.row.id)
        deadline = time.monotonic() + 10
        while call(c, route, made.secret).status_code == 200:
            assert time.monotonic() < deadline, "a revoked token still works after 10 s"
            time.sleep(0.1)
        assert_denied(call(c, route, made.secret), 401, "revoked")


def test_an_expiry_inside_the_cache_period_still_refuses(db: Database, tmp_path: Path) -> None:
    with db.session() as s:
        made = create_token(session=s, name="short", scopes=["read"], expires_in=timedelta(seconds=2))
    route = ("GET", "/v1/alerts", None)
    with start(db, tmp_path, token_cache_s=3600) as server, server.client() as c:
        assert call(c, route, made.secret).status_code == 200
        time.sleep(2.2)
        assert_denied(call(c, route, made.secret), 401, "expired")


def test_secrets_never_reach_logs_metrics_or_error_bodies(
    db: Database, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    t = make_tokens(db)
    hook_secret = "whsec_" + "QUJDREVGR0hJSktMTU5PUFFSU1RVVldYWVo="
    caplog.set_level(logging.DEBUG)
    seen: list[str] = []
    with start(db, tmp_path) as server, server.client() as c:
        for token in (t.read, t.predict, t.revoked, ADMIN):
            for route in (*READ_ROUTES[:2], *ADMIN_ROUTES[:2], FEEDBACK_ROUTE):
                seen.append(call(c, route, token).text)
        bad_hooks = [
            {"url": "ftp://x.example/h", "secret": hook_secret},
            {"url": "http://x.example/h", "secret": hook_secret, "filter": {"events": ["nope"]}},
            {"url": "http://x.example/h", "secret": hook_secret, "extra": 1},
            {"url": "http://x.example/h", "secret": hook_secret[:-2] + "!!"},
        ]
        for body in bad_hooks:
            r = c.post("/v1/webhooks", json=body, headers=auth(ADMIN))
            assert r.status_code == 400, r.text
            seen.append(r.text)
        r = c.post(
            "/v1/webhooks", json={"url": "http://x.example/h", "secret": hook_secret}, headers=auth(ADMIN)
        )
        assert r.status_code == 201
        seen.append(c.get("/v1/webhooks", headers=auth(ADMIN)).text)
        seen.append(c.get(f"/v1/webhooks/{r.json()['id']}", headers=auth(ADMIN)).text)
        seen.append(c.get("/metrics").text)
        seen.append(c.get("/status").text)
        seen.append(c.get("/readyz").text)
    everything = "\n".join([*seen, caplog.text])
    for secret in (t.read, t.predict, t.revoked, ADMIN, hook_secret, hook_secret[:-2] + "!!"):
        assert secret not in everything
        random_part = secret.split("_", 2)[2] if secret.startswith("dw_") else secret[6:]  # past the prefix
        assert random_part[:16] not in everything


def test_the_alertmanager_receiver_without_its_own_credentials_needs_admin(
    db: Database, tmp_path: Path
) -> None:
    t = make_tokens(db)
    route = ("POST", "/v1/alerts/alertmanager", {"version": "4", "status": "firing", "alerts": []})
    with start(db, tmp_path) as server, server.client() as c:
        assert_denied(call(c, route, None), 401, "scope 'admin'")
        assert_denied(call(c, route, t.read), 403, "needs scope 'admin'")
        for ok in (t.admin, ADMIN):
            r = call(c, route, ok)
            assert r.status_code == 200 and r.json()["received"] == 0, r.text
