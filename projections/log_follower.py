"""Following the log from asyncio code or a thread, on the library's subscription, in batches.

``LogFollower`` reads ``eventsourcing``'s subscription to the log (``recorder.subscribe(gt=...)``:
a ``LISTEN`` on the events table's channel and batched ``select_notifications`` in the library's
own threads) in a thread of its own, and hands what arrived over in batches (up to ``limit``), in
log order, each event decoded by the application's mapper with its ``Tracking`` (the log
position). A consumer that records its position once per batch (the relay, the projector) so
pays one transaction per batch rather than one per event. An asyncio consumer awaits
``next_batch``; a consumer in a thread of its own (the projector) calls ``take``, which blocks.

The reading thread only collects notifications; decoding happens in ``next_batch``, on the
consumer's side (``next_notifications`` hands them over undecoded, for a consumer that needs only
their position, task and version: the sequencer), and the hand-over is one lock per batch (the
reader wakes a waiting consumer with ``call_soon_threadsafe`` on its loop, no thread in between):
a reading thread busy beside the event loop would make the loop wait for the GIL on every NATS
acknowledgement (measured: ``bench/relay_throughput.py``, ADR 0015). The buffer is bounded, so a
slow consumer holds the reading back instead of filling memory. A consumer that needs no event at
once (the sequencer, ADR 0046) asks ``next_notifications`` to gather: after the first events it
keeps taking what arrives for ``gather_s``, so that several commits make one batch (still at most
``limit``); the relay's live path does not gather.

The library's subscription reads the log when a NOTIFY arrives, and only then. Its ``LISTEN`` is
sent by a thread started after its first read, so a commit between the two is never announced to
it (PostgreSQL's rule is the other order: ``LISTEN``, commit, then read), and a NOTIFY lost on the
way is never made up (eventsourcing issue #305): on a quiet log those events would wait for the
next commit, for ever if none comes. So when no event has arrived for ``POLL_S`` the follower
makes the subscription read the log anyway (one indexed select a second while idle, none while
events arrive).

A failure of the subscription (the database gone) ends the follower: ``next_batch`` returns the
events read before it, then raises it.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
from typing import Any
from uuid import UUID

from eventsourcing.application import Application
from eventsourcing.persistence import ListenNotifySubscription, Notification, Subscription, Tracking

BATCH = 500
"""The most events one ``next_batch`` returns (the library reads 500 a query too)."""
BUFFER = 4 * BATCH
"""The most events read ahead of the consumer."""
_WAIT_S = 0.1
POLL_S = 1.0
"""How long the follower waits for an event before it makes the subscription read the log anyway."""

Followed = tuple[Any, Tracking]
"""A domain event of the log and its position."""


class LogFollower:
    """The events after one log position, for asyncio code; a context manager."""

    def __init__(
        self, app: Application[UUID], *, after: int, limit: int = BATCH, buffer: int = BUFFER
    ) -> None:
        self._app = app
        self._after = after
        self._limit = limit
        self._buffer = buffer
        self._ready = threading.Condition()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._arrived: asyncio.Event | None = None
        """Set (on the consumer's loop) when the first event arrives in an empty buffer, or the end."""
        self._items: list[Notification] = []
        self._ended: BaseException | None = None
        self._stopping = False
        self._subscription: Subscription[Any] | None = None
        self._thread: threading.Thread | None = None
        self._poller: threading.Thread | None = None
        self._arrivals = 0
        """How many events the reader has taken from the subscription (the poller watches it)."""

    def __enter__(self) -> LogFollower:
        self._subscription = self._app.recorder.subscribe(gt=self._after)
        self._subscription.__enter__()
        self._thread = threading.Thread(target=self._read, name="log-follower", daemon=True)
        self._thread.start()
        if isinstance(self._subscription, ListenNotifySubscription):
            self._poller = threading.Thread(target=self._poll, name="log-follower-poll", daemon=True)
            self._poller.start()
        return self

    async def __aenter__(self) -> LogFollower:
        """``__enter__`` off the event loop (it starts threads and takes a pooled connection)."""
        return await asyncio.to_thread(self.__enter__)

    async def __aexit__(self, *exc: object) -> None:
        """``__exit__`` off the event loop (it joins the reading threads)."""
        await asyncio.to_thread(self.__exit__, *exc)

    def __exit__(self, *exc: object) -> None:
        with self._ready:
            self._stopping = True
            self._ready.notify_all()
        if self._subscription is not None:
            self._subscription.stop()
        if self._thread is not None:
            self._thread.join()
        if self._poller is not None:
            self._poller.join()
        if self._subscription is not None:
            self._subscription.__exit__(*exc)

    async def next_batch(self, wait_s: float, stop: asyncio.Event | None = None) -> list[Followed]:
        """The events that arrived (at most ``limit``), waiting up to ``wait_s`` for the first.

        Returns an empty list if nothing arrived in time or ``stop`` was set; raises the
        subscription's failure once the events read before it were returned.
        """
        return self._decoded(await self.next_notifications(wait_s, stop))

    def _decoded(self, taken: list[Notification]) -> list[Followed]:
        """Each stored event decoded by the application's mapper, with its position."""
        name, mapper = self._app.name, self._app.mapper
        return [(mapper.to_domain_event(n), Tracking(name, n.id)) for n in taken]

    def take(self, wait_s: float, *, gather_s: float = 0.0) -> list[Followed]:
        """``next_batch`` for a consumer in a thread: blocks up to ``wait_s`` for the first event.

        With ``gather_s``, once the first event is there it waits until ``gather_s`` has passed or
        ``limit`` events are there, so that many commits come as one batch. Returns an empty list
        if nothing arrived in time; raises the subscription's failure once the events read before
        it were returned.
        """
        with self._ready:
            if not self._items and self._ended is None:
                self._ready.wait(wait_s)
            if self._items and gather_s > 0:
                until = time.monotonic() + gather_s
                while len(self._items) < self._limit and self._ended is None and not self._stopping:
                    left = until - time.monotonic()
                    if left <= 0:
                        break
                    self._ready.wait(left)
        taken = self._take(self._limit)
        if taken == []:  # nothing is left and the subscription ended
            with self._ready:
                assert self._ended is not None
                raise self._ended
        return self._decoded(taken or [])

    async def next_notifications(
        self, wait_s: float, stop: asyncio.Event | None = None, *, gather_s: float = 0.0
    ) -> list[Notification]:
        """``next_batch`` without decoding: the stored events.

        For a consumer that needs no more than their position, task and version (the sequencer).
        With ``gather_s``, once the first events are taken it keeps taking what arrives until
        ``gather_s`` has passed, ``limit`` events are taken or ``stop`` is set, so that many
        commits come as one batch; what it took is returned then, whatever ends the gathering
        (the subscription's failure is raised on the next call).
        """
        taken = self._take(self._limit)
        if taken is None:
            taken = await self._wait(wait_s, stop, self._limit)
        if taken and gather_s > 0:
            await self._gather(taken, gather_s, stop)
        if not taken:
            with self._ready:
                if self._ended is not None and not self._items:
                    raise self._ended
        return taken

    async def _gather(self, taken: list[Notification], gather_s: float, stop: asyncio.Event | None) -> None:
        """Add to ``taken`` what arrives within ``gather_s``, up to ``limit`` in all."""
        loop = asyncio.get_running_loop()
        until = loop.time() + gather_s
        while len(taken) < self._limit and not (stop is not None and stop.is_set()):
            room = self._limit - len(taken)
            more = self._take(room)
            if more is None:
                left = until - loop.time()
                if left <= 0:
                    return
                more = await self._wait(left, stop, room)
            if not more:  # the time is up, ``stop`` was set, or the subscription ended
                return
            taken.extend(more)

    def _take(self, most: int) -> list[Notification] | None:
        """What arrived (``most`` at most), without waiting; ``None`` if nothing did (the reading goes on)."""
        with self._ready:
            if not self._items:
                return [] if self._ended is not None else None
            taken, self._items = self._items[:most], self._items[most:]
            self._ready.notify_all()  # the reader may be waiting for room
            return taken

    async def _wait(self, wait_s: float, stop: asyncio.Event | None, most: int) -> list[Notification]:
        if self._arrived is None:
            with self._ready:
                self._loop, self._arrived = asyncio.get_running_loop(), asyncio.Event()
        self._arrived.clear()
        taken = self._take(most)  # what arrived before the reader knew of the loop, or since the clear
        if taken is not None:
            return taken
        waits = [asyncio.ensure_future(self._arrived.wait())]
        if stop is not None:
            waits.append(asyncio.ensure_future(stop.wait()))
        _, pending = await asyncio.wait(waits, timeout=wait_s, return_when=asyncio.FIRST_COMPLETED)
        for waiting in pending:
            waiting.cancel()
        if stop is not None and stop.is_set():
            return []
        return self._take(most) or []

    def _signal(self) -> None:
        """Wake the consumer waiting on its loop (called by the reader, holding ``_ready``)."""
        if self._loop is not None and self._arrived is not None:
            with contextlib.suppress(RuntimeError):  # the loop is closed: nobody waits any more
                self._loop.call_soon_threadsafe(self._arrived.set)

    def _poll(self) -> None:
        """Every ``POLL_S`` in which no event arrived, make the subscription read the log.

        It reads when its "notified" flag is set (by its ``LISTEN`` thread, on a NOTIFY); setting
        the flag is the one way in, and it is the library's own (``ListenNotifySubscription``).
        """
        subscription = self._subscription
        assert isinstance(subscription, ListenNotifySubscription)
        seen, due = self._arrivals, time.monotonic() + POLL_S
        with self._ready:
            while not self._stopping and self._ended is None:
                left = due - time.monotonic()
                if left > 0:
                    self._ready.wait(left)
                    continue
                if self._arrivals == seen:
                    subscription._has_been_notified.set()
                seen, due = self._arrivals, time.monotonic() + POLL_S

    def _read(self) -> None:
        assert self._subscription is not None
        ended: BaseException
        try:
            for notification in self._subscription:
                with self._ready:
                    while len(self._items) >= self._buffer and not self._stopping:
                        self._ready.wait(_WAIT_S)
                    if self._stopping:
                        return
                    self._items.append(notification)
                    self._arrivals += 1
                    if len(self._items) == 1:  # the consumer may be waiting for the first
                        self._signal()
                        self._ready.notify_all()
                    elif len(self._items) == self._limit:  # or gathering (``take``) up to a full batch
                        self._ready.notify_all()
            ended = RuntimeError("the subscription to the log ended")
        except Exception as error:  # noqa: BLE001 - handed to the consumer, which raises it
            ended = error
        with self._ready:
            self._ended = ended
            self._signal()
            self._ready.notify_all()
