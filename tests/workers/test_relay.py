"""The relay: every committed event to JetStream, in commit order, once, by one leader at a time."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from typing import Any

import nats
import psycopg
import pytest
from nats.js import JetStreamContext

from domain.task import Task
from projections.subjects import NatsNames
from store.application import MemoryConfig, StoreConfig, TaskStore
from tests.support.tasks import new_task
from workers.relay import Relay, RelayUnavailableError, ensure_stream


def _task_with_events(store: TaskStore, tenant: str = "acme") -> Task:
    now = datetime.now(UTC)
    task = new_task(now, tenant=tenant)
    task.grant_lease(worker="w", now=now, until=now + timedelta(seconds=30))
    store.save_tasks(task)
    return task


@pytest.fixture
def names(nats_url: str, nats_names: tuple[str, str]) -> NatsNames:
    return NatsNames(url=nats_url, stream=nats_names[0], subject_prefix=nats_names[1])


@pytest.fixture
async def js(names: NatsNames) -> AsyncIterator[JetStreamContext]:
    client = await nats.connect(names.url)
    yield client.jetstream()
    await client.close()


async def _stream_messages(js: JetStreamContext, names: NatsNames) -> list[dict[str, Any]]:
    info = await js.stream_info(names.stream)
    messages = []
    for seq in range(info.state.first_seq, info.state.last_seq + 1):
        raw = await js.get_msg(names.stream, seq)
        messages.append(json.loads(raw.data or b"{}") | {"_subject": raw.subject, "_headers": raw.headers})
    return messages


async def _run_until(relay: Relay, count: int) -> None:
    stop = asyncio.Event()
    running = asyncio.ensure_future(relay.run(stop))
    for _ in range(400):
        if relay.published >= count:
            break
        await asyncio.sleep(0.025)
    stop.set()
    await running


async def test_publishes_every_event_in_commit_order_then_resumes(
    store: TaskStore, names: NatsNames, js: JetStreamContext
) -> None:
    first, second = _task_with_events(store), _task_with_events(store, tenant="other co")
    relay = Relay(store=store, names=names)
    await _run_until(relay, 4)
    third = _task_with_events(store)
    restarted = Relay(store=store, names=names)
    await _run_until(restarted, 2)

    messages = await _stream_messages(js, names)
    # One message per committed event, in log order, none twice (the restart resumed at 4).
    assert [m["position"] for m in messages] == sorted(m["position"] for m in messages)
    assert len(messages) == 6
    assert [(m["taskId"], m["version"]) for m in messages] == [
        (str(t.id), v) for t in (first, second, third) for v in (1, 2)
    ]
    submitted = messages[0]
    assert submitted["type"] == "Submitted"
    assert submitted["tenant"] == "acme"
    assert submitted["time"].endswith("Z")
    assert submitted["body"]["skill"] == "echo"
    assert submitted["_subject"] == f"{names.subject_prefix}.tasks.acme.{first.id}.Submitted"
    assert submitted["_headers"]["Nats-Msg-Id"] == f"{names.stream}:{submitted['position']}"
    # A tenant name is made safe as a subject token.
    assert messages[2]["_subject"].startswith(f"{names.subject_prefix}.tasks.other_co.")


async def test_republishing_after_a_crash_is_deduplicated(
    store: TaskStore, names: NatsNames, js: JetStreamContext
) -> None:
    _task_with_events(store)
    relay = Relay(store=store, names=names)
    await ensure_stream(js, names)
    assert isinstance(store.config, StoreConfig)
    async with await psycopg.AsyncConnection.connect(store.config.database_url, autocommit=True) as conn:
        position = await relay.relay_batch(js, conn, 0)
        # A relay that died before saving its position publishes the same events again.
        assert await relay.relay_batch(js, conn, 0) == position
    messages = await _stream_messages(js, names)
    assert len(messages) == 2


async def test_only_one_relay_leads(store: TaskStore, names: NatsNames, js: JetStreamContext) -> None:
    _task_with_events(store)
    leader, standby = Relay(store=store, names=names), Relay(store=store, names=names)
    stop_leader, stop_standby = asyncio.Event(), asyncio.Event()
    leading = asyncio.ensure_future(leader.run(stop_leader))
    for _ in range(400):
        if leader.published >= 2:
            break
        await asyncio.sleep(0.025)
    waiting = asyncio.ensure_future(standby.run(stop_standby))
    _task_with_events(store)
    for _ in range(400):
        if leader.published >= 4:
            break
        await asyncio.sleep(0.025)
    assert standby.published == 0  # it waits for the advisory lock

    stop_leader.set()
    await leading
    _task_with_events(store)
    for _ in range(400):  # the standby takes over and relays only what is new
        if standby.published >= 2:
            break
        await asyncio.sleep(0.025)
    stop_standby.set()
    await waiting
    assert standby.published == 2
    assert len(await _stream_messages(js, names)) == 6


def test_a_relay_over_an_in_memory_store_refuses_to_start(names: NatsNames) -> None:
    store = TaskStore(MemoryConfig())
    try:
        with pytest.raises(RelayUnavailableError, match="needs the store on PostgreSQL"):
            Relay(store=store, names=names)
    finally:
        store.close()
