"""One subscription to the log for every ``LogFollower`` of a process (ADR 0051).

The library's subscription to the log (``recorder.subscribe``) holds a connection in ``LISTEN``
and reads the log after every NOTIFY: every commit cost each follower of a process (the relay,
the sequencer, the projector in ``longhaul up``) one select and one pooled connection's round
trip. A ``SharedLog`` is one such subscription, started at the log's end, whose reading thread
hands each event to every follower attached to it, in log order. A follower reads what lies
between its own position and the point it attached at (``attach`` returns it) with its own
selects, then takes the live events; a follower that falls a buffer behind is let go
(``Tap.arrive`` says so) and catches up with its own selects again, so a slow one holds no other
back.

The subscription reads the log when a NOTIFY arrives, and only then. Its ``LISTEN`` is sent by a
thread started after its first read, so a commit between the two is never announced to it
(PostgreSQL's rule is the other order: ``LISTEN``, commit, then read), and a NOTIFY lost on the
way is never made up (eventsourcing issue #305). So when no event has arrived for ``POLL_S`` the
shared log makes the subscription read the log anyway (ADR 0049; one indexed select a second
while idle, none while events arrive), sooner in the first second after it starts.

A failure of the subscription (the database gone) is handed to every attached follower
(``Tap.end``), and the next ``attach`` starts a new subscription.
"""

from __future__ import annotations

import threading
import time
from typing import Any, Protocol

from eventsourcing.persistence import (
    ApplicationRecorder,
    ListenNotifySubscription,
    Notification,
    Subscription,
)

POLL_S = 1.0
"""How long the shared log waits for an event before it makes the subscription read the log anyway."""
FIRST_POLL_S = 0.1
"""The first such wait after the subscription starts, doubled each time up to ``POLL_S``: its
``LISTEN`` may not be in place yet, and the first commits are the ones its start would miss."""


class Tap(Protocol):
    """A follower attached to a ``SharedLog``."""

    def arrive(self, notification: Notification) -> bool:
        """Take the next event (called in log order, holding the shared log's lock).

        ``False`` to be let go (it fell behind): it gets nothing more until it attaches again.
        """

    def end(self, error: BaseException) -> None:
        """The subscription failed: nothing more will arrive."""


class SharedLog:
    """One subscription to ``recorder``'s log, read by every follower attached to it."""

    def __init__(self, recorder: ApplicationRecorder) -> None:
        self.recorder = recorder
        self._lock = threading.Condition()
        self._taps: set[Tap] = set()
        self._subscription: Subscription[Any] | None = None
        self._delivered = 0
        """The position of the last event handed to the taps (where the subscription started, before any)."""
        self._arrivals = 0

    @property
    def running(self) -> bool:
        """Whether a subscription runs (some follower is attached, and it has not failed)."""
        with self._lock:
            return self._subscription is not None

    def attach(self, tap: Tap) -> int:
        """From now on hand ``tap`` every event after the returned position.

        Starts the subscription (at the log's end) if none runs. The caller reads what lies
        between its own position and the returned one itself.
        """
        with self._lock:
            if self._subscription is None:
                self._start()
            self._taps.add(tap)
            return self._delivered

    def detach(self, tap: Tap) -> None:
        """Hand ``tap`` nothing more; the last follower to go stops the subscription."""
        with self._lock:
            self._taps.discard(tap)
            if self._taps or self._subscription is None:
                return
            subscription, self._subscription = self._subscription, None
            self._lock.notify_all()
        subscription.stop()
        subscription.__exit__(None, None, None)

    def _start(self) -> None:
        """A new subscription after the log's end, its reading and polling threads (holding the lock)."""
        self._delivered = self.recorder.max_notification_id() or 0
        subscription = self.recorder.subscribe(gt=self._delivered)
        subscription.__enter__()
        self._subscription = subscription
        threading.Thread(target=self._read, args=(subscription,), name="shared-log", daemon=True).start()
        if isinstance(subscription, ListenNotifySubscription):
            threading.Thread(
                target=self._poll, args=(subscription,), name="shared-log-poll", daemon=True
            ).start()

    def _read(self, subscription: Subscription[Any]) -> None:
        ended: BaseException
        try:
            for notification in subscription:
                with self._lock:
                    if subscription is not self._subscription:
                        return  # stopped by ``detach``
                    for tap in list(self._taps):
                        if not tap.arrive(notification):
                            self._taps.discard(tap)
                    self._delivered = notification.id
                    self._arrivals += 1
            ended = RuntimeError("the subscription to the log ended")
        except Exception as error:  # noqa: BLE001 - handed to every follower, which raises it
            ended = error
        with self._lock:
            if subscription is not self._subscription:
                return
            self._subscription = None
            taps, self._taps = self._taps, set()
            self._lock.notify_all()
        for tap in taps:
            tap.end(ended)
        subscription.__exit__(None, None, None)

    def _poll(self, subscription: ListenNotifySubscription[Any]) -> None:
        """Every ``POLL_S`` in which no event arrived, make ``subscription`` read the log.

        It reads when its "notified" flag is set (by its ``LISTEN`` thread, on a NOTIFY); setting
        the flag is the one way in, and it is the library's own (``ListenNotifySubscription``).
        """
        every = FIRST_POLL_S
        with self._lock:
            seen, due = self._arrivals, time.monotonic() + every
            while subscription is self._subscription:
                left = due - time.monotonic()
                if left > 0:
                    self._lock.wait(left)
                    continue
                if self._arrivals == seen:
                    subscription._has_been_notified.set()
                every = min(2 * every, POLL_S)
                seen, due = self._arrivals, time.monotonic() + every
