"""Outgoing webhook URLs: http(s) only; non-public addresses refused when subscribed (literal or resolved)
and where each delivery connects (resolved once, checked, connected to), unless allowed; credentials never
shown."""

from __future__ import annotations

import io
import ipaddress
import logging
import socket
from collections.abc import Sequence
from pathlib import Path

import pytest

from alerts.sender import send_due
from alerts.urls import AddressRule, RefusedURL, addresses_of, check_url
from alerts.webhooks import new_secret
from core.database import Database, utcnow
from core.logs import mask_secrets
from tests.alerts.receiver import Receiver
from tests.alerts.webhookdata import deliveries, queue_messages, settings_for, subscribe
from tests.support import Server, auth, serve_settings


def _loopback_name() -> str:
    """This machine's name, which the system resolves (``/etc/hosts``) to a loopback or private address."""
    name = socket.gethostname()
    if not any(AddressRule().refuses(a) for a in {str(i[4][0]) for i in socket.getaddrinfo(name, 80)}):
        pytest.skip(f"{name!r} resolves to public addresses only here")  # pragma: no cover
    return name


REFUSE = AddressRule()  # the default: public addresses only
ALLOW = AddressRule(allow_private=True)

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
    # IPv6 forms that carry a refused IPv4 address (Python's ipaddress calls the first five global)
    "http://[64:ff9b::7f00:1]/",  # NAT64 (RFC 6052) of 127.0.0.1
    "http://[64:ff9b::a9fe:a9fe]/",  # NAT64 of the metadata service 169.254.169.254
    "http://[2002:7f00:1::]/",  # 6to4 of 127.0.0.1
    "http://[2002:a00:1::1]/",  # 6to4 of 10.0.0.1
    "http://[::7f00:1]/",  # IPv4-compatible 127.0.0.1
    "http://[::ffff:0:7f00:1]/",  # IPv4-translated 127.0.0.1
    "http://[::ffff:a9fe:a9fe]/",  # IPv4-mapped 169.254.169.254
    "http://[2001:0:4136:e378:8000:63bf:80ff:fffe]/",  # Teredo: client 127.0.0.1
    "http://[64:ff9b:1::5db8:d70e]/",  # the local-use NAT64 prefix (RFC 8215), whatever it embeds
]


@pytest.mark.parametrize("url", PRIVATE)
def test_non_public_addresses_are_refused_unless_allowed(url: str) -> None:
    with pytest.raises(RefusedURL, match="rule: webhook_allow_private_urls"):
        check_url(url, rule=REFUSE, resolver=None)
    check_url(url, rule=ALLOW, resolver=None)


@pytest.mark.parametrize("url", ["ftp://example.com/x", "file:///etc/passwd", "http://", "gopher://h/x"])
def test_only_http_and_https(url: str) -> None:
    for rule in (REFUSE, ALLOW):
        with pytest.raises(RefusedURL, match="not an http"):
            check_url(url, rule=rule, resolver=None)


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
    for rule in (REFUSE, ALLOW):
        with pytest.raises(RefusedURL, match="does not name a valid host"):
            check_url(url, rule=rule, resolver=None)


def test_public_addresses_and_names_pass_without_a_lookup() -> None:
    for url in (
        "https://93.184.215.14/hook",
        "http://[2606:4700::1111]/x",
        "https://hooks.example.com/x",
        "https://bücher.example/x",  # an international name (IDNA)
        "https://add.bad/x",  # hex letters only: a name, not an address
        "https://my_host.internal.example/x",
        "http://[64:ff9b::5db8:d70e]/",  # NAT64 of the public 93.184.215.14
        "http://[2002:5db8:d70e::1]/",  # 6to4 of it
    ):
        check_url(url, rule=REFUSE, resolver=None)


class Table:
    """A resolver of names to addresses (the seam the subscription check and the sender take; no DNS server
    here), counting its lookups; a name with several answers gives them in turn (DNS rebinding)."""

    def __init__(self, **names: str | list[str]) -> None:
        self.names = {k.replace("_", "."): v if isinstance(v, list) else [v] for k, v in names.items()}
        self.lookups: list[str] = []

    def __call__(self, host: str, port: int) -> Sequence[str]:
        self.lookups.append(host)
        answers = self.names.get(host)
        if not answers:
            raise socket.gaierror(socket.EAI_NONAME, "Name or service not known")
        return [answers[min(self.lookups.count(host), len(answers)) - 1]]


def test_a_name_is_refused_when_any_address_it_resolves_to_is() -> None:
    table = Table(
        internal_example="10.0.0.5", public_example="93.184.215.14", nat64_example="64:ff9b::7f00:1"
    )
    for name, address in (("internal.example", "10.0.0.5"), ("nat64.example", "64:ff9b::7f00:1")):
        with pytest.raises(RefusedURL, match=rf"'{name}' resolves to a loopback, private.*\({address}\)"):
            check_url(f"http://{name}/hook", rule=REFUSE, resolver=table)  # subscribing
        with pytest.raises(RefusedURL, match=rf"\({address}\)"):
            addresses_of(name, 80, rule=REFUSE, resolver=table)  # connecting
    check_url(
        "http://internal.example/hook", rule=AddressRule(allowed=(ip_net("10.0.0.0/8"),)), resolver=table
    )
    check_url("https://public.example/hook", rule=REFUSE, resolver=table)
    check_url(
        "http://nowhere.example/hook", rule=REFUSE, resolver=table
    )  # not resolvable yet: checked at send
    with pytest.raises(RefusedURL, match="cannot resolve 'nowhere.example'"):
        addresses_of("nowhere.example", 80, rule=REFUSE, resolver=table)
    before = len(table.lookups)
    with pytest.raises(RefusedURL, match="127.0.0.1"):
        check_url("http://localhost./hook", rule=REFUSE, resolver=table)  # never looked up
    assert len(table.lookups) == before


def ip_net(cidr: str) -> ipaddress.IPv4Network | ipaddress.IPv6Network:
    return ipaddress.ip_network(cidr)


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
    loopback = _loopback_name()
    settings = serve_settings(
        db.url, tmp_path / "spool", serve_models=["__none__"], webhook_allow_private_urls=False
    )
    with Server(settings) as server, server.client() as c:
        for url in (
            "http://127.0.0.1:9/hook",
            "http://169.254.169.254/",
            "http://[::1]/x",
            "http://2130706433/",
            "http://[64:ff9b::7f00:1]/",
            "http://[2002:7f00:1::]/",
            "http://[::ffff:7f00:1]/",
            f"http://{loopback}:8080/hook",  # a name the system resolves to a non-public address
        ):
            r = c.post("/v1/webhooks", json={"url": url}, headers=auth())
            assert r.status_code == 400 and "rule: webhook_allow_private_urls" in r.json()["error"], r.text
        r = c.post("/v1/webhooks", json={"url": f"http://{loopback}/"}, headers=auth())
        assert f"{loopback!r} resolves to" in r.json()["error"], r.text
        for url in ("http://exa mple.com/", "http://[::zz]/x", "http://" + "a" * 300 + ".com/"):
            r = c.post("/v1/webhooks", json={"url": url}, headers=auth())
            assert r.status_code == 400 and r.json()["error"].startswith("url: "), r.text
        r = c.post(
            "/v1/webhooks", json={"url": "https://ann:s3cret@hooks.example.com/x?token=t0k"}, headers=auth()
        )
        assert r.status_code == 201 and r.json()["url"] == "https://ann:***@hooks.example.com/x?token=***", (
            r.text
        )
        [shown] = c.get("/v1/webhooks", headers=auth()).json()["webhooks"]
        assert shown["url"] == "https://ann:***@hooks.example.com/x?token=***"
        assert c.get(f"/v1/webhooks/{shown['id']}", headers=auth()).json()["url"] == shown["url"]
        assert "s3cret" not in c.get("/v1/webhooks", headers=auth()).text


def test_the_cli_refuses_to_subscribe_a_private_url(monkeypatch: pytest.MonkeyPatch) -> None:
    from typer.testing import CliRunner

    from service.cli import app

    loopback = _loopback_name()
    monkeypatch.setenv("DRIFTWARDEN_WEBHOOK_ALLOW_PRIVATE_URLS", "false")
    result = CliRunner().invoke(app, ["webhooks", "add", "http://10.0.0.8/hook"])
    assert result.exit_code == 2 and "rule: webhook_allow_private_urls" in result.stderr
    for url in ("http://[64:ff9b::a00:8]/hook", f"http://{loopback}/hook"):
        result = CliRunner().invoke(app, ["webhooks", "add", url])
        assert result.exit_code == 2 and "rule: webhook_allow_private_urls" in result.stderr, result.stderr
    assert CliRunner().invoke(app, ["webhooks", "list"]).stdout.count("10.0.0.8") == 0
    monkeypatch.setenv("DRIFTWARDEN_WEBHOOK_ALLOW_PRIVATE_URLS", "true")
    from core.config import get_settings

    get_settings.cache_clear()
    result = CliRunner().invoke(app, ["webhooks", "add", "http://10.0.0.8/hook"])
    assert result.exit_code == 0 and "10.0.0.8" in result.stdout
    result = CliRunner().invoke(app, ["webhooks", "add", "http://user:pass@10.0.0.9/hook"])
    assert result.exit_code == 0 and "-> http://user:***@10.0.0.9/hook" in result.stdout, result.stdout
    listed = CliRunner().invoke(app, ["webhooks", "list"]).stdout
    assert "http://user:***@10.0.0.9/hook" in listed and "pass@" not in listed
    as_json = CliRunner().invoke(app, ["webhooks", "list", "--json"]).stdout
    assert "http://user:***@10.0.0.9/hook" in as_json and "pass@" not in as_json


# --- where each delivery connects ---------------------------------------------------------------------------


def test_a_delivery_refuses_a_name_that_resolves_into_a_refused_range_at_send_time(db: Database) -> None:
    """Subscribed through the service (as with the allowance on, or a name that resolved elsewhere then): the
    sender resolves the name when it connects and refuses it; an allowed network lets it through to the
    checked address, the name kept in the Host header."""
    secret = new_secret()
    table = Table(hooks_test="127.0.0.1")
    with Receiver(secret) as receiver:
        url = f"http://admin:pw@hooks.test:{receiver.port}/hook"
        (msg,) = queue_messages(db, subscribe(db, url, secret), 1, utcnow())
        send_due(db=db, settings=settings_for(db, webhook_allow_private_urls=False), resolver=table)
        assert receiver.requests == [] and table.lookups == ["hooks.test"]
        d = deliveries(db)[msg]
        assert d.state == "pending" and d.last_status_code is None
        assert "'hooks.test' resolves to a loopback" in (d.last_error or "") and "(127.0.0.1)" in d.last_error
        assert "pw" not in d.last_error
        allowed = settings_for(
            db, webhook_allow_private_urls=False, webhook_allowed_networks=["127.0.0.1/32"]
        )
        send_due(db=db, settings=allowed, resolver=table, now=d.next_attempt_at)
        [request] = receiver.accepted
        assert deliveries(db)[msg].state == "delivered"
        assert request.headers["host"] == f"hooks.test:{receiver.port}"


def test_a_delivery_connects_to_the_address_it_checked(db: Database) -> None:
    """DNS rebinding: the name answers an allowed address, then a refused one. The sender looks it up once
    per connection and connects to the address it checked, never to a second answer."""
    secret = new_secret()
    table = Table(rebind_test=["127.0.0.2", "127.0.0.1"])
    allowed, refused = Receiver(secret, host="127.0.0.2"), Receiver(secret, host="127.0.0.1")
    refused.port = allowed.port
    with allowed, refused:
        (msg,) = queue_messages(
            db, subscribe(db, f"http://rebind.test:{allowed.port}/hook", secret), 1, utcnow()
        )
        settings = settings_for(
            db, webhook_allow_private_urls=False, webhook_allowed_networks=["127.0.0.2/32"]
        )
        send_due(db=db, settings=settings, resolver=table)
        assert len(allowed.accepted) == 1 and refused.requests == []
        assert table.lookups == ["rebind.test"] and deliveries(db)[msg].state == "delivered"


def test_a_redirect_to_a_refused_address_is_not_followed(db: Database) -> None:
    """The allowed receiver answers 307 to a receiver on a refused address: no request reaches it (the sender
    follows no redirect at all); the attempt fails naming the location."""
    secret = new_secret()
    target = Receiver(secret, host="127.0.0.1")
    with target, Receiver(secret, mode="redirect", host="127.0.0.2", location=target.url) as receiver:
        (msg,) = queue_messages(db, subscribe(db, receiver.url, secret), 1, utcnow())
        settings = settings_for(
            db, webhook_allow_private_urls=False, webhook_allowed_networks=["127.0.0.2/32"]
        )
        send_due(db=db, settings=settings)
        assert len(receiver.requests) == 1 and target.requests == []
    d = deliveries(db)[msg]
    assert d.state == "pending" and d.last_status_code == 307
    assert f"redirect to {target.url}: not followed" in (d.last_error or "")


def test_a_password_in_a_webhook_url_stays_out_of_the_log(db: Database) -> None:
    """httpx logs each request's URL (INFO); the log set-up's filter masks its password and token."""
    secret, out = new_secret(), io.StringIO()
    handler = mask_secrets(logging.StreamHandler(out))
    httpx_log = logging.getLogger("httpx")
    level = httpx_log.level
    httpx_log.addHandler(handler)
    httpx_log.setLevel(logging.INFO)
    try:
        with Receiver(secret) as receiver:
            url = f"http://hook:pw-s3cret@127.0.0.1:{receiver.port}/hook?token=t0k-s3cret"
            queue_messages(db, subscribe(db, url, secret), 1, utcnow())
            send_due(db=db, settings=settings_for(db, webhook_allow_private_urls=True))
            assert len(receiver.accepted) == 1
    finally:
        httpx_log.removeHandler(handler)
        httpx_log.setLevel(level)
    assert f"POST http://hook:***@127.0.0.1:{receiver.port}/hook?token=***" in out.getvalue(), out.getvalue()
    assert "s3cret" not in out.getvalue()
