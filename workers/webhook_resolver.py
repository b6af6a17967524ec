"""The dispatcher's DNS: the addresses a webhook connects to are the addresses the SSRF guard checked.

Checking a push URL's name and then letting the HTTP client resolve it again leaves a window: a
name can answer a public address to the check and a private one to the connection (DNS
rebinding). ``PublicOnlyResolver`` closes it by putting the check inside the client's own
resolution: aiohttp asks it for a host's addresses, it asks the usual resolver and refuses the
whole answer if any address is not public (``store.deliveries.push_urls.is_public``), so the connection can
only go to checked addresses. aiohttp does not call a resolver for a literal address; the
dispatcher checks those itself (``check_push_url(..., resolve=False)``).
"""

from __future__ import annotations

import socket
from typing import Any

from aiohttp.abc import AbstractResolver, ResolveResult
from aiohttp.resolver import DefaultResolver

from store.deliveries import is_public, literal_address


class NonPublicAddressError(OSError):
    """A webhook host resolved to an address the SSRF guard refuses."""

    def __init__(self, host: str, address: str) -> None:
        super().__init__(
            f"{host} resolves to {address}, which is not a public address (loopback, private, "
            "link-local, multicast and reserved addresses are refused; the operator can allow "
            "them with LONGHAUL_ALLOW_PRIVATE_WEBHOOKS=true)"
        )
        self.host = host
        self.address = address


class PublicOnlyResolver(AbstractResolver):
    """Resolves with ``inner`` (aiohttp's default) and refuses any answer holding a non-public address."""

    def __init__(self, inner: AbstractResolver | None = None) -> None:
        self._inner = inner if inner is not None else DefaultResolver()

    async def resolve(
        self, host: str, port: int = 0, family: socket.AddressFamily = socket.AF_INET
    ) -> list[ResolveResult]:
        """``host``'s addresses, all public.

        Raises:
            NonPublicAddressError: One of them is not public (an ``OSError``, which aiohttp
                reports as ``ClientConnectorDNSError``: no connection is made).
        """
        results = await self._inner.resolve(host, port, family)
        for result in results:
            address = literal_address(str(result["host"]))
            if address is None or not is_public(address):
                raise NonPublicAddressError(host, str(result["host"]))
        return results

    async def close(self) -> None:
        """Close the inner resolver."""
        await self._inner.close()


def refused_by_resolver(error: BaseException) -> NonPublicAddressError | None:
    """The ``NonPublicAddressError`` behind an aiohttp connection error, if that is what it was."""
    cause: Any = getattr(error, "os_error", None) or error.__cause__
    return cause if isinstance(cause, NonPublicAddressError) else None
