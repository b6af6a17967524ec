"""The dispatcher's resolver: connections go only to addresses the SSRF guard checked (no rebinding)."""

from __future__ import annotations

import socket

import aiohttp
import pytest
from aiohttp.abc import AbstractResolver, ResolveResult

from tests.support.webhooks import Receiver
from workers.webhook_resolver import NonPublicAddressError, PublicOnlyResolver, refused_by_resolver


class FixedDns(AbstractResolver):
    """DNS at the edge of the world: answers every name with ``addresses``."""

    def __init__(self, *addresses: str) -> None:
        self.addresses = addresses
        self.asked: list[str] = []

    async def resolve(
        self, host: str, port: int = 0, family: socket.AddressFamily = socket.AF_INET
    ) -> list[ResolveResult]:
        self.asked.append(host)
        return [
            ResolveResult(hostname=host, host=a, port=port, family=family, proto=0, flags=0)
            for a in self.addresses
        ]

    async def close(self) -> None:
        return None


async def test_a_public_answer_is_passed_on() -> None:
    resolver = PublicOnlyResolver(FixedDns("93.184.216.34", "2606:2800:220:1::1"))
    results = await resolver.resolve("example.com", 443)
    assert [r["host"] for r in results] == ["93.184.216.34", "2606:2800:220:1::1"]


@pytest.mark.parametrize("private", ["127.0.0.1", "10.1.2.3", "169.254.169.254", "::1", "::ffff:192.168.0.1"])
async def test_one_private_address_refuses_the_whole_answer(private: str) -> None:
    resolver = PublicOnlyResolver(FixedDns("93.184.216.34", private))
    with pytest.raises(NonPublicAddressError, match="not a public address") as refused:
        await resolver.resolve("rebinding.example", 443)
    assert refused.value.address == private


async def test_a_rebound_name_never_reaches_the_private_receiver(receiver: Receiver) -> None:
    # The name passed the guard when the config was set; now it answers the receiver's loopback
    # address. The session must refuse before connecting: the receiver hears nothing.
    dns = FixedDns("127.0.0.1")
    url = receiver.url().replace("127.0.0.1", "rebinding.example")
    connector = aiohttp.TCPConnector(resolver=PublicOnlyResolver(dns), use_dns_cache=False)
    async with aiohttp.ClientSession(connector=connector) as session:
        with pytest.raises(aiohttp.ClientConnectorError) as failure:
            await session.post(url, data=b"{}")
    assert dns.asked == ["rebinding.example"]
    assert refused_by_resolver(failure.value) is not None
    assert receiver.received == []
