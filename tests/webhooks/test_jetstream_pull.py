"""``workers.jetstream_pull.Pull``: every message of the durable consumer, in stream order, as it arrives."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from typing import Any

import nats
import pytest
from nats.js.api import AckPolicy, ConsumerConfig, DeliverPolicy, StreamConfig

from workers.jetstream_pull import Pull

DURABLE = "pull-test"


@pytest.fixture
async def jetstream(nats_url: str, nats_names: tuple[str, str]) -> AsyncIterator[tuple[Any, Any, str]]:
    """``(client, jetstream, subject)`` on a stream of this test's own with a durable pull consumer."""
    stream, prefix = nats_names
    client = await nats.connect(nats_url)
    js = client.jetstream()
    await js.add_stream(StreamConfig(name=stream, subjects=[f"{prefix}.>"]))
    await js.add_consumer(
        stream,
        ConsumerConfig(durable_name=DURABLE, ack_policy=AckPolicy.EXPLICIT, deliver_policy=DeliverPolicy.ALL),
    )
    try:
        yield client, js, f"{prefix}.events"
    finally:
        await js.delete_stream(stream)
        await client.close()


async def _take(pull: Pull, stop: asyncio.Event, want: int, within: float = 15.0) -> list[bytes]:
    """What ``pull`` hands over (acknowledging it) until ``want`` messages came, then ``stop``."""
    taken: list[bytes] = []

    async def follow() -> None:
        async for messages in pull.batches(stop):
            assert messages, "a batch is never empty"
            for message in messages:
                taken.append(message.data)
                await message.ack()
            if len(taken) >= want:
                stop.set()

    follower = asyncio.ensure_future(follow())
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(asyncio.shield(follower), within)
    stop.set()
    await follower
    return taken


async def test_a_burst_comes_out_whole_and_in_order_over_several_pull_requests(
    jetstream: tuple[Any, Any, str], nats_names: tuple[str, str]
) -> None:
    client, js, subject = jetstream
    sent = [f"m{n}".encode() for n in range(300)]
    for data in sent:
        await js.publish(subject, data)
    # Batches of 64: the 300 need five pull requests, each asked for when the one before is used up.
    pull = Pull(client, nats_names[0], DURABLE, batch=64)
    assert await _take(pull, asyncio.Event(), len(sent)) == sent


async def test_what_is_published_after_a_pull_request_expired_still_arrives(
    jetstream: tuple[Any, Any, str], nats_names: tuple[str, str]
) -> None:
    client, js, subject = jetstream
    stop = asyncio.Event()
    pull = Pull(client, nats_names[0], DURABLE, batch=16, expires=0.5)

    async def publish_late() -> None:
        await js.publish(subject, b"early")
        await asyncio.sleep(1.5)  # the first pull request has expired (its 408 came) by now
        for n in range(3):
            await js.publish(subject, f"late{n}".encode())

    publisher = asyncio.ensure_future(publish_late())
    taken = await _take(pull, stop, 4)
    await publisher
    assert taken == [b"early", b"late0", b"late1", b"late2"]
