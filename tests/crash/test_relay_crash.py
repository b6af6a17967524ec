"""The relay SIGKILLed in the middle of a backlog: restarted, it leaves the stream equal to the log.

Thousands of events are committed while no relay runs; a relay process starts on the backlog and
is killed once part of it is in the stream (after publishing and before saving its position, at
some point of a batch). The next relay republishes from its saved position: JetStream drops
what it already holds (``Nats-Msg-Id``), so the stream holds every event once, in log order.
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
import time
from datetime import UTC, datetime, timedelta
from uuid import UUID

import nats
from nats.js.errors import NotFoundError

from api.task_feed import StoreLog
from store.log.application import TaskApplication
from tests.crash.cluster import Cluster
from tests.support.jetstream import relayed_exactly_once, stream_count, stream_messages, wait_for_stream
from tests.support.processes import LonghaulProcess
from tests.support.tasks import new_task

TASKS, EVENTS_PER_TASK = 20, 100


def _commit_backlog(store: TaskApplication) -> int:
    now = datetime.now(UTC)
    for _ in range(TASKS):
        task = new_task(now)
        task.grant_lease(worker="w", now=now, until=now + timedelta(minutes=5))
        for i in range(EVENTS_PER_TASK - 2):
            task.report_progress(epoch=task.lease_epoch, now=now, message={"parts": [{"text": f"{i}"}]})
        store.save_tasks(task)
    return TASKS * EVENTS_PER_TASK


async def _kill_when_published(relay: LonghaulProcess, url: str, stream: str, count: int) -> None:
    """SIGKILL ``relay`` as soon as ``stream`` holds ``count`` messages (one connection, tight poll)."""
    client = await nats.connect(url)
    js = client.jetstream()
    deadline = time.monotonic() + 45
    try:
        while time.monotonic() < deadline:
            with contextlib.suppress(NotFoundError):
                if (await js.stream_info(stream)).state.messages >= count:
                    break
            await asyncio.sleep(0.001)
        relay.signal(signal.SIGKILL)
    finally:
        await client.close()


def test_a_relay_killed_mid_backlog_leaves_every_event_once_in_order(
    cluster: Cluster, store: TaskApplication
) -> None:
    settings = cluster.settings
    assert settings.nats_url is not None
    total = _commit_backlog(store)

    relay = cluster.start(["relay"])
    # Past a saved position or two, in the middle of a batch.
    asyncio.run(_kill_when_published(relay, settings.nats_url, settings.nats_stream, total // 3))
    relay.popen.wait(timeout=10)
    at_kill = stream_count(settings.nats_url, settings.nats_stream)
    assert total // 3 <= at_kill < total, (
        f"the relay was killed with {at_kill} of {total} events in the stream"
    )

    cluster.start(["relay"])
    wait_for_stream(settings.nats_url, settings.nats_stream, total, timeout=60)
    time.sleep(0.5)  # a relay that republished what the stream holds would show it now

    messages = stream_messages(
        settings.nats_url, settings.nats_stream, f"{settings.nats_subject_prefix}.tasks.>"
    )
    assert len(messages) == total
    relayed_exactly_once(messages, store, settings.nats_stream)

    # The gateway's feed reads from the log exactly what the relay published: a reader cannot
    # tell a message caught up from the log from a live one.
    first_task = messages[0][1]["taskId"]
    published = [m for _, m in messages if m["taskId"] == first_task]
    assert StoreLog(store).read(UUID(first_task), published[0]["tenant"], 0, None) == published
