"""One task's events, live from NATS, in version order from a given version: the gateway's feed.

``TaskFeed.follow(task_id, tenant, after_version)`` is an async iterator of the task's event
messages (the relay's NATS form, ``{position, taskId, tenant, version, type, time, body}``,
``docs/events.md``) with versions above ``after_version``: each version once, none skipped,
in order. Blocking SendMessage waits on it; the SSE streams (SendStreamingMessage,
SubscribeToTask with ``Last-Event-ID`` = a version) are meant to send from it.

How it is built, so that the log is read only for what NATS did not bring:

1. Subscribe to the task's subjects and flush, so the server has the subscription.
2. Catch up from the log on what is older than the first live message seen (versions above
   ``after_version`` and below that message's), or on everything newer when none came yet.
3. Then live: a message at or below the last version given is a duplicate and dropped; the
   next version is given as it came; a message past a gap, or a reference (an event too big
   for NATS: ``body`` null and ``bodyOmitted``), makes the feed read the log up to it.
4. After a NATS reconnect (messages may have been published while the client was away), and
   every ``fallback_poll`` seconds without a message (a stalled relay delays, never loses), it
   reads the log after the last version given.

``FeedOrder`` is that ordering, deduplication and gap filling, with the log as a port
(``ReadLog``), so it is tested without I/O; ``TaskFeed`` adds the subscription and the clock,
``StoreLog`` reads the PostgreSQL log into the same message form.

Core NATS, not a JetStream consumer: a core subscription to the task's subjects gets the
relay's publishes as they enter the stream, and costs one ``SUB`` and a ping to set up (no
consumer to create on the server and delete again for every blocking call). An ordered
consumer with a start sequence would need the stream sequence of the version to start from,
which a caller holding only a version does not know (the set-up below asks the stream for its
last sequence); the log answers "after version v" with one index range instead. Measured with
``bench/feed_setup.py`` (300 rounds, local nats-server 2.9, 2 vCPU, load average 4,
2026-12-01): set-up p50 0.21 ms for a core subscription against 0.95 ms for an ordered
consumer, publish to callback p50 0.20 ms against 0.28 ms (``docs/benchmarks.md`` §7).
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import json
import logging
import time
from collections.abc import AsyncGenerator, Awaitable, Callable, Sequence
from typing import Any
from uuid import UUID

import nats
from nats.aio.client import Client as NatsClient
from nats.aio.msg import Msg
from nats.errors import Error as NatsError

from projections.event_json import dumps, event_message
from projections.subjects import NatsNames
from store.application import TaskApplication
from store.postgres import PostgresRunQueueRecorder

JSON = dict[str, Any]

log = logging.getLogger(__name__)

ReadLog = Callable[[int, int | None, int], Awaitable[Sequence[JSON]]]
"""``read(after, up_to, limit)``: the task's first ``limit`` event messages with versions in
(after, up_to], in version order; ``up_to`` None means no upper bound.
"""

PAGE = 500
"""Events read from the log at a time."""

RECONNECT_WAIT_S = 0.5
"""Pause between the gateway's attempts to reach NATS again (nats-py's default is 2 s)."""

FLUSH_TIMEOUT_S = 1
"""How long a new subscription waits for the server's answer; without one the feed goes on."""

_RESYNC: JSON = {}
"""Queued after a reconnect: read the log after the last version given."""


class FeedOverflowError(Exception):
    """More live messages waited for a follower than its ``max_pending``: it reads too slowly.

    The feed dropped what was pending (the gateway's memory stays bounded) and ends with this
    error at the follower's next read; the follower resumes from the last version it was given.
    """

    def __init__(self, task_id: UUID, last_version: int, max_pending: int) -> None:
        self.task_id, self.last_version, self.max_pending = task_id, last_version, max_pending
        super().__init__(
            f"more than {max_pending} events of task {task_id} waited for a reader that last took version "
            f"{last_version}"
        )


def is_reference(message: JSON) -> bool:
    """Whether ``message`` is a reference (no body: read the event from the log)."""
    return message.get("body") is None and "bodyOmitted" in message


def parse_message(data: bytes) -> JSON | None:
    """The event message in ``data`` (an object with an integer ``version`` and a ``type``), else None."""
    try:
        message = json.loads(data)
    except (ValueError, RecursionError):  # not JSON, not UTF-8, or nested too deep
        return None
    if not isinstance(message, dict):
        return None
    version, event_type = message.get("version"), message.get("type")
    if isinstance(version, bool) or not isinstance(version, int) or not isinstance(event_type, str):
        return None
    return message


class FeedOrder:
    """The versions a feed has given, and what to give next: in order, once, gaps from the log."""

    def __init__(self, read_log: ReadLog, after_version: int, *, page: int = PAGE) -> None:
        self._read_log = read_log
        self._page = page
        self.last = after_version
        """The last version given (``after_version`` until one is)."""

    async def accept(self, message: JSON) -> list[JSON]:
        """What to give for one live message: nothing (a duplicate), it, or the log up to it."""
        version = message["version"]
        if version <= self.last:
            return []
        if version == self.last + 1 and not is_reference(message):
            self.last = version
            return [message]
        return await self.catch_up(version)

    async def catch_up(self, up_to: int | None = None) -> list[JSON]:
        """The log's messages after the last version given, up to ``up_to`` (None: all of them)."""
        return [message async for page in self.pages(up_to) for message in page]

    async def pages(self, up_to: int | None = None) -> AsyncGenerator[list[JSON], None]:
        """``catch_up`` one page of the log at a time, so that a long catch-up holds one page."""
        while up_to is None or self.last < up_to:
            before = self.last
            page = await self._read_log(self.last, up_to, self._page)
            given = []
            for message in page:
                if message["version"] > self.last:
                    given.append(message)
                    self.last = message["version"]
            if given:
                yield given
            if len(page) < self._page or self.last == before:
                break


async def _pages_for(order: FeedOrder, queued: JSON) -> AsyncGenerator[list[JSON], None]:
    """What to give for one queued item: the log page by page after a resync, else ``accept``."""
    if queued is _RESYNC:
        async for page in order.pages():
            yield page
    else:
        yield await order.accept(queued)


class _Inbox:
    """The messages that came for one follower and wait for it to read: at most ``max_pending``.

    Past that, what waits is dropped and ``overflowed`` set (the follower ends with
    ``FeedOverflowError``); later messages are ignored.
    """

    def __init__(self, max_pending: int | None) -> None:
        self.pending: collections.deque[JSON] = collections.deque()
        self.arrived = asyncio.Event()
        self.overflowed = False
        self._max_pending = max_pending

    async def wait(self, seconds: float) -> bool:
        """Wait up to ``seconds`` for the next message; whether one came."""
        self.arrived.clear()
        try:
            await asyncio.wait_for(self.arrived.wait(), seconds)
        except TimeoutError:
            return False
        return True

    def push(self, message: JSON) -> None:
        """Queue one message for the follower (or note the overflow)."""
        if self.overflowed:
            return
        if self._max_pending is not None and len(self.pending) >= self._max_pending:
            self.overflowed = True
            self.pending.clear()
        else:
            self.pending.append(message)
        self.arrived.set()


class StoreLog:
    """Reads one task's events from the PostgreSQL log in the relay's NATS message form.

    The messages are what the relay publishes for the same events (positions included, through
    the JSON encoding), so a reader cannot tell a message caught up from the log from a live one.
    """

    def __init__(self, store: TaskApplication) -> None:
        recorder = store.recorder
        if not isinstance(recorder, PostgresRunQueueRecorder):
            raise TypeError("the task feed reads the log on PostgreSQL (LONGHAUL_STORE=postgres)")
        self._store = store
        self._recorder = recorder

    def reader(self, task_id: UUID, tenant: str) -> ReadLog:
        """The ``ReadLog`` of one task."""

        async def read(after: int, up_to: int | None, limit: int) -> list[JSON]:
            return await asyncio.to_thread(self.read, task_id, tenant, after, up_to, limit)

        return read

    def read(
        self, task_id: UUID, tenant: str, after: int, up_to: int | None, limit: int = PAGE
    ) -> list[JSON]:
        """The task's first ``limit`` event messages with versions in (``after``, ``up_to``]."""
        notifications = self._recorder.task_notifications(task_id, after=after, up_to=up_to, limit=limit)
        return [
            json.loads(dumps(event_message(n.id, tenant, self._store.mapper.to_domain_event(n))))
            for n in notifications
        ]


class TaskFeed:
    """Follows tasks on one NATS connection, catching up from the log (``StoreLog``)."""

    def __init__(
        self, client: NatsClient, names: NatsNames, store_log: StoreLog, *, fallback_poll: float = 1.0
    ) -> None:
        self._client = client
        self._names = names
        self._log = store_log
        self._fallback_poll = fallback_poll
        self._followers: set[Callable[[JSON], None]] = set()
        self.closing = False

    @classmethod
    async def connect(
        cls,
        names: NatsNames,
        store_log: StoreLog,
        *,
        fallback_poll: float = 1.0,
        connect_timeout: float = 10.0,
    ) -> TaskFeed:
        """A feed on a new connection to ``names.url`` that reconnects forever.

        nats-py resubscribes every subscription after a reconnect; the feed then reads the log
        for what was published while it was away. Only the first connect is bounded
        (``connect_timeout``): with unlimited reconnects nats-py would retry it forever.
        """
        feed: TaskFeed

        async def reconnected() -> None:
            log.info("NATS reconnected at %s: live feeds catch up from the log", names.url)
            feed.reconnected()

        async def disconnected() -> None:
            if feed.closing:
                return
            log.warning("NATS at %s lost: live feeds poll the log until it is back", names.url)

        client = await asyncio.wait_for(
            nats.connect(
                names.urls,
                max_reconnect_attempts=-1,
                reconnect_time_wait=RECONNECT_WAIT_S,
                reconnected_cb=reconnected,
                disconnected_cb=disconnected,
            ),
            connect_timeout,
        )
        feed = cls(client, names, store_log, fallback_poll=fallback_poll)
        return feed

    async def close(self) -> None:
        """Close the connection."""
        self.closing = True
        await self._client.close()

    def reconnected(self) -> None:
        """Make every follower read the log after its last version (messages may be lost)."""
        for push in list(self._followers):
            push(_RESYNC)

    async def follow(
        self,
        task_id: UUID,
        tenant: str,
        after_version: int,
        *,
        timeout: float | None = None,  # noqa: ASYNC109 - part of the contract: the iterator ends then
        max_pending: int | None = None,
    ) -> AsyncGenerator[JSON, None]:
        """The task's event messages above ``after_version``, in order, until ``timeout`` seconds.

        ``timeout`` None follows until the caller stops (``aclose``, or ``break`` inside
        ``contextlib.aclosing``), which also ends the subscription. With ``max_pending``, a
        follower that lets more live messages than that wait (it does not read: a slow SSE
        client) gets ``FeedOverflowError`` at its next read instead; None lets them queue.
        """
        deadline = None if timeout is None else time.monotonic() + timeout
        inbox = _Inbox(max_pending)
        pending, push = inbox.pending, inbox.push

        async def on_message(msg: Msg) -> None:
            message = parse_message(msg.data)
            if message is None:
                log.warning("unreadable NATS message on %s: reading the log instead", msg.subject)
            push(_RESYNC if message is None else message)

        subscription = await self._client.subscribe(self._names.task_subjects(task_id), cb=on_message)
        self._followers.add(push)
        order = FeedOrder(self._log.reader(task_id, tenant), after_version)
        try:
            if self._client.is_connected:
                with contextlib.suppress(NatsError, TimeoutError):
                    await self._client.flush(FLUSH_TIMEOUT_S)
            first_live = next((m for m in pending if m is not _RESYNC and m["version"] > after_version), None)
            up_to = None if first_live is None else first_live["version"] - 1
            async for page in order.pages(up_to):
                for message in page:
                    yield message
            while True:
                if inbox.overflowed:
                    raise FeedOverflowError(task_id, order.last, max_pending or 0)
                while pending:
                    async for page in _pages_for(order, pending.popleft()):
                        for message in page:
                            yield message
                wait = self._fallback_poll
                if deadline is not None:
                    remaining = deadline - time.monotonic()
                    if remaining <= 0:
                        return
                    wait = min(wait, remaining)
                if not await inbox.wait(wait) and (deadline is None or time.monotonic() < deadline):
                    push(_RESYNC)
        finally:
            self._followers.discard(push)
            with contextlib.suppress(NatsError):
                await subscription.unsubscribe()
