"""The NATS waiter wakes a blocking call on the relay's message, not on its fallback poll."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta

import nats
import pytest
from nats.aio.client import Client

from api.waiting import NatsWaiter
from domain.task import Task
from projections.subjects import NatsNames
from store.application import TaskApplication
from tests.support.tasks import new_task

FALLBACK_POLL_S = 30.0


def _submitted(store: TaskApplication) -> Task:
    now = datetime.now(UTC)
    task = new_task(now)
    store.save_tasks(task)
    return task


@pytest.fixture
async def connected(nats_url: str, nats_names: tuple[str, str]) -> AsyncIterator[tuple[NatsNames, Client]]:
    """This test's NATS names and a connected client."""
    client = await nats.connect(nats_url)
    yield NatsNames(url=nats_url, stream=nats_names[0], subject_prefix=nats_names[1]), client
    await client.close()


async def test_wakes_on_the_task_subject(store: TaskApplication, connected: tuple[NatsNames, Client]) -> None:
    names, client = connected
    task = _submitted(store)
    waiter = NatsWaiter(client, names, store, fallback_poll=FALLBACK_POLL_S)
    started = time.monotonic()
    waiting = asyncio.ensure_future(waiter.wait_for_change(task.id, task.version, timeout=60))
    await asyncio.sleep(0.3)
    assert not waiting.done()  # nothing changed yet: it waits

    # A worker commits, then the relay publishes: the waiter wakes at once.
    now = datetime.now(UTC)
    task.grant_lease(worker="w", now=now, until=now + timedelta(seconds=30))
    await asyncio.to_thread(store.save_tasks, task)
    await client.publish(names.subject("acme", task.id, "LeaseGranted"), b"{}")
    await asyncio.wait_for(waiting, 10)
    assert time.monotonic() - started < FALLBACK_POLL_S / 2


async def test_returns_at_once_when_the_log_already_moved(
    store: TaskApplication, connected: tuple[NatsNames, Client]
) -> None:
    names, client = connected
    task = _submitted(store)
    waiter = NatsWaiter(client, names, store, fallback_poll=FALLBACK_POLL_S)
    # The caller saw version 0: the log already holds version 1, no message is needed.
    await asyncio.wait_for(waiter.wait_for_change(task.id, 0, timeout=60), 10)
