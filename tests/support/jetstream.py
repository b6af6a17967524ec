"""What a test's JetStream stream holds, beside the log.

``stream_messages`` reads a whole stream in stream order; ``relayed_exactly_once`` checks it
holds every event of the log once, in log-position order. A nats-server a test may stop or
kill is ``tests.support.nats_servers.NatsServer``.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

import nats
from nats.js.api import DeliverPolicy

from store.log.application import TaskApplication
from tests.support.processes import wait_until

JSON = dict[str, Any]


def stream_messages(url: str, stream: str, subjects: str) -> list[tuple[str, JSON]]:
    """``(Nats-Msg-Id, message)`` of every message in ``stream``, in stream order."""

    async def read() -> list[tuple[str, JSON]]:
        client = await nats.connect(url, connect_timeout=5, max_reconnect_attempts=0)
        try:
            js = client.jetstream()
            count = (await js.stream_info(stream)).state.messages
            subscription = await js.subscribe(
                subjects, stream=stream, ordered_consumer=True, deliver_policy=DeliverPolicy.ALL
            )
            messages = []
            for _ in range(count):
                msg = await subscription.next_msg(timeout=10)
                messages.append(((msg.headers or {}).get("Nats-Msg-Id", ""), json.loads(msg.data)))
            await subscription.unsubscribe()
            return messages
        finally:
            await client.close()

    return asyncio.run(read())


def stream_count(url: str, stream: str) -> int:
    """How many messages ``stream`` holds (0 while it does not exist)."""

    async def count() -> int:
        client = await nats.connect(url, connect_timeout=5, max_reconnect_attempts=0)
        try:
            return (await client.jetstream().stream_info(stream)).state.messages
        except nats.js.errors.NotFoundError:
            return 0
        finally:
            await client.close()

    return asyncio.run(count())


def log_events(store: TaskApplication) -> list[tuple[int, str, int]]:
    """``(position, task id, version)`` of every event in the log, in position order."""
    notifications = store.recorder.select_notifications(start=1, limit=1_000_000)
    return [(n.id, str(n.originator_id), n.originator_version) for n in notifications]


def relayed_exactly_once(messages: list[tuple[str, JSON]], store: TaskApplication, stream: str) -> None:
    """Assert the stream holds each event of the log once, in log-position order, none skipped."""
    logged = log_events(store)
    ids = [msg_id for msg_id, _ in messages]
    assert len(ids) == len(set(ids)), "a message id is in the stream twice"
    assert ids == [f"{stream}:{position}" for position, _, _ in logged], "the stream is not the log"
    assert [(m["position"], m["taskId"], m["version"]) for _, m in messages] == logged


def wait_for_stream(url: str, stream: str, count: int, timeout: float) -> None:
    """Wait until ``stream`` holds at least ``count`` messages."""
    wait_until(lambda: stream_count(url, stream) >= count, timeout, f"{count} messages in the stream")
