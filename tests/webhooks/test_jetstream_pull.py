"""``workers.jetstream_pull.Pull``: every message of the durable consumer, in stream order, as it arrives."""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator
from typing import Any

import nats
import pytest
from nats.js.api import AckPolicy, ConsumerConfig, DeliverPolicy, StreamConfig

from tests.webhooks.conftest import eventually
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


async def test_a_lingering_pull_hands_over_the_first_message_alone_and_what_follows_in_one_burst(
    jetstream: tuple[Any, Any, str], nats_names: tuple[str, str]
) -> None:
    client, js, subject = jetstream
    stop = asyncio.Event()
    pull = Pull(client, nats_names[0], DURABLE, batch=64, linger_s=lambda: 1.0)
    batches: list[list[bytes]] = []
    five = [f"m{n}".encode() for n in range(5)]
    publishing: list[asyncio.Future[None]] = []

    async def publish_five() -> None:
        for data in five:
            await js.publish(subject, data)
            await asyncio.sleep(0.02)  # the reader could take each one on its own

    async def follow() -> None:
        async for messages in pull.batches(stop):
            batches.append([message.data for message in messages])
            for message in messages:
                await message.ack()
            if len(batches) == 1:  # the first came alone, at once: the next five come while it lingers
                publishing.append(asyncio.ensure_future(publish_five()))
            if sum(map(len, batches)) == 6:
                stop.set()

    follower = asyncio.ensure_future(follow())
    await js.publish(subject, b"first")
    await asyncio.wait_for(follower, 15.0)
    await publishing[0]
    assert batches[0] == [b"first"]
    # The five were stored 20 ms apart; without the linger each would come in a batch of its own.
    # Lingering, they come in one burst (two, if a read splits it).
    assert [data for batch in batches[1:] for data in batch] == five
    assert len(batches) <= 3, batches


async def test_an_idle_lingering_pull_keeps_one_request_open_instead_of_asking_again_and_again(
    jetstream: tuple[Any, Any, str], nats_names: tuple[str, str], nats_url: str
) -> None:
    client, js, subject = jetstream
    watcher = await nats.connect(nats_url)
    requests: list[dict[str, Any]] = []

    async def seen(message: Any) -> None:
        requests.append(json.loads(message.data))

    await watcher.subscribe(f"$JS.API.CONSUMER.MSG.NEXT.{nats_names[0]}.{DURABLE}", cb=seen)
    await watcher.flush()
    pull = Pull(client, nats_names[0], DURABLE, batch=64, linger_s=lambda: 0.02)
    stop = asyncio.Event()
    taken: list[bytes] = []
    asked_before_idle = 0

    async def follow() -> None:
        nonlocal asked_before_idle
        async for messages in pull.batches(stop):
            taken.extend(message.data for message in messages)
            for message in messages:
                await message.ack()
            if len(taken) == 2:
                await watcher.flush()
                asked_before_idle = len(requests)

    follower = asyncio.ensure_future(follow())
    try:
        await js.publish(subject, b"one")
        await js.publish(subject, b"two")
        await eventually(lambda: asked_before_idle > 0)
        await asyncio.sleep(1.0)  # idle
        await watcher.flush()
    finally:
        stop.set()
        await follower
        await watcher.close()
    assert taken == [b"one", b"two"]
    assert requests[0] == {"batch": 1, "expires": 5_000_000_000}  # the first message, as it arrives
    assert {"batch": 64, "no_wait": True} in requests  # what follows it, in a burst
    # Idle for a second at a linger of 20 ms: the burst request that found nothing, then one open
    # request; not one every 20 ms.
    assert len(requests) - asked_before_idle <= 2, requests[asked_before_idle:]
