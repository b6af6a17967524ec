"""The SSRF guard on push notification URLs, checked when a config is set (not in the domain: it resolves).

A push URL must be ``http`` or ``https`` with a host. Unless private webhooks are allowed
(``LONGHAUL_ALLOW_PRIVATE_WEBHOOKS``), the host, a literal address or every address its name
resolves to, must be public: loopback, private, link-local, multicast, reserved, unspecified
and other non-global addresses are refused. ``check_push_url`` blocks on DNS: call it in a
worker thread.

The check runs when a config is set. At delivery the dispatcher checks again, and checks the
addresses it actually connects to (``workers.webhook_resolver``: aiohttp's own resolution passes
through ``is_public``), so a name that resolves elsewhere later (DNS rebinding) is refused too.
"""

from __future__ import annotations

import ipaddress
import socket
from urllib.parse import urlsplit

from store.log.errors import PushUrlRefusedError

ALLOWED_SCHEMES = ("http", "https")

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address


def check_push_url(url: str, *, allow_private: bool, resolve: bool = True) -> None:
    """Refuse ``url`` unless it is http(s) with a host that is public (or ``allow_private``).

    With ``resolve=False`` a host name is not looked up (only a literal address is checked): for
    a caller whose connection resolves the name itself and checks those addresses.

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
    if not resolve and literal_address(host) is None:
        return
    for address in _addresses(host, port):
        if not is_public(address):
            raise PushUrlRefusedError(not_public(url, address))


def not_public(url: str, address: object) -> str:
    """Why ``url`` is refused: it points at ``address``, which is not public."""
    return (
        f"push URL {url!r} points at {address}, which is not a public address "
        "(loopback, private, link-local, multicast and reserved addresses are refused; "
        "the operator can allow them with LONGHAUL_ALLOW_PRIVATE_WEBHOOKS=true)"
    )


def _addresses(host: str, port: int | None) -> list[IPAddress]:
    """The literal address ``host`` is, or every address it resolves to."""
    literal = literal_address(host)
    if literal is not None:
        return [literal]
    try:
        infos = socket.getaddrinfo(host, port or 443, proto=socket.IPPROTO_TCP)
    except (OSError, UnicodeError) as error:
        raise PushUrlRefusedError(f"push URL host {host!r} does not resolve: {error}") from None
    addresses = [address for info in infos if (address := literal_address(str(info[4][0]))) is not None]
    if not addresses:
        raise PushUrlRefusedError(f"push URL host {host!r} resolves to no IP address")
    return addresses


def literal_address(text: str) -> IPAddress | None:
    """``text`` as an IP address (an IPv6 zone left out), or ``None`` when it is not one."""
    try:
        return ipaddress.ip_address(text.split("%", 1)[0])  # an IPv6 zone (fe80::1%eth0) is not an address
    except ValueError:
        return None


def is_public(address: IPAddress) -> bool:
    """Whether ``address`` is a globally reachable unicast address (IPv4-mapped IPv6 as its IPv4)."""
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        address = address.ipv4_mapped
    return address.is_global and not (
        address.is_multicast or address.is_reserved or address.is_loopback or address.is_link_local
    )
