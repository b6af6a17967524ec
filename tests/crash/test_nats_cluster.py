"""Crash test: a NATS node dies under load, and every event still reaches the consumers once, in order.

A three-node JetStream cluster (real ``nats-server`` processes on loopback ports) holds the
stream at three replicas. A relay, two workers and a gateway (real ``longhaul`` processes on one
PostgreSQL schema) are given all three nodes in ``LONGHAUL_NATS_URL``. Tasks are submitted through
the gateway for a few seconds; a third of the way in, the stream's leader node is SIGKILLed, and
submissions go on. Then:

- the stream holds every committed event of the log exactly once, in position order;
- a durable consumer connected to a node that survives, reading and acking throughout, received
  every event once, in position order;
- the stream is still at three replicas, led by a surviving node;
- every message the consumer received is valid under the message schema.

And a relay given all three nodes starts and publishes while one of them is down; with two of
three down it publishes nothing (no majority) and catches up from the log once one is back.
"""

from __future__ import annotations

import asyncio
import json
import threading
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from uuid import UUID

import httpx
import jsonschema
import nats
from nats.errors import Error as NatsError
from nats.errors import TimeoutError as NatsTimeoutError
from nats.js import JetStreamContext
from nats.js.api import ConsumerConfig
from nats.js.errors import NotFoundError

from longhaul.settings import Settings
from store.log.application import TaskApplication
from store.public_form.message_schema import json_schema
from store.public_form.subjects import NatsNames
from tests.crash.cluster import Cluster, user_message
from tests.support.nats_servers import NatsCluster, NatsServer
from tests.support.processes import until, wait_until
from tests.support.tasks import new_task
from workers.relay import Relay, StreamLimits, ensure_stream

TASKS = 150
KILL_AFTER = 50
SUBMIT_INTERVAL_S = 0.02
DURABLE = "analytics"
ACK_WAIT_S = 5.0
"""The reader's ack wait: a message a dead consumer leader sent but nobody received (or whose ack
it never got) comes again after it, marked a redelivery, within the test's wait."""


def _log_positions(store: TaskApplication) -> list[int]:
    """Every position of the log, in order."""
    positions: list[int] = []
    while True:
        after = positions[-1] if positions else 0
        batch = store.recorder.select_notifications(after, 1000, None, (), inclusive_of_start=False)
        if not batch:
            return positions
        positions += [n.id for n in batch]


async def _stream_info(url: str, stream: str) -> Any:
    client = await nats.connect(url, max_reconnect_attempts=0)
    try:
        return await client.jetstream(timeout=2.0).stream_info(stream)
    finally:
        await client.close()


async def _stream_positions(url: str, stream: str) -> list[int]:
    """The ``position`` of every message the stream holds, in stream order."""
    client = await nats.connect(url, max_reconnect_attempts=0)
    try:
        js = client.jetstream()
        info = await js.stream_info(stream)
        positions = []
        for seq in range(info.state.first_seq, info.state.last_seq + 1):
            raw = await js.get_msg(stream, seq)
            positions.append(int(json.loads(raw.data or b"{}")["position"]))
        return positions
    finally:
        await client.close()


class DurableReader(threading.Thread):
    """A durable pull consumer on one node: fetches, acks, and keeps each message's position."""

    def __init__(self, node: NatsServer, stream: str, subjects: str) -> None:
        super().__init__(daemon=True)
        self.node, self.stream, self.subjects = node, stream, subjects
        self.messages: list[dict[str, Any]] = []
        self.deliveries: list[int] = []
        """Each message's delivery count (JetStream's ``num_delivered``): 1 the first time."""
        self.errors: list[str] = []
        self.created = threading.Event()
        self.stop = threading.Event()

    @property
    def positions(self) -> list[int]:
        """The ``position`` of every message received, in the order received."""
        return [int(m["position"]) for m in self.messages]

    @property
    def first_deliveries(self) -> list[int]:
        """The positions delivered the first time, in the order received (redeliveries left out)."""
        return [p for p, n in zip(self.positions, self.deliveries, strict=True) if n == 1]

    def run(self) -> None:
        asyncio.run(self._read())

    async def _read(self) -> None:
        # Only this node: the client does not fail over to the node the test kills.
        client = await nats.connect(self.node.url, max_reconnect_attempts=-1, dont_randomize=True)
        try:
            js: JetStreamContext = client.jetstream()
            # A message lost with a dead consumer leader comes again after ack_wait, counted as a
            # redelivery; a repeat counted as a first delivery would be the stream's own.
            config = ConsumerConfig(ack_wait=ACK_WAIT_S)
            subscription = await js.pull_subscribe(
                self.subjects, durable=DURABLE, stream=self.stream, config=config
            )
            self.created.set()
            while not self.stop.is_set():
                try:
                    messages = await subscription.fetch(200, timeout=0.5)
                except NatsTimeoutError:
                    continue
                except Exception as error:  # a leader election: note it, fetch again
                    self.errors.append(repr(error))
                    await asyncio.sleep(0.2)
                    continue
                for message in messages:
                    self.messages.append(json.loads(message.data))
                    self.deliveries.append(message.metadata.num_delivered)
                    await message.ack()
        finally:
            await client.close()


def _assert_at_least_once_in_order(reader: DurableReader, expected: list[int]) -> None:
    """What docs/events.md promises a consumer: every event at least once, in log order.

    A repeat is allowed only as a redelivery (JetStream's own, across the consumer leader's
    death); a repeat delivered as new, or first deliveries out of order, fail.
    """
    assert sorted(set(reader.positions)) == expected, "the durable consumer missed an event"
    assert reader.first_deliveries == expected, "the durable consumer's first deliveries are not the log"


def _catch_up(reader: DurableReader, node: NatsServer, stream: str, expected: list[int]) -> str:
    """Where a consumer that did not catch up stands: the log, the stream on ``node``, the reader."""
    try:
        state = asyncio.run(_stream_info(node.url, stream)).state
        held = f"the stream on {node.name} holds {state.messages} (last seq {state.last_seq})"
    except Exception as error:  # a diagnostic of a failure already being reported
        held = f"the stream on {node.name} did not answer ({error!r})"
    last = reader.positions[-1] if reader.positions else None
    return (
        f"the log holds {len(expected)} events (last position {expected[-1]}); {held}; "
        f"the reader got {len(reader.positions)} (last position {last}), its errors {reader.errors[-5:]}"
    )


def _submit(gateway: str, count: int, on: int, then: Any) -> list[str]:
    """Submit ``count`` crash-noop tasks through the gateway, calling ``then()`` after the ``on``-th."""
    ids = []
    with httpx.Client(base_url=gateway, timeout=30, headers={"A2A-Version": "1.0"}) as client:
        for i in range(count):
            message = {**user_message(), "metadata": {"skill": "crash-noop"}}
            params = {"message": message, "configuration": {"returnImmediately": True}}
            body = {"jsonrpc": "2.0", "id": i, "method": "SendMessage", "params": params}
            answer = client.post("/a2a/jsonrpc", json=body).json()
            assert "result" in answer, answer
            ids.append(answer["result"]["task"]["id"])
            if i + 1 == on:
                then()
            time.sleep(SUBMIT_INTERVAL_S)
    return ids


def test_a_nats_node_killed_under_load_loses_no_event_and_keeps_the_log_s_order(
    settings: Settings, store: TaskApplication, tmp_path: Path, nats_cluster: NatsCluster
) -> None:
    cluster = Cluster(settings, tmp_path, nats_url=nats_cluster.url, nats_replicas="3")
    stream, subjects = settings.nats_stream, f"{settings.nats_subject_prefix}.tasks.>"
    reader: DurableReader | None = None
    try:
        # The processes start together; the relay creates the stream while the others start.
        relay = cluster.start(["relay"])
        workers = [cluster.worker(wait=False) for _ in range(2)]
        gateway = cluster.gateway()
        for worker in workers:
            cluster.wait_for_worker(worker)
        wait_until(
            lambda: _stream_exists(nats_cluster, stream),
            45,
            f"the relay to create the stream:\n{relay.log()}",
        )
        wait_until(lambda: _stream_leader(nats_cluster, stream) is not None, 15, "a stream leader")
        info = asyncio.run(_stream_info(nats_cluster.nodes[0].url, stream))
        assert info.config.num_replicas == 3
        assert info.cluster is not None
        assert info.cluster.leader is not None
        victim = nats_cluster.node(info.cluster.leader)
        assert {info.cluster.leader, *(p.name for p in info.cluster.replicas or [])} == {"n1", "n2", "n3"}
        survivor = next(node for node in nats_cluster.nodes if node is not victim)

        reader = DurableReader(survivor, stream, subjects)
        reader.start()
        assert reader.created.wait(15), reader.errors

        killed_at: list[int] = []

        def kill_the_leader() -> None:
            killed_at.append(max(_log_positions(store), default=0))
            victim.kill()

        ids = _submit(gateway, TASKS, KILL_AFTER, kill_the_leader)

        assert killed_at, "the stream leader was not killed"
        wait_until(
            lambda: all(str(store.get(UUID(i)).state) == "TASK_STATE_COMPLETED" for i in ids),
            60,
            "every task to complete",
        )
        expected = _log_positions(store)
        assert len(expected) >= TASKS * 6
        assert expected[-1] > killed_at[0]
        try:
            wait_until(lambda: set(expected) <= set(reader.positions), 30, "the consumer to catch up")
        except AssertionError as error:  # say which side stalled: the relay, or the consumer
            raise AssertionError(f"{error}; {_catch_up(reader, survivor, stream, expected)}") from None

        in_stream = asyncio.run(_stream_positions(survivor.url, stream))
        assert in_stream == expected, "the stream does not hold the log, once each, in order"
        _assert_at_least_once_in_order(reader, expected)
        validator = jsonschema.Draft202012Validator(json_schema())
        assert all(validator.is_valid(m) for m in reader.messages), "a message breaks docs/events.schema.json"
        after = asyncio.run(_stream_info(survivor.url, stream))
        assert after.config.num_replicas == 3
        assert after.cluster.leader in {n.name for n in nats_cluster.alive()}
    except AssertionError as error:
        raise AssertionError(f"{error}\n{cluster.logs()}") from None
    finally:
        if reader is not None:
            reader.stop.set()
            reader.join(10)
        cluster.stop_all()


def _stream_leader(nats_cluster: NatsCluster, stream: str) -> str | None:
    info = asyncio.run(_stream_info(nats_cluster.nodes[0].url, stream))
    return info.cluster.leader if info.cluster is not None else None


def _stream_exists(nats_cluster: NatsCluster, stream: str) -> bool:
    try:
        asyncio.run(_stream_info(nats_cluster.nodes[0].url, stream))
    except NotFoundError:
        return False
    return True


async def test_the_relay_starts_with_a_listed_node_down(
    store: TaskApplication, settings: Settings, nats_cluster: NatsCluster
) -> None:
    names = NatsNames(
        url=nats_cluster.url, stream=settings.nats_stream, subject_prefix=settings.nats_subject_prefix
    )
    client = await nats.connect(nats_cluster.urls)
    await ensure_stream(client.jetstream(), names, StreamLimits(replicas=3))
    await client.close()
    await until(lambda: _led_by_the_living(nats_cluster, names.stream), 15, "a stream leader", interval=0.1)
    # A follower: the stream keeps its leader, so what is tested is the connect, not an election.
    leader = (await _stream_info(nats_cluster.urls[0], names.stream)).cluster.leader
    down = next(node for node in nats_cluster.nodes if node.name != leader)
    down.kill()
    store.save_tasks(new_task(datetime.now(UTC)))
    relay = Relay(store=store, names=names, limits=StreamLimits(replicas=3))

    stop = asyncio.Event()
    running = asyncio.ensure_future(relay.run(stop))
    try:
        await until(lambda: relay.published >= 1, 20, "the relay to publish")
    finally:
        stop.set()
        await running

    assert relay.published == 1
    assert await _stream_positions(nats_cluster.alive()[0].url, names.stream) == _log_positions(store)


async def test_without_a_majority_the_relay_waits_and_catches_up_from_the_log(
    store: TaskApplication, settings: Settings, nats_cluster: NatsCluster
) -> None:
    stop = asyncio.Event()
    running = None
    try:
        names = NatsNames(
            url=nats_cluster.url, stream=settings.nats_stream, subject_prefix=settings.nats_subject_prefix
        )
        relay = Relay(store=store, names=names, limits=StreamLimits(replicas=3))
        running = asyncio.ensure_future(relay.run(stop))
        store.save_tasks(new_task(datetime.now(UTC)))
        await until(lambda: relay.published == 1, 20, "the first event")
        first, second = nats_cluster.nodes[0], nats_cluster.nodes[1]
        first.kill()
        second.kill()

        for _ in range(3):
            store.save_tasks(new_task(datetime.now(UTC)))
        await asyncio.sleep(1.0)
        assert relay.published == 1, "published without a majority of the stream's replicas"
        second.restart()
        await until(lambda: relay.published == 4, 30, "the relay to catch up")

        assert await _stream_positions(second.url, names.stream) == _log_positions(store)
    finally:
        stop.set()
        if running is not None:
            await running


async def _led_by_the_living(nats_cluster: NatsCluster, stream: str) -> bool:
    """Whether the stream has a leader, and it is a running node (no answer while it elects one)."""
    try:
        info = await _stream_info(nats_cluster.alive()[0].url, stream)
    except NatsError:
        return False
    return info.cluster is not None and info.cluster.leader in {n.name for n in nats_cluster.alive()}
