"""The task feed on real NATS and PostgreSQL: live messages first, the log only for what they lack.

The relay's part is played here by publishing each committed event's message as the relay does
(``event_message`` of the notification, on the event's subject), so each test decides what NATS
brings: everything, nothing, a gap, a reference, or nothing while the server is down.
"""

from __future__ import annotations

import asyncio
import collections
import json
import time
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from typing import Any

import nats
import pytest
from nats.aio.client import Client

from api.task_feed import StoreLog, TaskFeed
from domain.task import Task
from store.log.application import TaskApplication
from store.public_form.event_json import dumps, reference_message
from store.public_form.subjects import NatsNames
from tests.support.nats_servers import NatsServer
from tests.support.processes import until
from tests.support.tasks import new_task
from workers.relay import Relay

JSON = dict[str, Any]

pytestmark = pytest.mark.postgres

SLOW_POLL_S = 30.0
"""A fallback poll so slow that a test finishing sooner shows it was not the poll."""


class CountingLog(StoreLog):
    """The store's log, counting reads."""

    def __init__(self, store: TaskApplication) -> None:
        super().__init__(store)
        self.reads: list[tuple[int, int | None]] = []

    def read(self, task_id: Any, tenant: str, after: int, up_to: int | None, limit: int = 500) -> list[JSON]:
        self.reads.append((after, up_to))
        return super().read(task_id, tenant, after, up_to, limit)


def _names(nats_url: str, nats_names: tuple[str, str]) -> NatsNames:
    return NatsNames(url=nats_url, stream=nats_names[0], subject_prefix=nats_names[1])


@pytest.fixture
async def publisher(nats_url: str) -> AsyncIterator[Client]:
    """A plain client that publishes what the relay would."""
    client = await nats.connect(nats_url)
    yield client
    await client.close()


def _submitted(store: TaskApplication) -> Task:
    task = new_task(datetime.now(UTC))
    store.save_tasks(task)
    return task


def _progress(store: TaskApplication, task: Task, count: int) -> None:
    """Commit ``count`` events to ``task`` (a grant first if it has no lease)."""
    now = datetime.now(UTC)
    if task.lease_owner is None:
        task.grant_lease(worker="w", now=now, until=now + timedelta(minutes=5))
        count -= 1
    for i in range(count):
        task.report_progress(epoch=task.lease_epoch, now=now, message={"parts": [{"text": f"p{i}"}]})
    store.save_tasks(task)


async def _publish(client: Client, names: NatsNames, log: StoreLog, task: Task, *versions: int) -> None:
    for message in StoreLog.read(log, task.id, task.tenant, 0, None):
        if message["version"] in versions:
            subject = names.subject(task.tenant, task.id, message["type"])
            await client.publish(subject, dumps(message).encode())
    await client.flush()


async def _take(events: AsyncIterator[JSON], count: int, timeout: float = 10.0) -> list[JSON]:  # noqa: ASYNC109
    async def take() -> list[JSON]:
        return [await anext(events) for _ in range(count)]

    return await asyncio.wait_for(take(), timeout)


async def test_live_messages_are_given_as_they_came_and_the_log_is_read_once(
    store: TaskApplication, publisher: Client, nats_url: str, nats_names: tuple[str, str]
) -> None:
    names = _names(nats_url, nats_names)
    log = CountingLog(store)
    feed = await TaskFeed.connect(names, log, fallback_poll=SLOW_POLL_S)
    task = _submitted(store)
    events = feed.follow(task.id, task.tenant, task.version)
    try:
        first = asyncio.ensure_future(_take(events, 3))
        await asyncio.sleep(0.2)  # subscribed and caught up: nothing newer in the log yet
        _progress(store, task, 3)
        await _publish(publisher, names, log, task, 2, 3, 4)
        given = await first
    finally:
        await events.aclose()
        await feed.close()

    assert [m["version"] for m in given] == [2, 3, 4]
    assert log.reads == [(1, None)]  # the one catch-up after subscribing: no read per live message
    assert given == log.read(task.id, task.tenant, 1, None)  # the message form, positions and all


async def test_catches_up_from_the_log_on_what_is_older_than_the_first_live_message(
    store: TaskApplication, publisher: Client, nats_url: str, nats_names: tuple[str, str]
) -> None:
    names = _names(nats_url, nats_names)
    log = CountingLog(store)
    feed = await TaskFeed.connect(names, log, fallback_poll=SLOW_POLL_S)
    task = _submitted(store)
    _progress(store, task, 4)  # versions 2..5 committed before anyone follows: never published

    events = feed.follow(task.id, task.tenant, 0)
    try:
        caught_up = await _take(events, 5)
        _progress(store, task, 2)
        await _publish(publisher, names, log, task, 6, 7)
        live = await _take(events, 2)
    finally:
        await events.aclose()
        await feed.close()

    assert [m["version"] for m in caught_up + live] == [1, 2, 3, 4, 5, 6, 7]
    assert log.reads[0] == (0, None)


async def test_a_gap_and_a_reference_are_filled_from_the_log(
    store: TaskApplication, publisher: Client, nats_url: str, nats_names: tuple[str, str]
) -> None:
    names = _names(nats_url, nats_names)
    log = CountingLog(store)
    feed = await TaskFeed.connect(names, log, fallback_poll=SLOW_POLL_S)
    task = _submitted(store)
    events = feed.follow(task.id, task.tenant, task.version)
    try:
        waiting = asyncio.ensure_future(_take(events, 5))
        await asyncio.sleep(0.2)
        _progress(store, task, 5)  # versions 2..6
        full = {m["version"]: m for m in log.read(task.id, task.tenant, 0, None)}
        # 2 arrives, 3 is lost, 4 arrives, 5 comes as a reference, 4 again (a republish), 6.
        await _publish(publisher, names, log, task, 2, 4)
        stored = store.recorder.select_events(task.id, gt=4, lte=5)
        reference = reference_message(
            full[5]["position"], task.tenant, store.mapper.to_domain_event(stored[0]), reason="too big"
        )
        await publisher.publish(
            names.subject(task.tenant, task.id, "ProgressReported"), dumps(reference).encode()
        )
        await _publish(publisher, names, log, task, 4, 6)
        given = await waiting
    finally:
        await events.aclose()
        await feed.close()

    assert given == [full[v] for v in (2, 3, 4, 5, 6)]
    assert (2, 4) in log.reads  # the gap: 3 (and 4, which came live)
    assert (4, 5) in log.reads  # the reference


async def test_a_stalled_relay_delays_the_feed_by_one_fallback_poll(
    store: TaskApplication, nats_url: str, nats_names: tuple[str, str]
) -> None:
    feed = await TaskFeed.connect(_names(nats_url, nats_names), StoreLog(store), fallback_poll=0.3)
    task = _submitted(store)
    events = feed.follow(task.id, task.tenant, task.version)
    try:
        waiting = asyncio.ensure_future(_take(events, 2))
        await asyncio.sleep(0.1)
        _progress(store, task, 2)  # committed, never published
        committed = time.monotonic()
        given = await waiting
    finally:
        await events.aclose()
        await feed.close()

    assert [m["version"] for m in given] == [2, 3]
    assert time.monotonic() - committed < 2.0


async def test_the_feed_subscribes_only_while_someone_follows(
    store: TaskApplication, publisher: Client, nats_url: str, nats_names: tuple[str, str]
) -> None:
    names = _names(nats_url, nats_names)
    log = CountingLog(store)
    feed = await TaskFeed.connect(names, log, fallback_poll=0.05, idle_unsubscribe=0.2)
    received = feed._client.stats  # the feed's own connection: what NATS sent it

    def subscribed() -> bool:
        return feed.subscribed

    task = _submitted(store)
    try:
        assert not subscribed()  # nobody follows yet
        events = feed.follow(task.id, task.tenant, task.version)
        first = asyncio.ensure_future(_take(events, 1))
        await until(subscribed, 5, "the feed to subscribe")
        await asyncio.sleep(0.1)
        _progress(store, task, 1)
        await _publish(publisher, names, log, task, 2)
        given = await first
        await events.aclose()
        await until(lambda: not subscribed(), 5, "the feed to unsubscribe")  # nobody followed for a while
        heard = received["in_msgs"]
        _progress(store, task, 2)  # versions 3 and 4, published to nobody here
        await _publish(publisher, names, log, task, 3, 4)
        await asyncio.sleep(0.2)
        assert received["in_msgs"] == heard

        # A follower after the idle time subscribes again: the log gives what it was not sent,
        # the new subscription what comes next.
        events = feed.follow(task.id, task.tenant, 2)
        given += await _take(events, 2)
        assert subscribed()
        _progress(store, task, 1)
        await _publish(publisher, names, log, task, 5)
        given += await _take(events, 1)
        await events.aclose()
    finally:
        await feed.close()

    assert [m["version"] for m in given] == [2, 3, 4, 5]
    assert given == log.read(task.id, task.tenant, 1, None)
    assert received["in_msgs"] == heard + 1  # version 5: the one message sent while followed


async def test_the_timeout_ends_the_feed(
    store: TaskApplication, nats_url: str, nats_names: tuple[str, str]
) -> None:
    feed = await TaskFeed.connect(_names(nats_url, nats_names), StoreLog(store), fallback_poll=0.1)
    task = _submitted(store)
    started = time.monotonic()
    try:
        given = [m async for m in feed.follow(task.id, task.tenant, 0, timeout=0.5)]
    finally:
        await feed.close()

    assert [m["version"] for m in given] == [1]
    assert 0.5 <= time.monotonic() - started < 2.0


async def test_after_a_nats_restart_the_feed_reads_what_it_missed(
    store: TaskApplication, own_nats: NatsServer, nats_names: tuple[str, str]
) -> None:
    names = _names(own_nats.url, nats_names)
    log = StoreLog(store)
    feed = await TaskFeed.connect(names, log, fallback_poll=SLOW_POLL_S)
    task = _submitted(store)
    events = feed.follow(task.id, task.tenant, task.version)
    try:
        missed = asyncio.ensure_future(_take(events, 2, timeout=20))
        await asyncio.sleep(0.2)
        await asyncio.to_thread(own_nats.stop)
        _progress(store, task, 2)  # committed while NATS is down: nobody could publish them
        await asyncio.to_thread(own_nats.start)
        restarted = time.monotonic()
        given = await missed  # read from the log on the reconnect, not at the fallback poll
        caught_up_after = time.monotonic() - restarted
        # The subscription survived the restart: the next live messages arrive on it.
        _progress(store, task, 2)
        publisher = await nats.connect(own_nats.url)
        await _publish(publisher, names, log, task, 4, 5)
        await publisher.close()
        given += await _take(events, 2)
    finally:
        await events.aclose()
        await feed.close()

    assert [m["version"] for m in given] == [2, 3, 4, 5]
    assert given == log.read(task.id, task.tenant, 1, None)
    assert caught_up_after < SLOW_POLL_S / 3  # the reconnect, not the fallback poll


async def test_a_message_that_is_not_json_makes_the_feed_read_the_log(
    store: TaskApplication, publisher: Client, nats_url: str, nats_names: tuple[str, str]
) -> None:
    names = _names(nats_url, nats_names)
    feed = await TaskFeed.connect(names, StoreLog(store), fallback_poll=SLOW_POLL_S)
    task = _submitted(store)
    events = feed.follow(task.id, task.tenant, task.version)
    try:
        waiting = asyncio.ensure_future(_take(events, 1))
        await asyncio.sleep(0.2)
        _progress(store, task, 1)
        await publisher.publish(names.subject(task.tenant, task.id, "LeaseGranted"), b"\xff not json")
        given = await waiting
    finally:
        await events.aclose()
        await feed.close()

    assert [m["type"] for m in given] == ["LeaseGranted"]
    assert json.loads(dumps(given[0]))["version"] == 2


class ReadsPerTask(StoreLog):
    """The store's log, counting each task's reads."""

    def __init__(self, store: TaskApplication) -> None:
        super().__init__(store)
        self.reads: collections.Counter[Any] = collections.Counter()

    def read(self, task_id: Any, tenant: str, after: int, up_to: int | None, limit: int = 500) -> list[JSON]:
        self.reads[task_id] += 1
        return super().read(task_id, tenant, after, up_to, limit)


async def test_quiet_followers_do_not_read_the_log_while_the_relay_keeps_up(
    store: TaskApplication, nats_url: str, nats_names: tuple[str, str]
) -> None:
    names = _names(nats_url, nats_names)
    log = ReadsPerTask(store)
    stop = asyncio.Event()
    relay = asyncio.ensure_future(Relay(store=store, names=names).run(stop))
    feed = await TaskFeed.connect(names, log, fallback_poll=0.2)
    quiet = [_submitted(store) for _ in range(5)]
    busy = _submitted(store)
    followers = [feed.follow(t.id, t.tenant, t.version) for t in [*quiet, busy]]
    waits = [asyncio.ensure_future(anext(f)) for f in followers[:-1]]
    try:
        _progress(store, busy, 1)
        await _take(followers[-1], 1)  # the relay publishes: every follower has caught up once
        assert all(log.reads[t.id] == 1 for t in quiet)
        began = time.monotonic()
        for _ in range(20):  # 3 s of a busy task beside five quiet ones: 15 fallback polls
            _progress(store, busy, 1)
            await asyncio.sleep(0.15)
        given = await _take(followers[-1], 20)
        watched_s = time.monotonic() - began
    finally:
        for wait in waits:
            wait.cancel()
        await asyncio.gather(*waits, return_exceptions=True)
        for follower in followers:
            await follower.aclose()
        await feed.close()
        stop.set()
        await relay

    assert [m["version"] for m in given] == list(range(3, 23))
    assert watched_s > 15 * 0.2
    # One read each (the catch-up) and at most two more, if the relay fell behind by a check
    # (a busy machine); one read per fallback poll per quiet follower would be 15 each.
    assert all(log.reads[t.id] <= 3 for t in quiet), log.reads
    assert log.reads[busy.id] <= 3, log.reads
