"""The relay: every committed event to JetStream, in commit order, once, by one leader at a time."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import logging
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from typing import Any

import nats
import psycopg
import pytest
from nats.js import JetStreamContext
from psycopg import sql

from domain.task import Task
from store.log.application import TaskApplication
from store.log.config import MemoryConfig, StoreConfig
from store.log.locks import advisory_key
from store.log.postgres import PostgresRunQueueRecorder
from store.public_form.event_json import dumps, event_message
from store.public_form.subjects import NatsNames
from tests.support.tasks import new_task
from workers.relay import Relay, RelayUnavailableError, StreamLimits, ensure_stream, header_size


def _task_with_events(store: TaskApplication, tenant: str = "acme") -> Task:
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
    store: TaskApplication, names: NatsNames, js: JetStreamContext
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
    store: TaskApplication, names: NatsNames, js: JetStreamContext
) -> None:
    _task_with_events(store)
    await _run_until(Relay(store=store, names=names), 2)
    # A relay that died after publishing and before saving its position publishes them again.
    assert isinstance(store.config, StoreConfig)
    async with await psycopg.AsyncConnection.connect(store.config.database_url, autocommit=True) as conn:
        await conn.execute(
            sql.SQL("UPDATE {} SET position = 0").format(
                sql.Identifier(store.config.schema, "longhaul_relay_position")
            )
        )
    again = Relay(store=store, names=names)
    await _run_until(again, 2)
    assert again.published == 2
    messages = await _stream_messages(js, names)
    assert len(messages) == 2


async def test_only_one_relay_leads(store: TaskApplication, names: NatsNames, js: JetStreamContext) -> None:
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


def _submitted_with_text(store: TaskApplication, text: str, *, now: datetime) -> Task:
    task = new_task(now, text=text)
    store.save_tasks(task)
    return task


def _wire_size(relay: Relay, store: TaskApplication, task: Task, position: int) -> int:
    """What the stored Submitted event of ``task`` at ``position`` takes on the wire."""
    (event,) = [e for e in store.history(task.id) if e.originator_version == 1]
    return _wire_size_of(relay, event, task.tenant, position)


def _wire_size_of(relay: Relay, event: Any, tenant: str, position: int) -> int:
    """What ``event`` (a Submitted) at ``position`` takes on the wire, headers included."""
    headers = {
        "Nats-Msg-Id": f"{relay.names.stream}:{position}",
        "Longhaul-Position": str(position),
        "Longhaul-Task": str(event.originator_id),
        "Longhaul-Version": "1",
        "Longhaul-Type": "Submitted",
    }
    return len(dumps(event_message(position, tenant, event)).encode()) + header_size(headers)


async def test_an_event_bigger_than_nats_takes_is_published_as_a_reference(
    store: TaskApplication, names: NatsNames, js: JetStreamContext, caplog: pytest.LogCaptureFixture
) -> None:
    """A SendMessage near the 1 MiB body limit makes an event NATS refuses: it must not stall."""
    big = _submitted_with_text(store, "x" * (1024 * 1024), now=datetime.now(UTC))
    after = _task_with_events(store)
    relay = Relay(store=store, names=names)
    with caplog.at_level("WARNING", logger="workers.relay"):
        await _run_until(relay, 3)

    messages = await _stream_messages(js, names)
    assert [(m["taskId"], m["version"]) for m in messages] == [
        (str(big.id), 1),
        (str(after.id), 1),
        (str(after.id), 2),
    ]
    reference = messages[0]
    assert reference["body"] is None
    assert "exceeds the NATS maximum payload" in reference["bodyOmitted"]
    assert reference["type"] == "Submitted"
    assert reference["_headers"]["Longhaul-Task"] == str(big.id)
    assert all(m["body"] is not None for m in messages[1:])
    assert relay.referenced == 1
    assert str(big.id) in caplog.text


async def test_an_event_exactly_at_the_servers_limit_goes_whole(
    store: TaskApplication, names: NatsNames, js: JetStreamContext
) -> None:
    """The size check counts headers as the server does: at the limit whole, one byte over a reference."""
    client = await nats.connect(names.url)
    limit = client.max_payload
    await client.close()
    relay = Relay(store=store, names=names)
    relay.max_payload = limit
    now = datetime.now(UTC)
    sizes = {}
    for position, over in ((1, 0), (2, 1)):
        probe = new_task(now, text="x")
        (event,) = probe.pending_events
        probe_size = _wire_size_of(relay, event, probe.tenant, position)
        text = "x" * (1 + limit - probe_size + over)
        task = new_task(now, text=text)
        store.save_tasks(task)
        sizes[position] = _wire_size(relay, store, task, position)
    assert sizes == {1: limit, 2: limit + 1}

    await _run_until(relay, 2)
    assert relay.max_payload == limit
    whole, referenced = await _stream_messages(js, names)
    assert whole["body"]["message"]["parts"][0]["text"].startswith("xxx")
    assert referenced["body"] is None


def test_a_relay_over_an_in_memory_store_refuses_to_start(names: NatsNames) -> None:
    store = TaskApplication(MemoryConfig())
    try:
        with pytest.raises(RelayUnavailableError, match="needs the store on PostgreSQL"):
            Relay(store=store, names=names)
    finally:
        store.close()


async def test_the_stream_is_created_with_its_limits_and_updated_to_new_ones(
    names: NatsNames, js: JetStreamContext, caplog: pytest.LogCaptureFixture
) -> None:
    await ensure_stream(js, names, StreamLimits(max_age=timedelta(days=3), replicas=1))
    info = await js.stream_info(names.stream)
    assert info.config.max_age == timedelta(days=3).total_seconds()
    assert info.config.num_replicas == 1
    assert info.config.duplicate_window == 600

    # Limits set by hand that the relay does not manage are kept through an update.
    await js.update_stream(dataclasses.replace(info.config, max_msgs=1000))
    with caplog.at_level(logging.INFO, logger="workers.relay"):
        await ensure_stream(js, names, StreamLimits(max_age=timedelta(hours=1), replicas=1))
    info = await js.stream_info(names.stream)
    assert info.config.max_age == 3600
    assert info.config.max_msgs == 1000
    assert f"stream {names.stream}: updated max_age 259200s -> 3600s" in caplog.text

    caplog.clear()
    with caplog.at_level(logging.INFO, logger="workers.relay"):
        await ensure_stream(js, names, StreamLimits(max_age=timedelta(hours=1), replicas=1))
    assert "updated" not in caplog.text  # nothing changed: no update, no log line


async def test_the_relay_keeps_the_stream_at_its_limits(
    store: TaskApplication, names: NatsNames, js: JetStreamContext
) -> None:
    _task_with_events(store)
    await _run_until(Relay(store=store, names=names, limits=StreamLimits(max_age=timedelta(hours=2))), 2)
    assert (await js.stream_info(names.stream)).config.max_age == 7200


async def test_the_relay_starts_over_when_its_database_connections_are_cut(
    store: TaskApplication, names: NatsNames, js: JetStreamContext, caplog: pytest.LogCaptureFixture
) -> None:
    """The leader's connection and the subscription's LISTEN are killed: it leads again, loses nothing."""
    _task_with_events(store)
    relay = Relay(store=store, names=names)
    stop = asyncio.Event()
    running = asyncio.ensure_future(relay.run(stop))
    assert isinstance(store.config, StoreConfig)
    try:
        await _until_published(relay, 2)
        recorder = store.recorder
        assert isinstance(recorder, PostgresRunQueueRecorder)
        channel = recorder.channel_name
        key = advisory_key(f"relay:{store.config.schema}:{names.stream}")
        async with await psycopg.AsyncConnection.connect(store.config.database_url, autocommit=True) as conn:
            cursor = await conn.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
                " WHERE query = %s OR pid IN (SELECT pid FROM pg_locks WHERE locktype = 'advisory'"
                " AND classid::text::bigint = %s AND objid::text::bigint = %s)",
                (f'LISTEN "{channel}"', (key >> 32) & 0xFFFFFFFF, key & 0xFFFFFFFF),
            )
            assert len(await cursor.fetchall()) == 2  # the leader's connection and the LISTEN
        with caplog.at_level(logging.WARNING, logger="workers.relay"):
            _task_with_events(store)
            await _until_published(relay, 4)
    finally:
        stop.set()
        await running
    assert "relay failed" in caplog.text
    messages = await _stream_messages(js, names)
    assert [m["position"] for m in messages] == [1, 2, 3, 4]


async def _until_published(relay: Relay, count: int) -> None:
    for _ in range(400):
        if relay.published >= count:
            return
        await asyncio.sleep(0.025)
    pytest.fail(f"the relay published {relay.published} of {count} events")


async def test_a_rejected_publish_takes_the_later_ones_in_flight_with_it(
    store: TaskApplication, names: NatsNames, js: JetStreamContext, caplog: pytest.LogCaptureFixture
) -> None:
    """Publishes are pipelined: the stream refuses one in the middle of a batch, and none after it gets in.

    The stream's ``max_msg_size`` refuses the third of five events (a big one). The two before
    it are stored; the two after it were already in flight, and their expected last sequence no
    longer holds, so they are refused too. Once the limit is lifted the relay, starting over
    from its saved position, publishes the rest: every event once, in log order.
    """
    await js.add_stream(
        name=names.stream, subjects=[names.all_subjects], duplicate_window=600, max_msg_size=4000
    )
    now = datetime.now(UTC)
    _task_with_events(store)
    _submitted_with_text(store, "x" * 8000, now=now)
    _task_with_events(store)
    relay = Relay(store=store, names=names)
    stop = asyncio.Event()
    with caplog.at_level(logging.WARNING, logger="workers.relay"):
        running = asyncio.ensure_future(relay.run(stop))
        try:
            for _ in range(400):
                if "relay failed" in caplog.text:
                    break
                await asyncio.sleep(0.025)
            assert "relay failed" in caplog.text
            assert [m["position"] for m in await _stream_messages(js, names)] == [1, 2]  # nothing after 3
            config = (await js.stream_info(names.stream)).config
            await js.update_stream(dataclasses.replace(config, max_msg_size=-1))
            await _until_published(relay, 5)
        finally:
            stop.set()
            await running
    messages = await _stream_messages(js, names)
    assert [m["position"] for m in messages] == [1, 2, 3, 4, 5]
    assert messages[2]["body"]["message"]["parts"][0]["text"] == "x" * 8000
