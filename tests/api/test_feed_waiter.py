"""A blocking SendMessage waits on the task feed and wakes only on an event that settles the task."""

from __future__ import annotations

import asyncio
import time
from datetime import UTC, datetime, timedelta

import nats
import pytest

from api.task_feed import StoreLog, TaskFeed
from api.waiting import SETTLING_EVENTS, FeedWaiter
from domain.states import INTERRUPTED, TERMINAL
from domain.task import Task
from projections.event_json import dumps
from projections.subjects import NatsNames
from store.application import TaskApplication
from tests.support.tasks import new_task

pytestmark = pytest.mark.postgres

SLOW_POLL_S = 30.0


def test_the_settling_events_are_those_that_enter_a_terminal_or_interrupted_state() -> None:
    assert {
        "Completed",
        "Failed",
        "Canceled",
        "Rejected",
        "InputRequested",
        "AuthRequested",
    } == SETTLING_EVENTS
    entered = Task.states_entered()
    assert all(entered[name] in TERMINAL | INTERRUPTED for name in SETTLING_EVENTS)


async def test_wakes_on_the_settling_event_not_before(
    store: TaskApplication, nats_url: str, nats_names: tuple[str, str]
) -> None:
    names = NatsNames(url=nats_url, stream=nats_names[0], subject_prefix=nats_names[1])
    log = StoreLog(store)
    feed = await TaskFeed.connect(names, log, fallback_poll=SLOW_POLL_S)
    publisher = await nats.connect(nats_url)
    now = datetime.now(UTC)
    task = new_task(now)
    store.save_tasks(task)
    try:
        waiting = asyncio.ensure_future(FeedWaiter(feed).wait_for_change(task, timeout=60))
        await asyncio.sleep(0.2)

        async def publish(after: int) -> None:
            for message in log.read(task.id, task.tenant, after, None):
                await publisher.publish(
                    names.subject(task.tenant, task.id, message["type"]), dumps(message).encode()
                )
            await publisher.flush()

        task.grant_lease(worker="w", now=now, until=now + timedelta(minutes=5))
        for i in range(3):
            task.report_progress(epoch=task.lease_epoch, now=now, message={"parts": [{"text": str(i)}]})
        store.save_tasks(task)
        await publish(1)
        await asyncio.sleep(0.3)
        assert not waiting.done()  # working, with progress: nothing to answer yet

        task.complete(epoch=task.lease_epoch, now=now, message=None)
        store.save_tasks(task)
        published = time.monotonic()
        await publish(5)
        await asyncio.wait_for(waiting, 10)
        assert time.monotonic() - published < SLOW_POLL_S / 3  # the message woke it, not the poll
    finally:
        await publisher.close()
        await feed.close()
