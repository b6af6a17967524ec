"""One subscription to the log for several followers (``projections.shared_log``, ADR 0051).

Followers attach while commits go on, behind and ahead of the shared log; each must see every
event after its own position exactly once, in log order. A follower that stops reading is let go
and reads its way back, without holding the others back. A failure reaches every follower, and
the next follower starts a new subscription.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import psycopg
import pytest
from eventsourcing.persistence import OperationalError

from projections.log_follower import LogFollower
from projections.shared_log import SharedLog
from store.log.application import TaskApplication
from store.log.config import StoreConfig
from store.log.postgres import PostgresRunQueueRecorder
from tests.support.tasks import new_task

WAIT_S = 10.0


def _submit(store: TaskApplication, n: int) -> None:
    for _ in range(n):
        store.save_tasks(new_task(datetime.now(UTC)))


async def _positions(follower: LogFollower, until: int) -> list[int]:
    """What ``follower`` hands over until it reached position ``until``."""
    seen: list[int] = []
    while not seen or seen[-1] < until:
        batch = await follower.next_notifications(WAIT_S)
        assert batch, f"nothing arrived in {WAIT_S}s after {seen[-1:]}"
        seen += [n.id for n in batch]
    return seen


def _listening(store: TaskApplication) -> int:
    """How many connections ``LISTEN`` on the store's channel."""
    recorder = store.recorder
    assert isinstance(recorder, PostgresRunQueueRecorder)
    assert isinstance(store.config, StoreConfig)
    with psycopg.connect(store.config.database_url, autocommit=True) as conn:
        row = conn.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE query = %s",
            (f'LISTEN "{recorder.channel_name}"',),
        ).fetchone()
    assert row is not None
    return int(row[0])


@pytest.fixture
def committing(postgres_store: TaskApplication) -> Iterator[threading.Event]:
    """Commits one task at a time in a thread until the event is set."""
    done = threading.Event()

    def commit() -> None:
        while not done.is_set():
            _submit(postgres_store, 1)

    thread = threading.Thread(target=commit, daemon=True)
    thread.start()
    yield done
    done.set()
    thread.join(WAIT_S)


async def test_followers_attached_while_commits_go_on_each_see_every_event_after_their_position_once(
    postgres_store: TaskApplication, committing: threading.Event
) -> None:
    store = postgres_store
    shared = SharedLog(store.recorder)
    await asyncio.to_thread(_submit, store, 5)
    with LogFollower(store, after=0, shared_log=shared) as first:
        await asyncio.sleep(0.3)
        # Behind the shared log (it began at the log's end when ``first`` attached, 5 or later).
        with LogFollower(store, after=2, shared_log=shared) as behind:
            await asyncio.sleep(0.3)
            ahead_of = (store.recorder.max_notification_id() or 0) + 3
            # Ahead of what the shared log has handed out: it skips up to its position.
            with LogFollower(store, after=ahead_of, limit=7, shared_log=shared) as ahead:
                await asyncio.sleep(0.5)
                committing.set()
                await asyncio.sleep(0.2)
                end = store.recorder.max_notification_id() or 0
                assert end > ahead_of + 5
                assert await _positions(first, end) == list(range(1, end + 1))
                assert await _positions(behind, end) == list(range(3, end + 1))
                assert await _positions(ahead, end) == list(range(ahead_of + 1, end + 1))
            assert _listening(store) == 1


async def test_a_follower_that_stops_reading_is_let_go_and_reads_its_way_back(
    postgres_store: TaskApplication,
) -> None:
    store = postgres_store
    shared = SharedLog(store.recorder)
    with (
        LogFollower(store, after=0, shared_log=shared) as reading,
        LogFollower(store, after=0, limit=2, buffer=3, shared_log=shared) as idle,
    ):
        await asyncio.sleep(0.3)
        for _ in range(20):
            await asyncio.to_thread(_submit, store, 1)
        # The reading follower is not held back by the idle one's full buffer.
        assert await asyncio.wait_for(_positions(reading, 20), WAIT_S) == list(range(1, 21))
        # The idle one was let go and reads the rest itself, in order, each once.
        assert await _positions(idle, 20) == list(range(1, 21))
        # Attached again, it takes live events once more.
        await asyncio.to_thread(_submit, store, 1)
        assert await _positions(idle, 21) == [21]
        assert await _positions(reading, 21) == [21]


def _switches(thread: threading.Thread | None) -> int:
    """How often ``thread`` gave up its core to wait (Linux: its voluntary context switches)."""
    assert thread is not None
    status = Path(f"/proc/self/task/{thread.native_id}/status").read_text()
    return int(
        next(line.split()[1] for line in status.splitlines() if line.startswith("voluntary_ctxt_switches"))
    )


async def test_live_events_wake_the_consumer_and_not_the_followers_reading_thread(
    postgres_store: TaskApplication,
) -> None:
    """Once it takes live events, a follower's reading thread sleeps until it is let go or stops.

    Woken by every arrival and every take, it cost each follower a thread switch and a GIL
    hand-over per event for nothing (ADR 0057).
    """
    store = postgres_store
    shared = SharedLog(store.recorder)
    with LogFollower(store, after=0, shared_log=shared) as follower:
        await asyncio.to_thread(_submit, store, 1)
        assert await _positions(follower, 1) == [1]
        reading = follower._thread  # the thread whose sleep is the point
        before = _switches(reading)
        for position in range(2, 22):
            await asyncio.to_thread(_submit, store, 1)
            assert await _positions(follower, position) == [position]
        assert _switches(reading) - before <= 2


async def test_the_last_follower_to_go_stops_the_subscription_and_the_next_starts_one(
    postgres_store: TaskApplication,
) -> None:
    store = postgres_store
    shared = SharedLog(store.recorder)
    assert not _running(shared)
    with LogFollower(store, after=0, shared_log=shared) as one:
        await asyncio.to_thread(_submit, store, 1)
        assert await _positions(one, 1) == [1]
        assert _running(shared)
    assert not _running(shared)
    await asyncio.to_thread(_submit, store, 1)
    with LogFollower(store, after=1, shared_log=shared) as two:
        await asyncio.to_thread(_submit, store, 1)
        assert await _positions(two, 3) == [2, 3]
        assert _running(shared)


async def test_a_failed_subscription_reaches_every_follower_and_the_next_starts_anew(
    postgres_store: TaskApplication,
) -> None:
    store = postgres_store
    recorder = store.recorder
    assert isinstance(recorder, PostgresRunQueueRecorder)
    assert isinstance(store.config, StoreConfig)
    shared = SharedLog(recorder)
    with (
        LogFollower(store, after=0, shared_log=shared) as one,
        LogFollower(store, after=0, shared_log=shared) as two,
    ):
        await asyncio.sleep(0.3)
        async with await psycopg.AsyncConnection.connect(store.config.database_url, autocommit=True) as conn:
            await conn.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE query = %s",
                (f'LISTEN "{recorder.channel_name}"',),
            )
        for follower in (one, two):
            with pytest.raises(OperationalError, match="server closed the connection"):
                await _until_raised(follower)
        assert not _running(shared)
    await asyncio.to_thread(_submit, store, 2)
    with LogFollower(store, after=0, shared_log=shared) as again:
        assert await _positions(again, 2) == [1, 2]


def _running(shared: SharedLog) -> bool:
    """``shared.running``, read anew (mypy would narrow the property across statements)."""
    return shared.running


async def _until_raised(follower: LogFollower) -> None:
    for _ in range(100):
        assert await follower.next_batch(0.05) == []
