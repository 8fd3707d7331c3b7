"""Signed report links over real HTTP: a browser (no bearer header) opens ``/reports/{name}/drift`` with a
link, and only with a link to exactly that report that has not expired and was signed with the server's key.

A server (uvicorn, in a thread) on each backend. No model is registered, so a request that gets through
the check gets the route's own answer (404 "unknown model 'credit'"): that is how these tests tell it
passed (tests/monitors/test_api.py opens a real report, 200, with a link, in headless Chromium too).
"""

from __future__ import annotations

import logging
import os
import subprocess
import sys
import threading
import time
from contextlib import ExitStack
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import httpx
import pytest
from pydantic import SecretStr
from sqlalchemy import delete
from sqlalchemy.orm import sessionmaker

from access.models import LinkKey
from access.service import create_token, link_key, rotate_link_key, sign_path, stored_link_key
from access.verifier import CachedLinkKey
from alerts.webhooks import links
from core.auth import link_signature, signed_path
from core.config import Settings
from core.database import Database, make_engine
from core.network import free_port
from registry.service import register_version
from tests.support import NO_AUTH, Server, auth, serve_settings, wait_http_ready

REPORT = "/reports/credit/drift"
CLI = str(Path(sys.executable).parent / "driftwarden")
ROOT = Path(__file__).resolve().parents[2]
OTHER_KEY = b"another-server-s-link-key-of-32-bytes!"
CONFIGURED_KEY = "configured-link-key-0123456789-abcdefghij"


def start(db: Database, tmp_path: Path, **overrides: Any) -> Server:
    return Server(serve_settings(db.url, tmp_path / "spool", serve_models=["__none__"], **overrides))


def db_key(db: Database) -> bytes:
    with db.session() as s:
        return stored_link_key(session=s).encode()


def link(key: bytes, path: str = REPORT, *, expires_in: float = 3600, expires: int | None = None) -> str:
    at = int(time.time() + expires_in) if expires is None else expires
    return signed_path(key=key, path=path, expires=at)


def opened(r: httpx.Response) -> bool:
    """Through the check: the route's own answer (no model is registered here)."""
    return r.status_code == 404 and "unknown model 'credit'" in r.json()["error"]


def refused(r: httpx.Response, *words: str) -> None:
    assert r.status_code == 401, (r.request.url, r.status_code, r.text)
    assert r.headers["content-type"].startswith("application/json")
    assert r.headers["www-authenticate"].startswith("Bearer")
    for w in words:
        assert w in r.json()["error"], (w, r.json())


def with_query(url: str, **changes: str) -> str:
    parts = urlsplit(url)
    query = {k: v[0] for k, v in parse_qs(parts.query).items()} | changes
    return parts.path + "?" + "&".join(f"{k}={v}" for k, v in query.items())


def test_a_signed_link_opens_its_report_without_a_header(db: Database, tmp_path: Path) -> None:
    key = db_key(db)
    with start(db, tmp_path) as server, server.client() as c:
        good = link(key)
        assert opened(c.get(good, headers=NO_AUTH))
        # without a link (or with a bare path) the page still needs a token, and the 401 says how to open it
        refused(c.get(REPORT, headers=NO_AUTH), "Authorization: Bearer", "signed link")


def test_each_tampering_answers_401_naming_why(db: Database, tmp_path: Path) -> None:
    key = db_key(db)
    good = link(key)
    expires = parse_qs(urlsplit(good).query)["expires"][0]
    signature = parse_qs(urlsplit(good).query)["signature"][0]
    flipped = ("A" if signature[0] != "A" else "B") + signature[1:]
    cases = {
        "another model": (good.replace("/reports/credit/", "/reports/other/"), "invalid signature"),
        "a changed expiry": (with_query(good, expires=str(int(expires) + 1)), "invalid signature"),
        "a changed signature": (with_query(good, signature=flipped), "invalid signature"),
        "a path signed for another resource": (
            with_query(
                REPORT,
                expires=expires,
                signature=link_signature(key=key, path="/v1/models/credit/drift", expires=int(expires)),
            ),
            "invalid signature",
        ),
        "another server's key": (link(OTHER_KEY), "invalid signature"),
        "an expired link": (link(key, expires_in=-5), "expired at"),
        "a short signature": (with_query(good, signature="abc"), "malformed signature"),
        "a signature with other characters": (
            with_query(good, signature="!" * 43),
            "malformed signature",
        ),
        "padding": (with_query(good, signature=signature + "%3D"), "malformed signature"),
        "no signature": (f"{REPORT}?expires={expires}", "'signature' is missing"),
        "no expiry": (f"{REPORT}?signature={signature}", "'expires' is missing"),
        "a huge expiry": (with_query(good, expires="9" * 400), "invalid signature"),
        "a negative expiry": (with_query(good, expires="-1"), "invalid signature"),
    }
    with start(db, tmp_path) as server, server.client() as c:
        for case, (url, why) in cases.items():
            r = c.get(url, headers=NO_AUTH)
            assert r.status_code == 401, (case, r.status_code, r.text)
            refused(r, "signed link refused", why, "(rule: signed_link)")
            assert key.decode() not in r.text
        # an expiry that is not a number is a malformed parameter: 400, as on every route, never a 500
        r = c.get(with_query(good, expires="tomorrow"), headers=NO_AUTH)
        assert r.status_code == 400 and "expires" in r.json()["error"], r.text
        # the link opens that page only: the JSON drift route (scope read) still needs a token
        query = urlsplit(good).query
        refused(c.get(f"/v1/models/credit/drift?{query}", headers=NO_AUTH), "Authorization: Bearer")
        assert opened(c.get(good, headers=NO_AUTH))  # and the untouched link still works


def test_a_bearer_token_still_decides_alone(db: Database, tmp_path: Path) -> None:
    key = db_key(db)
    with db.session() as s:
        read = create_token(session=s, name="r", scopes=["read"], expires_in=None).secret
        feedback = create_token(session=s, name="f", scopes=["feedback"], expires_in=None).secret
    with start(db, tmp_path) as server, server.client() as c:
        assert opened(c.get(REPORT, headers=auth(read)))
        assert opened(
            c.get(with_query(link(OTHER_KEY)), headers=auth(read))
        )  # a bad link beside a good token
        r = c.get(link(key), headers=auth(feedback))  # a token without the scope is not saved by a link
        assert r.status_code == 403 and "needs scope 'read'" in r.json()["error"], r.text
        refused(c.get(link(key), headers=auth("dw_abc_garbage")), "unknown, revoked or expired")


def test_rotation_invalidates_links_within_the_cache_period(db: Database, tmp_path: Path) -> None:
    before = link(db_key(db))
    with start(db, tmp_path, token_cache_s=0.5) as server, server.client() as c:
        assert opened(c.get(before, headers=NO_AUTH))
        with db.session() as s:
            rotate_link_key(session=s)
        deadline = time.monotonic() + 10
        while c.get(before, headers=NO_AUTH).status_code != 401:
            assert time.monotonic() < deadline, "a link signed before the rotation still opens after 10 s"
            time.sleep(0.1)
        refused(c.get(before, headers=NO_AUTH), "invalid signature")
        assert opened(c.get(link(db_key(db)), headers=NO_AUTH))  # links made after it work


def test_a_configured_key_signs_and_the_database_key_does_not(db: Database, tmp_path: Path) -> None:
    with start(db, tmp_path, link_signing_key=CONFIGURED_KEY) as server, server.client() as c:
        assert opened(c.get(link(CONFIGURED_KEY.encode()), headers=NO_AUTH))
        refused(c.get(link(db_key(db)), headers=NO_AUTH), "invalid signature")
        assert server.app.state.link_keys.reads == 0  # a configured key needs no database read
        with db.session() as s:  # what the CLI and the webhooks sign with, in a process with that setting
            settings = Settings(database_url=SecretStr(db.url), link_signing_key=SecretStr(CONFIGURED_KEY))
            assert link_key(session=s, settings=settings) == CONFIGURED_KEY.encode()


def test_two_servers_on_one_database_accept_each_others_links(db: Database, tmp_path: Path) -> None:
    with db.session() as s:  # as if the migration's key were gone: the first process to need one makes it
        s.execute(delete(LinkKey))
    one, two = start(db, tmp_path / "one"), start(db, tmp_path / "two")
    with one, two, one.client() as a, two.client() as b:
        answers: list[int] = []

        def probe(client: httpx.Client) -> None:  # both servers read (and make) the key at once
            answers.append(client.get(link(OTHER_KEY), headers=NO_AUTH).status_code)

        threads = [threading.Thread(target=probe, args=(cl,)) for cl in (a, b, a, b)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert answers == [401] * 4
        with db.session() as s:
            assert len(s.query(LinkKey).all()) == 1
        with db.session() as s:  # a link made by the CLI's function, from the database
            url, _ = sign_path(session=s, settings=one.settings, path=REPORT, ttl=timedelta(hours=1))
        assert opened(a.get(url, headers=NO_AUTH)) and opened(b.get(url, headers=NO_AUTH))


def test_the_report_link_of_a_webhook_message_opens_the_report(db: Database, tmp_path: Path) -> None:
    with start(db, tmp_path) as server:
        settings = server.settings.model_copy(update={"public_url": server.url})
        with db.session() as s:
            key = link_key(session=s, settings=settings)
        now = datetime.now(UTC)
        got = links(settings=settings, model_name="credit", link_key=key, at=now)
        report = got["report"]
        assert report.startswith(f"{server.url}{REPORT}?expires=")
        expires = int(parse_qs(urlsplit(report).query)["expires"][0])
        assert expires == int((now + timedelta(days=7)).timestamp())  # report_link_ttl_s: 7 days
        assert opened(httpx.get(report, timeout=30))  # a browser: no header at all
        assert "signature" not in got["drift"]  # the JSON link stays a plain API link for programs
        refused(httpx.get(got["drift"], timeout=30), "Authorization: Bearer")
        old = links(settings=settings, model_name="credit", link_key=key, at=now - timedelta(days=8))
        refused(httpx.get(old["report"], timeout=30), "expired at")


def test_the_link_key_never_reaches_answers_or_logs(
    db: Database, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    key = db_key(db)
    seen: list[str] = []
    with start(db, tmp_path, token_cache_s=0) as server, server.client() as c:
        for url in (
            link(key),
            link(OTHER_KEY),
            link(key, expires_in=-1),
            with_query(link(key), signature="x"),
        ):
            seen.append(c.get(url, headers=NO_AUTH).text)
        for path in ("/status", "/metrics", "/readyz", "/openapi.json"):
            seen.append(c.get(path).text)
    with start(db, tmp_path, link_signing_key=CONFIGURED_KEY) as server, server.client() as c:
        seen.append(c.get(link(b"x" * 32), headers=NO_AUTH).text)
        seen.append(c.get("/status").text)
    everything = "\n".join([*seen, caplog.text])
    for secret in (key.decode(), CONFIGURED_KEY):
        assert secret not in everything and secret[:16] not in everything


def test_the_link_key_s_database_gone_is_503_never_500(db: Database, tmp_path: Path) -> None:
    url = "postgresql+psycopg://postgres@127.0.0.1:1/none"  # nothing listens on port 1
    gone = Database(url=url, engine=make_engine(url), factory=sessionmaker(make_engine(url)))
    with start(db, tmp_path) as server, server.client() as c:
        server.app.state.link_keys = CachedLinkKey(db=gone, settings=server.settings, ttl_s=0)
        r = c.get(link(db_key(db)), headers=NO_AUTH)
    assert r.status_code == 503 and "database is unavailable" in r.json()["error"], r.text
    gone.dispose()


def test_two_serve_processes_accept_a_link_the_cli_made(db: Database, tmp_path: Path) -> None:
    """Real processes: two `driftwarden serve` on one database (key made by whichever needs it first) and
    a link printed by `driftwarden reports link`; each server opens it, and refuses it once rotated."""
    with db.session() as s:
        s.execute(delete(LinkKey))
        register_version(
            session=s, model_name="credit", version=1, path=tmp_path / "v1", metrics={}, lineage={}
        )
    env = {k: v for k, v in os.environ.items() if not k.startswith("DRIFTWARDEN_")}
    env |= {
        "DRIFTWARDEN_DATABASE_URL": db.url,
        "DRIFTWARDEN_REGISTRY_PATH": str(tmp_path / "models"),
        "DRIFTWARDEN_SERVE_MODELS": '["__none__"]',
        "DRIFTWARDEN_MONITOR_ENABLED": "false",
        "DRIFTWARDEN_TOKEN_CACHE_S": "0.2",
    }
    ports = [free_port(), free_port()]
    with ExitStack() as stack:
        for i, port in enumerate(ports):
            log = stack.enter_context((tmp_path / f"serve-{i}.log").open("wb"))
            proc = subprocess.Popen(
                [CLI, "serve", "--workers", "1", "--host", "127.0.0.1", "--port", str(port)],
                env=env | {"DRIFTWARDEN_SPOOL_PATH": str(tmp_path / f"spool-{i}")},
                cwd=ROOT,
                stdout=log,
                stderr=subprocess.STDOUT,
            )
            stack.callback(stop, proc)
        bases = [f"http://127.0.0.1:{port}" for port in ports]
        deadline = time.monotonic() + 120
        for i, base in enumerate(bases):
            wait_http_ready(f"{base}/healthz", log=tmp_path / f"serve-{i}.log", deadline=deadline)
        made = subprocess.run(
            [CLI, "reports", "link", "credit", "--ttl", "1h"],
            env=env | {"DRIFTWARDEN_PUBLIC_URL": bases[0]},
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert made.returncode == 0, made.stderr
        path = urlsplit(made.stdout.strip())
        assert path.geturl().startswith(bases[0])
        for base in bases:  # the link printed for one server's address opens on the other as well
            r = httpx.get(f"{base}{path.path}?{path.query}", timeout=30)
            assert r.status_code == 404 and "'credit' has no monitor run yet" in r.json()["error"], r.text
        rotated = subprocess.run(
            [CLI, "tokens", "rotate-link-key"], env=env, capture_output=True, timeout=120
        )
        assert rotated.returncode == 0, rotated.stderr
        for base in bases:
            deadline = time.monotonic() + 10
            while (r := httpx.get(f"{base}{path.path}?{path.query}", timeout=30)).status_code != 401:
                assert time.monotonic() < deadline, (base, r.status_code, r.text)
                time.sleep(0.1)
            refused(r, "invalid signature")


def stop(proc: subprocess.Popen[bytes]) -> None:
    proc.terminate()
    try:
        proc.wait(30)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(10)
