"""A blocking SendMessage waits on the task feed and wakes only on an event that changes the state."""

from __future__ import annotations

import asyncio
import time
from datetime import UTC, datetime, timedelta

import nats
import pytest

from api.task_feed import StoreLog, TaskFeed
from api.waiting import FeedWaiter
from store.log.application import TaskApplication
from store.public_form.event_json import dumps
from store.public_form.subjects import NatsNames
from tests.support.tasks import new_task

pytestmark = pytest.mark.postgres

SLOW_POLL_S = 30.0


async def test_wakes_on_a_state_change_not_on_progress(
    store: TaskApplication, nats_url: str, nats_names: tuple[str, str]
) -> None:
    names = NatsNames(url=nats_url, stream=nats_names[0], subject_prefix=nats_names[1])
    log = StoreLog(store)
    feed = await TaskFeed.connect(names, log, fallback_poll=SLOW_POLL_S)
    publisher = await nats.connect(nats_url)
    now = datetime.now(UTC)
    task = new_task(now)
    task.grant_lease(worker="w", now=now, until=now + timedelta(minutes=5))
    store.save_tasks(task)  # working, at version 2
    try:
        waiting = asyncio.ensure_future(FeedWaiter(feed).wait_for_change(task, timeout=60))
        await asyncio.sleep(0.2)

        async def publish(after: int) -> None:
            for message in log.read(task.id, task.tenant, after, None):
                await publisher.publish(
                    names.subject(task.tenant, task.id, message["type"]), dumps(message).encode()
                )
            await publisher.flush()

        for i in range(3):
            task.report_progress(epoch=task.lease_epoch, now=now, message={"parts": [{"text": str(i)}]})
            task.save_checkpoint(
                epoch=task.lease_epoch,
                now=now,
                step=0,
                checkpoint={"i": i},
                lease_until=now + timedelta(minutes=5),
            )
        store.save_tasks(task)
        await publish(2)
        await asyncio.sleep(0.3)
        assert not waiting.done()  # progress and checkpoints leave the state as it is: no reload

        task.complete(epoch=task.lease_epoch, now=now, message=None)
        store.save_tasks(task)
        published = time.monotonic()
        await publish(8)
        await asyncio.wait_for(waiting, 10)
        assert time.monotonic() - published < SLOW_POLL_S / 3  # the message woke it, not the poll
    finally:
        await publisher.close()
        await feed.close()
