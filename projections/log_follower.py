"""Following the log from asyncio code or a thread, on the library's subscription, in batches.

``LogFollower`` follows the log after a position and hands what arrived over in batches (up to
``limit``), in log order, each event decoded by the application's mapper with its ``Tracking``
(the log position). A consumer that records its position once per batch (the relay, the
projector) so pays one transaction per batch rather than one per event. An asyncio consumer
awaits ``next_batch``; a consumer in a thread of its own (the projector) calls ``take``, which
blocks.

The live events come from a ``SharedLog`` (``projections.shared_log``): ``eventsourcing``'s
subscription to the log (``recorder.subscribe``: a ``LISTEN`` on the events table's channel and
batched ``select_notifications`` in the library's own threads), one for every follower given the
same shared log (``longhaul up`` gives its relay, sequencer and projector one), or a private one.
A thread of the follower's own first reads what lies between its position and the point where it
attached to the shared log (``select_notifications``, in pages of ``limit``), then takes the
live events from there (ADR 0051).

The reading side only collects notifications; decoding happens in ``next_batch``, on the
consumer's side (``next_notifications`` hands them over undecoded, for a consumer that needs only
their position, task and version: the sequencer), and the hand-over is one lock per batch (the
reader wakes a waiting consumer with ``call_soon_threadsafe`` on its loop, no thread in between):
a reading thread busy beside the event loop would make the loop wait for the GIL on every NATS
acknowledgement (ADR 0015). The reading thread waits on
a condition of its own (over the same lock), woken only when it is let go, stops or waits for
room: an arrival wakes the consumer alone (ADR 0057). The buffer is bounded: a
consumer that falls ``buffer`` events behind is let go by the shared log and reads its way back
with its own selects once it has made room, instead of filling memory or holding the others back.
A consumer that needs no event at once asks to gather (``next_notifications`` for the sequencer,
ADR 0046; ``take`` for the projector, ADR 0050): after the first events it keeps taking what
arrives for ``gather_s``, so that several commits make one batch (still at most ``limit``); the
relay's live path does not gather.

A failure of the subscription or of a read (the database gone) ends the follower: ``next_batch``
returns the events read before it, then raises it.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
from collections.abc import Sequence
from typing import Any
from uuid import UUID

from eventsourcing.application import Application
from eventsourcing.persistence import Notification, Tracking

from projections.shared_log import SharedLog

BATCH = 500
"""The most events one ``next_batch`` returns (the library reads 500 a query too)."""
BUFFER = 4 * BATCH
"""The most events read ahead of the consumer."""
_WAIT_S = 0.1

Followed = tuple[Any, Tracking]
"""A domain event of the log and its position."""


class LogFollower:
    """The events after one log position, for asyncio code; a context manager."""

    def __init__(
        self,
        app: Application[UUID],
        *,
        after: int,
        limit: int = BATCH,
        buffer: int = BUFFER,
        shared_log: SharedLog | None = None,
    ) -> None:
        self._app = app
        self._limit = limit
        self._buffer = buffer
        self._log = shared_log
        lock = threading.Lock()
        self._ready = threading.Condition(lock)
        """Notified for a consumer in a thread (``take``): the first events, a full batch, the end."""
        self._changed = threading.Condition(lock)
        """Notified for the reading thread (same lock): let go, the end, the stop, and a take from
        a full buffer (room, if it waits for some). Not ``_ready``: each arrival would wake the
        reading thread for nothing, a thread switch and a GIL hand-over per event for every follower."""
        self._loop: asyncio.AbstractEventLoop | None = None
        self._arrived: asyncio.Event | None = None
        """Set (on the consumer's loop) when the first event arrives in an empty buffer, or the end."""
        self._items: list[Notification] = []
        self._ended: BaseException | None = None
        self._stopping = False
        self._position = after
        """Everything up to here is in ``_items`` or was taken from it."""
        self._live = False
        """Whether the shared log's events go straight to ``_items`` (else to ``_early``)."""
        self._early: list[Notification] = []
        """The shared log's events that arrived while the follower read its way up to them."""
        self._let_go = False
        """The shared log let the follower go: it fell ``buffer`` behind."""
        self._thread: threading.Thread | None = None

    def __enter__(self) -> LogFollower:
        if self._log is None:
            self._log = SharedLog(self._app.recorder)
        mark = self._log.attach(self)  # attached before ``__enter__`` returns: nothing is missed
        self._thread = threading.Thread(target=self._follow, args=(mark,), name="log-follower", daemon=True)
        self._thread.start()
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
            self._changed.notify_all()
        if self._thread is not None:
            self._thread.join()

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
            full = len(self._items) >= self._buffer  # the reading thread may wait for room
            taken, self._items = self._items[:most], self._items[most:]
            if full:
                self._changed.notify_all()
            return taken

    async def _wait(self, wait_s: float, stop: asyncio.Event | None, most: int) -> list[Notification]:
        """What arrives within ``wait_s`` (``most`` at most), or nothing.

        Empty once the time is up, ``stop`` is set or the subscription ended. A wake-up with nothing
        to take (its events taken already by a take that ran before the loop ran the reader's
        ``set``) waits again for the time that is left.
        """
        loop = asyncio.get_running_loop()
        if self._arrived is None:
            with self._ready:
                self._loop, self._arrived = loop, asyncio.Event()
        until = loop.time() + wait_s
        while True:
            self._arrived.clear()
            taken = self._take(most)  # what arrived before the reader knew of the loop, or since the clear
            if taken is not None:
                return taken
            left = until - loop.time()
            if left <= 0:
                return []
            waits = [asyncio.ensure_future(self._arrived.wait())]
            if stop is not None:
                waits.append(asyncio.ensure_future(stop.wait()))
            _, pending = await asyncio.wait(waits, timeout=left, return_when=asyncio.FIRST_COMPLETED)
            for waiting in pending:
                waiting.cancel()
            if stop is not None and stop.is_set():
                return []

    def _signal(self) -> None:
        """Wake the consumer waiting on its loop (called by the reader, holding ``_ready``)."""
        if self._loop is not None and self._arrived is not None:
            with contextlib.suppress(RuntimeError):  # the loop is closed: nobody waits any more
                self._loop.call_soon_threadsafe(self._arrived.set)

    def _follow(self, mark: int) -> None:
        """Follow the shared log from ``mark`` (``_until_let_go``).

        Attached again each time the shared log lets the follower go, until it stops or fails.
        """
        log = self._log
        assert log is not None
        try:
            while True:
                try:
                    let_go = self._until_let_go(mark)
                finally:
                    log.detach(self)
                if not let_go:
                    return
                mark = log.attach(self)
        except Exception as error:  # noqa: BLE001 - handed to the consumer, which raises it
            self.end(error)

    def _until_let_go(self, mark: int) -> bool:
        """Read up to ``mark`` (where the shared log's events begin), then take its events.

        ``True`` once the shared log let the follower go (and there is room again), ``False``
        once the follower stops or ends.
        """
        self._catch_up(mark)
        with self._ready:
            if not self._let_go:
                self._append([n for n in self._early if n.id > self._position])
                self._live, self._early = True, []
            while not (self._let_go or self._stopping or self._ended is not None):
                self._changed.wait()
            self._wait_for_room()  # room first, or it would be let go again at once
            if self._stopping or self._ended is not None:
                return False
            self._live, self._early, self._let_go = False, [], False
            return True

    def _catch_up(self, mark: int) -> None:
        """Read the log from ``_position`` up to ``mark`` (where the shared log's events begin)."""
        recorder = self._app.recorder
        while self._position < mark:
            page = recorder.select_notifications(
                start=self._position, limit=self._limit, stop=mark, inclusive_of_start=False
            )
            with self._ready:
                self._wait_for_room()
                if self._stopping:
                    return
                self._append(page)
                if len(page) < self._limit:  # nothing more up to ``mark`` (a gap at most)
                    self._position = mark

    def _wait_for_room(self) -> None:
        """Wait (holding the lock) until the buffer has room or the follower stops.

        A take from a full buffer wakes it (``_take``); no other take does.
        """
        while len(self._items) >= self._buffer and not self._stopping:
            self._changed.wait(_WAIT_S)

    def _append(self, notifications: Sequence[Notification]) -> None:
        """Put ``notifications`` (after ``_position``, in log order) in the buffer; wake the consumer."""
        if not notifications:
            return
        was = len(self._items)
        self._items.extend(notifications)
        self._position = notifications[-1].id
        if was == 0:  # the consumer may be waiting for the first
            self._signal()
            self._ready.notify_all()
        elif was < self._limit <= len(self._items):  # or gathering up to a full batch
            self._ready.notify_all()

    def arrive(self, notification: Notification) -> bool:
        """The shared log's next event (``Tap``); ``False`` once the follower is ``buffer`` behind."""
        with self._ready:
            if self._stopping or self._let_go:
                return False
            if not self._live:
                if len(self._early) >= self._buffer:
                    self._let_go = True
                    self._changed.notify_all()
                    return False
                self._early.append(notification)
            elif notification.id > self._position:
                if len(self._items) >= self._buffer:
                    self._let_go = True
                    self._changed.notify_all()
                    return False
                self._append([notification])
            return True

    def end(self, error: BaseException) -> None:
        """The follower ends with ``error`` (``Tap``): the consumer raises it once the buffer is empty."""
        with self._ready:
            if self._ended is None:
                self._ended = error
            self._signal()
            self._ready.notify_all()
            self._changed.notify_all()
