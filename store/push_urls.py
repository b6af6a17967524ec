"""The SSRF guard on push notification URLs, checked when a config is set (not in the domain: it resolves).

A push URL must be ``http`` or ``https`` with a host. Unless private webhooks are allowed
(``LONGHAUL_ALLOW_PRIVATE_WEBHOOKS``), the host, a literal address or every address its name
resolves to, must be public: loopback, private, link-local, multicast, reserved, unspecified
and other non-global addresses are refused. ``check_push_url`` blocks on DNS: call it in a
worker thread.

The check runs at config time only; the dispatcher that will deliver to these URLs must check
the address it connects to again (a name can resolve elsewhere later: DNS rebinding).
"""

from __future__ import annotations

import ipaddress
import socket
from urllib.parse import urlsplit

from store.errors import PushUrlRefusedError

ALLOWED_SCHEMES = ("http", "https")

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address


def check_push_url(url: str, *, allow_private: bool) -> None:
    """Refuse ``url`` unless it is http(s) with a host that is public (or ``allow_private``).

    Raises:
        PushUrlRefusedError: The URL is malformed, not http(s), has no host, its host does not
            resolve, or (without ``allow_private``) it is or resolves to a non-public address.
    """
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError as error:
        raise PushUrlRefusedError(f"push URL {url!r} is not a valid URL: {error}") from None
    if parts.scheme.lower() not in ALLOWED_SCHEMES:
        raise PushUrlRefusedError(f"push URL {url!r} must use http or https")
    host = parts.hostname
    if not host:
        raise PushUrlRefusedError(f"push URL {url!r} has no host")
    if allow_private:
        return
    for address in _addresses(host, port):
        if not _is_public(address):
            raise PushUrlRefusedError(
                f"push URL {url!r} points at {address}, which is not a public address "
                "(loopback, private, link-local, multicast and reserved addresses are refused; "
                "the operator can allow them with LONGHAUL_ALLOW_PRIVATE_WEBHOOKS=true)"
            )


def _addresses(host: str, port: int | None) -> list[IPAddress]:
    """The literal address ``host`` is, or every address it resolves to."""
    literal = _literal(host)
    if literal is not None:
        return [literal]
    try:
        infos = socket.getaddrinfo(host, port or 443, proto=socket.IPPROTO_TCP)
    except (OSError, UnicodeError) as error:
        raise PushUrlRefusedError(f"push URL host {host!r} does not resolve: {error}") from None
    addresses = [address for info in infos if (address := _literal(str(info[4][0]))) is not None]
    if not addresses:
        raise PushUrlRefusedError(f"push URL host {host!r} resolves to no IP address")
    return addresses


def _literal(text: str) -> IPAddress | None:
    try:
        return ipaddress.ip_address(text.split("%", 1)[0])  # an IPv6 zone (fe80::1%eth0) is not an address
    except ValueError:
        return None


def _is_public(address: IPAddress) -> bool:
    """Whether ``address`` is a globally reachable unicast address (IPv4-mapped IPv6 as its IPv4)."""
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        address = address.ipv4_mapped
    return address.is_global and not (
        address.is_multicast or address.is_reserved or address.is_loopback or address.is_link_local
    )
