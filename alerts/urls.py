"""Where outgoing webhooks may go: http(s) only, and no loopback, private, link-local or other non-public
address unless ``webhook_allow_private_urls`` is on (server-side request forgery: a subscriber must not make
the API post to the metadata service or to an internal admin port).

A subscription's URL is checked when it is made (a literal address or ``localhost``: no DNS lookup then, the
name may not resolve yet) and again before every delivery (every address its host resolves to). The sender
follows no redirect at all (:mod:`alerts.sender`).
"""

from __future__ import annotations

import ipaddress
import re
import socket
import urllib.parse

from core.errors import Invalid

RULE = "webhook_allow_private_urls"


class RefusedURL(Invalid):
    """A webhook URL this server will not post to; the message names the address and the setting."""


def _public(address: str) -> bool:
    ip = ipaddress.ip_address(address.split("%", 1)[0])  # an IPv6 zone id ("fe80::1%eth0") is not part of it
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        ip = ip.ipv4_mapped
    return ip.is_global and not ip.is_multicast


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
        f"url: {url!r} does not name a valid host: a host is an IP address or a DNS name of labels of "
        "letters, digits and '-' (1 to 63 characters each, 253 in all)"
    )


def _resolved(host: str, port: int) -> list[str]:
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except (socket.gaierror, UnicodeError) as exc:
        raise RefusedURL(f"cannot resolve {host!r} ({exc})") from None
    return sorted({str(info[4][0]) for info in infos})


def check_url(url: str, *, allow_private: bool, resolve: bool) -> None:
    """Raise :class:`RefusedURL` for a URL not http(s) or (unless allowed) reaching a non-public address.

    ``resolve``: look the host name up (before a delivery); otherwise only literal addresses are checked.
    """
    try:
        parsed = urllib.parse.urlsplit(url)
        host = parsed.hostname
    except ValueError:  # a bracketed host that is no IPv6 address
        raise RefusedURL(f"url: {url!r} does not name a valid host: '[...]' holds an IPv6 address") from None
    if parsed.scheme not in ("http", "https") or not host:
        raise RefusedURL(f"url: {url!r} is not an http(s) URL naming a host")
    _check_host(url, host)
    if allow_private:
        return
    try:
        port = parsed.port or (443 if parsed.scheme == "https" else 80)
    except ValueError:
        raise RefusedURL(f"url: {url!r} has a port out of range (1 to 65535)") from None
    addresses = (
        _resolved(host, port) if resolve and not _literal_addresses(host) else _literal_addresses(host)
    )
    for address in addresses:
        if not _public(address):
            raise RefusedURL(
                f"url: {host!r} is a loopback, private, link-local or otherwise non-public address "
                f"({address}); webhooks go to public addresses only unless "
                "DRIFTWARDEN_WEBHOOK_ALLOW_PRIVATE_URLS=true "
                f"(rule: {RULE})"
            )
