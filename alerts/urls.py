"""Where outgoing webhooks may go: http(s) only, and no loopback, private, link-local or other non-public
address unless ``webhook_allow_private_urls`` is on or the address is in ``webhook_allowed_networks``
(server-side request forgery: a subscriber must not make the API post to the metadata service or to an
internal admin port).

An address is refused when it is not global (Python's ``ipaddress`` registry of special ranges) or multicast,
and an IPv6 address also when it carries a refused IPv4 address inside: IPv4-mapped ``::ffff:0:0/96``,
IPv4-translated ``::ffff:0:0:0/96``, IPv4-compatible ``::/96``, NAT64 ``64:ff9b::/96``, 6to4 ``2002::/16``
and Teredo ``2001::/32`` (its server and its client); the local-use NAT64 prefix ``64:ff9b:1::/48`` is
refused whole. ``ipaddress`` calls ``64:ff9b::7f00:1`` (127.0.0.1 through a NAT64 gateway) and
``2002:7f00:1::`` (6to4 of 127.0.0.1) global: the embedded address is what the packets reach.

A subscription's URL is checked when it is made: a literal address, and every address its host name
resolves to then (a name that does not resolve yet is accepted). Names may resolve elsewhere later, so every
delivery checks again where it connects: :class:`CheckedBackend` resolves the host once, refuses the
connection if any of its addresses is refused, and connects to the checked addresses themselves (no second
lookup that DNS rebinding could answer differently); the request keeps the name in its Host header and TLS
server name. The sender follows no redirect at all (:mod:`alerts.sender`).
"""

from __future__ import annotations

import ipaddress
import re
import socket
import time
import typing
import urllib.parse
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import httpcore
import httpx

from core.config import Settings, mask_url
from core.errors import Invalid

RULE = "webhook_allow_private_urls"

Resolver = Callable[[str, int], Sequence[str]]
"""A host name and port -> the addresses to connect to, in order (raises ``OSError`` when it has none)."""

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
IPNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network
NAT64 = ipaddress.IPv6Network(
    "64:ff9b::/96"
)  # RFC 6052 well-known prefix: the IPv4 address in the last 32 bits
NAT64_LOCAL = ipaddress.IPv6Network("64:ff9b:1::/48")  # RFC 8215 local-use prefixes: refused whole
IPV4_COMPATIBLE = ipaddress.IPv6Network("::/96")  # deprecated (RFC 4291), still routed by some stacks
IPV4_TRANSLATED = ipaddress.IPv6Network("::ffff:0:0:0/96")  # RFC 2765 SIIT


class RefusedURL(Invalid):
    """A webhook URL this server will not post to; the message names the address and the setting."""


def system_resolver(host: str, port: int) -> list[str]:
    """The addresses of ``host`` as the system resolves them (``/etc/hosts``, DNS), in its order."""
    infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    return list(dict.fromkeys(str(info[4][0]) for info in infos))


def embedded_ipv4(ip: ipaddress.IPv6Address) -> list[ipaddress.IPv4Address]:
    """The IPv4 addresses an IPv6 address carries (mapped, translated, compatible, NAT64, 6to4, Teredo)."""
    out: list[ipaddress.IPv4Address] = []
    if ip.ipv4_mapped is not None:
        out.append(ip.ipv4_mapped)
    if ip.sixtofour is not None:
        out.append(ip.sixtofour)
    if ip.teredo is not None:
        out.extend(ip.teredo)
    if ip in NAT64 or ip in IPV4_TRANSLATED or ip in IPV4_COMPATIBLE:
        out.append(ipaddress.IPv4Address(int(ip) & 0xFFFFFFFF))
    return out


def _refused_as_such(ip: IPAddress) -> bool:
    return (
        not ip.is_global or ip.is_multicast or (isinstance(ip, ipaddress.IPv6Address) and ip in NAT64_LOCAL)
    )


@dataclass(frozen=True)
class AddressRule:
    """Which addresses webhooks may reach: public ones, those of ``allowed`` networks, or (``allow_private``)
    any."""

    allow_private: bool = False
    allowed: tuple[IPNetwork, ...] = ()

    @classmethod
    def of(cls, settings: Settings) -> AddressRule:
        """The rule the settings set (``webhook_allow_private_urls``, ``webhook_allowed_networks``)."""
        return cls(
            allow_private=settings.webhook_allow_private_urls,
            allowed=tuple(ipaddress.ip_network(n) for n in settings.webhook_allowed_networks),
        )

    def refuses(self, address: str) -> bool:
        """Whether a connection to ``address`` is refused."""
        if self.allow_private:
            return False
        ip = ipaddress.ip_address(address.split("%", 1)[0])  # an IPv6 zone id ("fe80::1%eth0") is not part
        if any(ip in network for network in self.allowed):
            return False
        inner = embedded_ipv4(ip) if isinstance(ip, ipaddress.IPv6Address) else []
        return _refused_as_such(ip) or any(_refused_as_such(v4) for v4 in inner)

    def check(self, host: str, addresses: Sequence[str]) -> None:
        """RefusedURL naming the first refused address of ``host``."""
        for address in addresses:
            if self.refuses(address):
                named = f"{host!r} is" if address == host else f"{host!r} resolves to"
                raise RefusedURL(
                    f"url: {named} a loopback, private, link-local or otherwise non-public address "
                    f"({address}); webhooks go to public addresses only unless "
                    "DRIFTWARDEN_WEBHOOK_ALLOW_PRIVATE_URLS=true or the address is in "
                    f"DRIFTWARDEN_WEBHOOK_ALLOWED_NETWORKS (rule: {RULE})"
                )


HOST_LABEL = re.compile(r"(?!-)[a-z0-9_-]{1,63}(?<!-)")
LEGACY_IPV4 = re.compile(r"[0-9a-fx.]+")  # what inet_aton also reads: 127.1, 2130706433, 0x7f000001, 0177...


def _literal_addresses(host: str) -> list[str]:
    """The address a literal host stands for, read as the resolver reads it (also the legacy IPv4 forms:
    ``0``, ``127.1``, ``2130706433``, ``0x7f000001``, ``017700000001``); [] for a name."""
    host = host.rstrip(".").lower()
    if host == "localhost" or host.endswith(".localhost"):
        return ["127.0.0.1"]
    try:
        return [str(ipaddress.ip_address(host))]
    except ValueError:
        pass
    if LEGACY_IPV4.fullmatch(host):
        try:
            return [socket.inet_ntoa(socket.inet_aton(host))]
        except OSError:
            return []
    return []


def _check_host(url: str, host: str) -> None:
    """A host an HTTP client can reach: an IP literal, or a DNS name of labels of letters, digits, '-' and
    '_' (at most 63 characters each, 253 in all, international names in their IDNA form)."""
    if ":" in host:  # IPv6 (urlsplit has taken the brackets off)
        try:
            ipaddress.ip_address(host.split("%", 1)[0])
            return
        except ValueError:
            pass
    else:
        try:
            name = host.rstrip(".").encode("idna").decode("ascii")
        except UnicodeError:
            name = ""
        if name and len(name) <= 253 and all(HOST_LABEL.fullmatch(label) for label in name.split(".")):
            return
    raise RefusedURL(
        f"url: {mask_url(url)!r} does not name a valid host: a host is an IP address or a DNS name of labels "
        "of letters, digits and '-' (1 to 63 characters each, 253 in all)"
    )


def addresses_of(host: str, port: int, *, rule: AddressRule, resolver: Resolver) -> list[str]:
    """The addresses to connect to for ``host``, each allowed by ``rule`` (a literal host is not looked
    up); RefusedURL when the name does not resolve or any address it resolves to is refused."""
    addresses = _literal_addresses(host)
    if not addresses:
        try:
            addresses = list(resolver(host, port))
        except (OSError, UnicodeError) as exc:
            raise RefusedURL(f"url: cannot resolve {host!r} ({exc})") from None
        if not addresses:
            raise RefusedURL(f"url: cannot resolve {host!r} (no address)")
    rule.check(host, addresses)
    return addresses


def check_url(url: str, *, rule: AddressRule, resolver: Resolver | None) -> None:
    """Raise :class:`RefusedURL` for a URL not http(s) or (unless ``rule`` allows it) reaching a non-public
    address.

    ``resolver`` (subscribing): the host name is looked up and refused if any address is refused; a name
    that does not resolve (yet) passes (each delivery resolves it again). None: only a literal address is
    checked.
    """
    try:
        parsed = urllib.parse.urlsplit(url)
        host = parsed.hostname
    except ValueError:  # a bracketed host that is no IPv6 address
        raise RefusedURL(
            f"url: {mask_url(url)!r} does not name a valid host: '[...]' holds an IPv6 address"
        ) from None
    if parsed.scheme not in ("http", "https") or not host:
        raise RefusedURL(f"url: {mask_url(url)!r} is not an http(s) URL naming a host")
    _check_host(url, host)
    if rule.allow_private:
        return
    try:
        port = parsed.port or (443 if parsed.scheme == "https" else 80)
    except ValueError:
        raise RefusedURL(f"url: {mask_url(url)!r} has a port out of range (1 to 65535)") from None
    literal = _literal_addresses(host)
    if literal or resolver is None:
        rule.check(host, literal)
        return
    try:
        addresses = list(resolver(host, port))
    except (OSError, UnicodeError):
        return  # not resolvable now: each delivery resolves it and checks again
    rule.check(host, addresses)


class CheckedBackend(httpcore.NetworkBackend):
    """httpcore's network backend for webhooks: each TCP connection resolves its host once
    (:func:`addresses_of`: refused if any address is refused) and connects to those checked addresses, so
    the address checked is the address reached."""

    def __init__(self, *, rule: AddressRule, resolver: Resolver = system_resolver) -> None:
        self.rule, self.resolver = rule, resolver
        self._tcp = httpcore.SyncBackend()

    def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,
        local_address: str | None = None,
        socket_options: typing.Iterable[httpcore.SOCKET_OPTION] | None = None,
    ) -> httpcore.NetworkStream:
        addresses = addresses_of(host, port, rule=self.rule, resolver=self.resolver)
        options = list(socket_options or ())
        failed: httpcore.ConnectError | httpcore.ConnectTimeout | None = None
        for address in addresses:  # in the resolver's order, as a client would try them
            try:
                return self._tcp.connect_tcp(address, port, timeout, local_address, options)
            except (httpcore.ConnectError, httpcore.ConnectTimeout) as exc:
                failed = exc
        assert failed is not None  # addresses_of returns at least one address
        raise failed

    def connect_unix_socket(
        self,
        path: str,
        timeout: float | None = None,
        socket_options: typing.Iterable[httpcore.SOCKET_OPTION] | None = None,
    ) -> httpcore.NetworkStream:
        raise RefusedURL("url: webhooks go over TCP only")

    def sleep(self, seconds: float) -> None:
        time.sleep(seconds)


class _CheckedTransport(httpx.HTTPTransport):
    """httpx's own transport on a connection pool over :class:`CheckedBackend` (httpx does not take a
    network backend itself); no proxy from the environment (a proxy would resolve the name itself)."""

    def __init__(self, backend: CheckedBackend) -> None:
        context = httpx.create_ssl_context(trust_env=False)  # made once (loading the CA bundle takes a while)
        super().__init__(verify=context, trust_env=False)
        self._pool = httpcore.ConnectionPool(ssl_context=context, network_backend=backend)


def webhook_client(*, settings: Settings, resolver: Resolver = system_resolver) -> httpx.Client:
    """The HTTP client of the outbox sender: every connection checked (:class:`CheckedBackend`), no redirect
    followed, ``webhook_timeout_s`` per request."""
    backend = CheckedBackend(rule=AddressRule.of(settings), resolver=resolver)
    return httpx.Client(
        transport=_CheckedTransport(backend), timeout=settings.webhook_timeout_s, follow_redirects=False
    )
