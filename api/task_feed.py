"""One task's events, live from NATS, in version order from a given version: the gateway's feed.

``TaskFeed.follow(task_id, tenant, after_version)`` is an async iterator of the task's event
messages (the relay's NATS form, ``{position, taskId, tenant, version, type, time, body}``,
``docs/events.md``) with versions above ``after_version``: each version once, none skipped,
in order. Blocking SendMessage waits on it, and so do the SSE streams (SendStreamingMessage,
SubscribeToTask, with ``Last-Event-ID`` = a version).

How it is built, so that the log is read only for what NATS did not bring:

1. The feed has one core subscription to all the deployment's task subjects
   (``<prefix>.tasks.>``), and hands each message to the followers of its task (the task id is a
   token of the subject; a message of a task nobody follows here is not parsed). It subscribes
   when a follower comes and there is no subscription, before that follower reads anything, and
   unsubscribes once nobody followed for ``idle_unsubscribe`` seconds: a gateway whose callers do
   not wait (returnImmediately, blocking calls answered by a worker slot of its own process) is
   sent no task's messages (ADR 0052). A new follower is registered before it reads anything.
2. The follower catches up from the log on what is older than the first live message it was
   handed (versions above ``after_version`` and below that message's), or on everything newer
   when none came yet.
3. Then live: a message at or below the last version given is a duplicate and dropped; the
   next version is given as it came; a message past a gap, or a reference (an event too big
   for NATS: ``body`` null and ``bodyOmitted``), makes the follower read the log up to it.
4. After a NATS reconnect, or when the client dropped messages (a slow consumer), messages may
   have been lost: every follower reads the log after the last version it gave.
5. A stalled relay delays, never loses: every ``fallback_poll`` seconds, while anyone follows,
   the feed reads the log's head position (one query for the whole gateway). If the relay's
   messages heard since (their ``Nats-Msg-Id`` is ``<stream>:<position>``) have not reached the
   head read one check before, the relay is behind by more than ``fallback_poll``, and every
   follower reads the log after its last version (ADR 0038; before it, each follower read the
   log after every ``fallback_poll`` of its own task's silence, one query per quiet stream).

``FeedOrder`` is that ordering, deduplication and gap filling, with the log as a port
(``ReadLog``), so it is tested without I/O; ``TaskFeed`` adds the subscription and the clock,
``StoreLog`` reads the PostgreSQL log into the same message form.

Core NATS, not a JetStream consumer: a core subscription gets the relay's publishes as they
enter the stream, at no cost per follower (no consumer to create on the server and delete again
for every blocking call). An ordered consumer with a start sequence would need the stream
sequence of the version to start from, which a caller holding only a version does not know; the
log answers "after version v" with one index range instead. A core subscription also sets up
and delivers faster than an ordered consumer. One subscription for the whole gateway instead of
one per follower: ADR 0038.

Longer than 500 lines on purpose: the feed, its ordering (``FeedOrder``) and the checks that fill a
gap from the log are one mechanism with one lock; apart, each would reach into the others' state.
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
from nats.aio.subscription import Subscription
from nats.errors import Error as NatsError
from nats.errors import SlowConsumerError

from store.log import PostgresRunQueueRecorder, TaskApplication
from store.public_form import NatsNames, dumps, event_message

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

IDLE_UNSUBSCRIBE_S = 10.0
"""How long the feed keeps its subscription with nobody following before it unsubscribes."""

MSG_ID = "Nats-Msg-Id"
"""The relay's header on every message: ``<stream>:<position>``."""


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


def task_token(subject: str) -> str:
    """The task id token of a task subject, ``<prefix>.tasks.<tenant>.<task id>.<EventType>``."""
    parts = subject.rsplit(".", 2)
    return parts[-2] if len(parts) == 3 else ""


def position_of(msg: Msg, message: JSON | None) -> int | None:
    """The log position of a relay's message: its ``Nats-Msg-Id`` header, else its ``position``."""
    msg_id = msg.headers.get(MSG_ID) if msg.headers else None
    if msg_id is not None:
        _, _, tail = msg_id.rpartition(":")
        if tail.isdigit():
            return int(tail)
    position = message.get("position") if message is not None else None
    return position if isinstance(position, int) and not isinstance(position, bool) else None


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

    async def wait(self, seconds: float | None) -> bool:
        """Wait up to ``seconds`` (None: for as long as it takes) for the next message; whether one came.

        A message already waiting, or the overflow, returns at once.
        """
        if self.pending or self.overflowed:
            return True
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

    def head(self) -> int:
        """The position of the log's last event (0 for an empty log)."""
        return self._recorder.max_notification_id() or 0

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
    """Follows tasks on one NATS connection and one subscription, catching up from the log (``StoreLog``)."""

    def __init__(
        self,
        client: NatsClient,
        names: NatsNames,
        store_log: StoreLog,
        *,
        fallback_poll: float = 1.0,
        idle_unsubscribe: float = IDLE_UNSUBSCRIBE_S,
    ) -> None:
        self._client = client
        self._names = names
        self._log = store_log
        self._fallback_poll = fallback_poll
        self._idle_unsubscribe = idle_unsubscribe
        self._subscription: Subscription | None = None
        self._subscribing: asyncio.Task[None] | None = None
        """The subscription being made: every follower that comes meanwhile awaits the same one."""
        self._covering: asyncio.Task[None] | None = None
        self._idle_since: float | None = None
        """When the watch first saw nobody following (monotonic), None while anyone follows."""
        self._followers: dict[str, set[Callable[[JSON], None]]] = {}
        """The followers of each task here (by task id), each by its inbox's ``push``."""
        self._heard = 0
        """The highest log position of the relay's messages heard."""
        self._covered = 0
        """A log position up to which nothing waits for the relay: the followers read the log past it."""
        self._watch: asyncio.Task[None] | None = None
        self.closing = False

    @classmethod
    async def connect(
        cls,
        names: NatsNames,
        store_log: StoreLog,
        *,
        fallback_poll: float = 1.0,
        idle_unsubscribe: float = IDLE_UNSUBSCRIBE_S,
        connect_timeout: float = 10.0,
    ) -> TaskFeed:
        """A feed on a new connection to ``names.url`` that reconnects forever.

        nats-py resubscribes the feed's subscription after a reconnect; the feed then reads the log
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

        async def error(exception: Exception) -> None:
            if isinstance(exception, SlowConsumerError):
                log.warning("the task feed dropped NATS messages (slow consumer): live feeds read the log")
                feed.reconnected()
            else:
                log.warning("NATS error at %s: %r", names.url, exception)

        client = await asyncio.wait_for(
            nats.connect(
                names.urls,
                max_reconnect_attempts=-1,
                reconnect_time_wait=RECONNECT_WAIT_S,
                reconnected_cb=reconnected,
                disconnected_cb=disconnected,
                error_cb=error,
            ),
            connect_timeout,
        )
        feed = cls(client, names, store_log, fallback_poll=fallback_poll, idle_unsubscribe=idle_unsubscribe)
        try:
            await feed.start()
        except BaseException:
            await client.close()
            raise
        return feed

    async def start(self) -> None:
        """Start watching the relay; the subscription waits for the first follower."""
        self._watch = asyncio.ensure_future(self._watch_relay())

    @property
    def subscribed(self) -> bool:
        """Whether the feed holds its subscription to every task subject."""
        return self._subscription is not None

    async def close(self) -> None:
        """Stop watching the relay, close the connection."""
        self.closing = True
        for task in (self._watch, self._subscribing, self._covering):
            if task is not None:
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task
        await self._client.close()

    async def _subscribed(self) -> None:
        """Subscribe to every task subject unless the feed is: before a follower reads the log.

        The subscription is made once for all the followers that come meanwhile, in a task of its
        own, so a follower that gives up while it is made leaves none half made. When NATS cannot
        be reached the follower goes on without it: the relay's watch finds nothing heard and
        has every follower read the log (point 5).
        """
        if self._subscription is not None:
            return
        if self._subscribing is None or self._subscribing.done():
            self._subscribing = asyncio.ensure_future(self._subscribe())
        with contextlib.suppress(NatsError, TimeoutError):
            await asyncio.shield(self._subscribing)

    async def _subscribe(self) -> None:
        subscription = await self._client.subscribe(self._names.all_subjects, cb=self._on_message)
        with contextlib.suppress(NatsError, TimeoutError):
            await self._client.flush(FLUSH_TIMEOUT_S)  # the server has it before the log is read
        self._subscription = subscription
        self._covering = asyncio.ensure_future(self._cover())

    async def _cover(self) -> None:
        """Move ``_covered`` to the log's head, read once subscribed (no follower waits for it).

        Nothing before that head waits for the relay: each follower from now on reads the log up
        to its first live message. So the watch's next check does not take what was published
        before the subscription for a stalled relay; should the read fail, it takes it so once,
        and the followers read the log one time more.
        """
        try:
            head = await asyncio.to_thread(self._log.head)
        except Exception as error:  # noqa: BLE001 - see above: one more read of the log at worst
            log.warning("cannot read the log's head (%r) after subscribing", error)
            return
        self._covered = max(self._covered, head)

    async def _unsubscribe_when_idle(self) -> None:
        """Drop the subscription once nobody followed for ``idle_unsubscribe`` seconds."""
        now = time.monotonic()
        if self._idle_since is None:
            self._idle_since = now
        subscription = self._subscription
        if subscription is None or now - self._idle_since < self._idle_unsubscribe:
            return
        self._subscription = None  # before any await: a follower coming now subscribes anew
        with contextlib.suppress(NatsError, TimeoutError):
            await subscription.unsubscribe()

    def reconnected(self) -> None:
        """Make every follower read the log after its last version (messages may be lost)."""
        for pushes in list(self._followers.values()):
            for push in list(pushes):
                push(_RESYNC)

    async def _on_message(self, msg: Msg) -> None:
        """Hand one relay message to the followers of its task; note its position."""
        pushes = self._followers.get(task_token(msg.subject))
        message = None
        if pushes:
            message = parse_message(msg.data)
            if message is None:
                log.warning("unreadable NATS message on %s: reading the log instead", msg.subject)
            for push in list(pushes):
                push(_RESYNC if message is None else message)
        position = position_of(msg, message)
        if position is not None and position > self._heard:
            self._heard = position

    async def _watch_relay(self) -> None:
        """Every ``fallback_poll``: if the relay is behind the log's head of one check before, resync all."""
        previous: int | None = None
        while True:
            await asyncio.sleep(self._fallback_poll)
            if not self._followers:
                previous = None
                await self._unsubscribe_when_idle()
                continue
            self._idle_since = None
            try:
                head = await asyncio.to_thread(self._log.head)
            except Exception as error:  # noqa: BLE001 - the next check tries again; a stream reads on
                log.warning("cannot read the log's head (%r): the task feed checks the relay again", error)
                continue
            if previous is not None and max(self._heard, self._covered) < previous:
                log.debug(
                    "the relay is behind the log (heard %d, head %d): followers read the log",
                    self._heard,
                    previous,
                )
                self._covered = previous
                self.reconnected()
            previous = head

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
        ``contextlib.aclosing``), which also ends the following. With ``max_pending``, a
        follower that lets more live messages than that wait (it does not read: a slow SSE
        client) gets ``FeedOverflowError`` at its next read instead; None lets them queue.
        """
        deadline = None if timeout is None else time.monotonic() + timeout
        inbox = _Inbox(max_pending)
        pending, push = inbox.pending, inbox.push
        key = str(task_id)
        # The follower counts from now, before the subscription is made: the idle watch never
        # drops a subscription made for a follower still on its way.
        self._followers.setdefault(key, set()).add(push)
        self._idle_since = None  # the idle time counts from the last follower's leaving
        order = FeedOrder(self._log.reader(task_id, tenant), after_version)
        try:
            await self._subscribed()
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
                remaining = None
                if deadline is not None:
                    remaining = deadline - time.monotonic()
                    if remaining <= 0:
                        return
                await inbox.wait(remaining)
        finally:
            self._idle_since = None
            pushes = self._followers.get(key)
            if pushes is not None:
                pushes.discard(push)
                if not pushes:
                    del self._followers[key]
