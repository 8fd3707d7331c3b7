"""Where outgoing webhooks may go: http(s) only, and no loopback, private, link-local or other non-public
address unless ``webhook_allow_private_urls`` is on (server-side request forgery: a subscriber must not make
the API post to the metadata service or to an internal admin port).

A subscription's URL is checked when it is made (a literal address or ``localhost``: no DNS lookup then, the
name may not resolve yet) and again before every delivery (every address its host resolves to). The sender
follows no redirect at all (:mod:`alerts.sender`).
"""

from __future__ import annotations

import ipaddress
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


def _literal_addresses(host: str) -> list[str]:
    host = host.rstrip(".").lower()
    if host == "localhost" or host.endswith(".localhost"):
        return ["127.0.0.1"]
    try:
        return [str(ipaddress.ip_address(host))]
    except ValueError:
        return []


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
    parsed = urllib.parse.urlsplit(url)
    host = parsed.hostname
    if parsed.scheme not in ("http", "https") or not host:
        raise RefusedURL(f"url: {url!r} is not an http(s) URL naming a host")
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
