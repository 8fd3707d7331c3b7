"""Outgoing webhook URLs: http(s) only; non-public addresses refused (subscribe and send) unless allowed."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

from alerts.sender import send_due
from alerts.urls import RefusedURL, check_url
from alerts.webhooks import new_secret
from core.database import Database, utcnow
from tests.alerts.receiver import Receiver
from tests.alerts.test_webhooks import deliveries, queue_messages, settings_for, subscribe
from tests.support import Server, auth, serve_settings

PRIVATE = [
    "http://127.0.0.1:8080/hook",
    "http://localhost/hook",
    "http://api.localhost/hook",
    "http://10.1.2.3/hook",
    "http://172.16.0.1/hook",
    "http://192.168.1.10/hook",
    "http://169.254.169.254/latest/meta-data",  # cloud metadata service
    "http://100.64.0.1/hook",  # carrier-grade NAT
    "http://0.0.0.0/hook",
    "http://[::1]/hook",
    "http://[fe80::1]/hook",
    "http://[fd00::1]/hook",
    "http://[::ffff:127.0.0.1]/hook",
    "http://224.0.0.1/hook",
    # the legacy forms of 127.0.0.1 and 0.0.0.0 that inet_aton (and so every HTTP client) also reads
    "http://0/",
    "http://2130706433/",
    "http://0x7f000001/",
    "http://017700000001/",
    "http://127.1/",
    "http://0x7f.1/",
]


@pytest.mark.parametrize("url", PRIVATE)
def test_non_public_addresses_are_refused_unless_allowed(url: str) -> None:
    with pytest.raises(RefusedURL, match="rule: webhook_allow_private_urls"):
        check_url(url, allow_private=False, resolve=False)
    check_url(url, allow_private=True, resolve=False)


@pytest.mark.parametrize("url", ["ftp://example.com/x", "file:///etc/passwd", "http://", "gopher://h/x"])
def test_only_http_and_https(url: str) -> None:
    for allow in (False, True):
        with pytest.raises(RefusedURL, match="not an http"):
            check_url(url, allow_private=allow, resolve=False)


@pytest.mark.parametrize(
    "url",
    [
        "http://exa mple.com/x",
        "http://example.com%00.evil/x",
        "http://" + "a" * 300 + ".com/x",
        "http://-bad.example/x",
        "http://a..b/x",
        "http://[::zz]/x",
        "http://" + ".".join(["abcdefgh"] * 30) + "/x",  # 269 characters
    ],
)
def test_hosts_no_client_could_reach_are_refused_whatever_the_setting(url: str) -> None:
    for allow in (False, True):
        with pytest.raises(RefusedURL, match="does not name a valid host"):
            check_url(url, allow_private=allow, resolve=False)


def test_public_addresses_and_names_pass_without_a_lookup() -> None:
    for url in (
        "https://93.184.215.14/hook",
        "http://[2606:4700::1111]/x",
        "https://hooks.example.com/x",
        "https://bücher.example/x",  # an international name (IDNA)
        "https://add.bad/x",  # hex letters only: a name, not an address
        "https://my_host.internal.example/x",
    ):
        check_url(url, allow_private=False, resolve=False)


def test_a_name_is_resolved_before_sending(monkeypatch: pytest.MonkeyPatch) -> None:
    """No DNS server here: the lookup is replaced by a table (the one fake in these tests)."""
    table = {"internal.example": "10.0.0.5", "public.example": "93.184.215.14"}

    def lookup(host: str, port: int, *args: object, **kwargs: object) -> list[tuple[object, ...]]:
        if host not in table:
            raise socket.gaierror(-2, "Name or service not known")
        return [(socket.AF_INET, socket.SOCK_STREAM, 6, "", (table[host], port))]

    monkeypatch.setattr(socket, "getaddrinfo", lookup)
    with pytest.raises(RefusedURL, match=r"'internal.example' is a loopback, private.*\(10\.0\.0\.5\)"):
        check_url("http://internal.example/hook", allow_private=False, resolve=True)
    check_url("http://internal.example/hook", allow_private=False, resolve=False)  # subscribing: no lookup
    check_url("https://public.example/hook", allow_private=False, resolve=True)
    with pytest.raises(RefusedURL, match="cannot resolve 'nowhere.example'"):
        check_url("http://nowhere.example/hook", allow_private=False, resolve=True)
    with pytest.raises(RefusedURL, match="127.0.0.1"):
        check_url("http://localhost./hook", allow_private=False, resolve=True)  # never looked up


def test_the_sender_refuses_a_private_receiver_and_sends_nothing(db: Database) -> None:
    secret = new_secret()
    with Receiver(secret) as receiver:
        (msg,) = queue_messages(db, subscribe(db, receiver.url, secret), 1, utcnow())
        send_due(db=db, settings=settings_for(db, webhook_allow_private_urls=False))
        assert receiver.requests == []
        d = deliveries(db)[msg]
        assert d.state == "pending" and d.last_status_code is None
        assert "rule: webhook_allow_private_urls" in (d.last_error or "")
        d_next = d.next_attempt_at
        send_due(db=db, settings=settings_for(db, webhook_allow_private_urls=True), now=d_next)
        assert len(receiver.accepted) == 1 and deliveries(db)[msg].state == "delivered"


def test_the_api_refuses_to_subscribe_a_private_url(db: Database, tmp_path: Path) -> None:
    settings = serve_settings(
        db.url, tmp_path / "spool", serve_models=["__none__"], webhook_allow_private_urls=False
    )
    with Server(settings) as server, server.client() as c:
        for url in (
            "http://127.0.0.1:9/hook",
            "http://169.254.169.254/",
            "http://[::1]/x",
            "http://2130706433/",
        ):
            r = c.post("/v1/webhooks", json={"url": url}, headers=auth())
            assert r.status_code == 400 and "rule: webhook_allow_private_urls" in r.json()["error"], r.text
        for url in ("http://exa mple.com/", "http://[::zz]/x", "http://" + "a" * 300 + ".com/"):
            r = c.post("/v1/webhooks", json={"url": url}, headers=auth())
            assert r.status_code == 400 and r.json()["error"].startswith("url: "), r.text
        r = c.post("/v1/webhooks", json={"url": "https://hooks.example.com/x"}, headers=auth())
        assert r.status_code == 201, r.text
        assert len(c.get("/v1/webhooks").json()["webhooks"]) == 1


def test_the_cli_refuses_to_subscribe_a_private_url(monkeypatch: pytest.MonkeyPatch) -> None:
    from typer.testing import CliRunner

    from service.cli import app

    monkeypatch.setenv("DRIFTWARDEN_WEBHOOK_ALLOW_PRIVATE_URLS", "false")
    result = CliRunner().invoke(app, ["webhooks", "add", "http://10.0.0.8/hook"])
    assert result.exit_code == 2 and "rule: webhook_allow_private_urls" in result.stderr
    assert CliRunner().invoke(app, ["webhooks", "list"]).stdout.count("10.0.0.8") == 0
    monkeypatch.setenv("DRIFTWARDEN_WEBHOOK_ALLOW_PRIVATE_URLS", "true")
    from core.config import get_settings

    get_settings.cache_clear()
    result = CliRunner().invoke(app, ["webhooks", "add", "http://10.0.0.8/hook"])
    assert result.exit_code == 0 and "10.0.0.8" in result.stdout
