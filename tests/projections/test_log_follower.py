"""The relay's way to follow the log: the library's subscription, handed to asyncio in batches
(gathered over a window for the sequencer)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime

import psycopg
import pytest
from eventsourcing.persistence import Notification, OperationalError

from projections.log_follower import LogFollower
from projections.shared_log import POLL_S
from store.log.application import TaskApplication
from store.log.config import StoreConfig
from store.log.postgres import PostgresRunQueueRecorder
from tests.support.tasks import new_task

WAIT_S = 5.0


def _submit(store: TaskApplication, n: int) -> None:
    for _ in range(n):
        store.save_tasks(new_task(datetime.now(UTC)))


async def test_batches_come_in_log_order_at_most_limit_long_after_the_position(
    postgres_store: TaskApplication,
) -> None:
    store = postgres_store
    _submit(store, 7)
    positions: list[int] = []
    with LogFollower(store, after=2, limit=3) as follower:
        while len(positions) < 5:
            batch = await follower.next_batch(WAIT_S)
            assert 0 < len(batch) <= 3
            positions += [tracking.notification_id for _, tracking in batch]
        assert positions == [3, 4, 5, 6, 7]
        assert all(event.originator_version == 1 for event, _ in batch)
        # Idle: an empty batch after the wait, or at once when stopping.
        assert await follower.next_batch(0.05) == []
        stop = asyncio.Event()
        stop.set()
        assert await follower.next_batch(WAIT_S, stop) == []
        # A later commit wakes it.
        waiting = asyncio.ensure_future(follower.next_batch(WAIT_S))
        await asyncio.to_thread(_submit, store, 1)
        assert [t.notification_id for _, t in await waiting] == [8]


async def test_undecoded_batches_are_the_stored_events_of_the_same_positions(
    postgres_store: TaskApplication,
) -> None:
    _submit(postgres_store, 4)
    with LogFollower(postgres_store, after=1, limit=2) as follower:
        found: list[Notification] = []
        while len(found) < 3:
            batch = await follower.next_notifications(WAIT_S)
            assert 0 < len(batch) <= 2
            found += batch
    assert [n.id for n in found] == [2, 3, 4]
    decoded = [postgres_store.mapper.to_domain_event(n) for n in found]
    assert [(e.originator_id, e.originator_version) for e in decoded] == [
        (n.originator_id, n.originator_version) for n in found
    ]


async def _submit_spaced(store: TaskApplication, n: int, pause_s: float) -> None:
    """``n`` commits of one task each, ``pause_s`` apart."""
    for _ in range(n):
        await asyncio.to_thread(_submit, store, 1)
        await asyncio.sleep(pause_s)


async def _gathered(
    store: TaskApplication, n: int, pause_s: float, gather: Callable[[], Awaitable[list[int]]]
) -> tuple[list[int], float]:
    """The positions ``gather`` returns while ``n`` commits come ``pause_s`` apart, and how long it took."""
    loop = asyncio.get_running_loop()
    committing = asyncio.ensure_future(_submit_spaced(store, n, pause_s))
    began = loop.time()
    positions = await gather()
    took = loop.time() - began
    await committing
    return positions, took


async def test_a_gather_takes_the_commits_that_arrive_within_it_as_one_batch(
    postgres_store: TaskApplication,
) -> None:
    store = postgres_store
    with LogFollower(store, after=0, limit=4) as follower:

        async def gather(gather_s: float) -> list[int]:
            return [n.id for n in await follower.next_notifications(WAIT_S, gather_s=gather_s)]

        # Without a gather, commits 0.3 s apart come one batch each.
        committing = asyncio.ensure_future(_submit_spaced(store, 2, 0.3))
        assert [n.id for n in await follower.next_notifications(WAIT_S)] == [1]
        assert [n.id for n in await follower.next_notifications(WAIT_S)] == [2]
        await committing
        # With one, three commits 0.1 s apart are one batch, returned when the gather time is up.
        batch, took = await _gathered(store, 3, 0.1, lambda: gather(1.0))
        assert batch == [3, 4, 5]
        assert took >= 1.0
        # The batch is still at most ``limit``: a gather ends once it holds that many.
        batch, took = await _gathered(store, 6, 0.05, lambda: gather(WAIT_S))
        assert batch == [6, 7, 8, 9]
        assert took < WAIT_S
        assert [n.id for n in await follower.next_notifications(WAIT_S, gather_s=0.3)] == [10, 11]
        # ``stop`` ends a gather: what it took is returned, and the next commit is not lost.
        stop = asyncio.Event()
        gathering = asyncio.ensure_future(follower.next_notifications(WAIT_S, stop, gather_s=60))
        await asyncio.to_thread(_submit, store, 1)
        await asyncio.sleep(0.5)
        stop.set()
        assert [n.id for n in await asyncio.wait_for(gathering, WAIT_S)] == [12]
        await asyncio.to_thread(_submit, store, 1)
        assert [n.id for n in await follower.next_notifications(WAIT_S)] == [13]


async def test_a_wake_up_for_events_already_taken_does_not_end_a_gather(
    postgres_store: TaskApplication,
) -> None:
    """The reader wakes the consumer's loop for the first event it buffers; if the consumer took
    that event before its loop ran the wake-up, the wake-up comes during the gather, for nothing.
    The gather still lasts its time (a stale wake-up once ended it at once)."""
    store = postgres_store
    with LogFollower(store, after=0, limit=10) as follower:
        assert await follower.next_notifications(0.05) == []  # the consumer's loop is known
        # The commit and the wait for the reader to buffer it both hold the loop, so that the
        # reader's wake-up waits in the loop until the gather below. The buffer itself is read,
        # so that the case is made on a slow machine too.
        _submit(store, 1)
        deadline = time.monotonic() + WAIT_S
        while not follower._items and time.monotonic() < deadline:
            time.sleep(0.01)  # noqa: ASYNC251 - holding the loop is the point
        assert follower._items, "the reader did not buffer the commit"
        loop = asyncio.get_running_loop()
        began = loop.time()
        batch = await follower.next_notifications(WAIT_S, gather_s=0.5)
        took = loop.time() - began
    assert [n.id for n in batch] == [1]
    assert took >= 0.5


async def test_take_gathers_the_commits_that_arrive_within_it_up_to_limit(
    postgres_store: TaskApplication,
) -> None:
    store = postgres_store
    with LogFollower(store, after=0, limit=4) as follower:

        async def take(gather_s: float) -> list[int]:
            taken = await asyncio.to_thread(follower.take, WAIT_S, gather_s=gather_s)
            return [t.notification_id for _, t in taken]

        # Three commits 0.1 s apart are one batch, returned when the gather time is up.
        batch, took = await _gathered(store, 3, 0.1, lambda: take(1.0))
        assert batch == [1, 2, 3]
        assert took >= 1.0
        # A full batch ends the gather at once.
        batch, took = await _gathered(store, 6, 0.05, lambda: take(WAIT_S))
        assert batch == [4, 5, 6, 7]
        assert took < WAIT_S
        # Without a gather, what is there is taken at once (the last two, in one batch or two).
        rest: list[int] = []
        while len(rest) < 2:
            rest += [t.notification_id for _, t in await asyncio.to_thread(follower.take, WAIT_S)]
        assert rest == [8, 9]


async def test_a_commit_whose_notify_never_came_arrives_within_the_poll(
    postgres_store: TaskApplication, store_config: StoreConfig
) -> None:
    """A commit the subscription was not told of still arrives, by ``take`` and by ``next_batch``.

    Its NOTIFY goes to a channel nobody listens on: what happens to a commit made between the
    library subscription's first read and its ``LISTEN``, or to a NOTIFY lost on the way.
    """
    silent = TaskApplication(store_config)
    try:
        recorder = silent.recorder
        assert isinstance(recorder, PostgresRunQueueRecorder)
        recorder.channel_name = "longhaul-test-nobody-listens"
        with LogFollower(postgres_store, after=0) as follower:
            assert await follower.next_batch(0.2) == []
            await asyncio.to_thread(_submit, silent, 1)
            taken = await asyncio.to_thread(follower.take, 3 * POLL_S)
            assert [t.notification_id for _, t in taken] == [1]
            await asyncio.to_thread(_submit, silent, 1)
            batch = await follower.next_batch(3 * POLL_S)
            assert [t.notification_id for _, t in batch] == [2]
    finally:
        silent.close()


async def test_a_failed_subscription_is_raised_by_next_batch(
    postgres_store: TaskApplication,
) -> None:
    store = postgres_store
    _submit(store, 2)
    recorder = store.recorder
    assert isinstance(recorder, PostgresRunQueueRecorder)
    assert isinstance(store.config, StoreConfig)
    with LogFollower(store, after=0) as follower:
        first = await follower.next_batch(WAIT_S)
        while len(first) < 2:
            first += await follower.next_batch(WAIT_S)
        async with await psycopg.AsyncConnection.connect(store.config.database_url, autocommit=True) as conn:
            await conn.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE query = %s",
                (f'LISTEN "{recorder.channel_name}"',),
            )
        with pytest.raises(OperationalError, match="server closed the connection"):
            await _until_raised(follower)


async def _until_raised(follower: LogFollower) -> None:
    for _ in range(100):
        assert await follower.next_batch(0.05) == []
