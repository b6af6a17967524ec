"""The relay: publishes every committed event to NATS JetStream, in commit order.

The event store's notification log is the outbox: its ids follow commit order (appends hold a
table lock), so reading ``id > last relayed`` never skips a late commit. The relay follows it
on the library's subscription (``projections.log_follower``, the machinery the projections
use), publishes each batch that arrived and then saves the batch's last position
(``store.log.RelayPosition``, one row per stream). Each event becomes one JetStream message
with ``Nats-Msg-Id`` = ``<stream>:<position>``, so a relay that crashes after publishing and
before saving its position republishes duplicates that JetStream drops. Only one relay is active
at a time (``store.log.leading``: a PostgreSQL advisory lock); others wait as hot standbys.

A batch's publishes are pipelined (``workers.jetstream_publish``), each carrying
``Nats-Expected-Last-Sequence``: the stream sequence its predecessor gets. The stream stores a
message only right after the one before it, so a publish that fails takes every later one in
flight down with it; the relay then starts over from its saved position. So only the batch's
last message asks for an acknowledgement: stored, it answers for the whole batch before the
position is saved (ADR 0056).

After a start, the relay publishes one at a time (no expectation) until JetStream stores one
that is not a duplicate: what a relay stored before it stopped is a prefix of what it publishes
again, and JetStream checks the expected sequence before it looks for duplicates. The stream so
holds the log's order whatever fails (ADR 0021).

The relay needs a store on PostgreSQL (its position table, created by the schema migrations,
and its leadership lock live there): over an in-memory store it refuses to start.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import timedelta
from typing import Any
from uuid import UUID

import nats
from eventsourcing.persistence import Tracking
from nats.js.api import PubAck, StorageType, StreamConfig
from nats.js.errors import NotFoundError

from domain.task import Task
from projections.log_follower import LogFollower
from projections.shared_log import SharedLog
from store.log import Leader, RelayPosition, StoreConfig, TaskApplication, advisory_key, leading
from store.public_form import NatsNames, dumps, event_message, reference_message
from workers.jetstream_publish import Pipelined
from workers.leadership import restarting

log = logging.getLogger(__name__)

IDLE_WAIT_S = 1.0
"""How long the relay waits for the next event before looking again (a commit wakes it at once)."""
DUPLICATE_WINDOW_S = 600.0
NATS_CONNECT_S = 10.0
KNOWN_TENANTS = 100_000
"""Tasks whose tenant the relay remembers (a task's tenant never changes; forgotten ones are read)."""
PIPELINE = 256
"""Acknowledged publishes in flight at once (``Pipelined``'s bound; the relay awaits one per batch)."""
PUBLISH_TIMEOUT_S = 5.0
"""How long a batch's acknowledgements may take (nats-py's own timeout) before the relay starts over."""
EXPECTED_LAST_SEQUENCE = "Nats-Expected-Last-Sequence"
DEFAULT_MAX_PAYLOAD = 1024 * 1024
"""NATS's default ``max_payload``; the relay reads the server's own figure when it connects."""


def header_size(headers: dict[str, str]) -> int:
    """Bytes the headers take on the wire (``NATS/1.0`` block), which count against max_payload."""
    return len("NATS/1.0\r\n") + sum(len(k) + len(v) + 4 for k, v in headers.items()) + 2


@dataclass(frozen=True)
class StreamLimits:
    """The limits the relay keeps the stream at (``LONGHAUL_NATS_MAX_AGE``, ``LONGHAUL_NATS_REPLICAS``).

    Events older than ``max_age`` leave the stream only: the log keeps every event.
    """

    max_age: timedelta = timedelta(days=7)
    replicas: int = 1


def _nanoseconds(seconds: float | None) -> int:
    """A stream's ``max_age`` as the server keeps it (0 and unset: no limit)."""
    return round((seconds or 0) * 1e9)


async def ensure_stream(js: Any, names: NatsNames, limits: StreamLimits | None = None) -> None:
    """Create the deployment's stream with ``limits``, or bring an existing one to them.

    Only ``max_age`` and the replica count are compared and updated; every other part of an
    existing stream's config (limits set with the ``nats`` CLI, say) is kept as it is.
    """
    await ensure_stream_named(js, names.stream, names.all_subjects, limits)


async def ensure_stream_named(
    js: Any, stream: str, subjects: str, limits: StreamLimits | None = None
) -> None:
    """``ensure_stream`` for any stream of the deployment (the sequencer's checkpoints have their own)."""
    limits = limits or StreamLimits()
    max_age = limits.max_age.total_seconds()
    try:
        info = await js.stream_info(stream)
    except NotFoundError:
        await js.add_stream(
            StreamConfig(
                name=stream,
                subjects=[subjects],
                storage=StorageType.FILE,
                duplicate_window=DUPLICATE_WINDOW_S,
                max_age=max_age,
                num_replicas=limits.replicas,
            )
        )
        log.info("stream %s: created (max_age %ss, num_replicas %d)", stream, f"{max_age:g}", limits.replicas)
        return
    config = info.config
    changes = []
    if _nanoseconds(config.max_age) != _nanoseconds(max_age):
        changes.append(f"max_age {(config.max_age or 0):g}s -> {max_age:g}s")
    if (config.num_replicas or 1) != limits.replicas:
        changes.append(f"num_replicas {config.num_replicas or 1} -> {limits.replicas}")
    if not changes:
        return
    await js.update_stream(dataclasses.replace(config, max_age=max_age, num_replicas=limits.replicas))
    log.info("stream %s: updated %s", stream, ", ".join(changes))


class RelayUnavailableError(RuntimeError):
    """The store is not on PostgreSQL, so there is no log for a relay to follow from outside."""


class Relay:
    """Follows the notification log and publishes to JetStream."""

    def __init__(
        self,
        *,
        store: TaskApplication,
        names: NatsNames,
        limits: StreamLimits | None = None,
        shared_log: SharedLog | None = None,
    ) -> None:
        """``shared_log``: the shared subscription to follow the log on (``up``'s), or one of its own."""
        if not isinstance(store.config, StoreConfig):
            raise RelayUnavailableError(
                "the relay needs the store on PostgreSQL (LONGHAUL_STORE=postgres): an in-memory "
                "store lives inside one process, with no log, position table or leader lock to share"
            )
        self.store = store
        self.names = names
        self.limits = limits or StreamLimits()
        self.shared_log = shared_log
        self._database_url = store.config.database_url
        schema = store.config.schema
        self._position = RelayPosition(schema, names.stream)
        self._lock_key = advisory_key(f"relay:{schema}:{names.stream}")
        self.published = 0
        self.referenced = 0
        self.max_payload = DEFAULT_MAX_PAYLOAD
        self._tenants: OrderedDict[UUID, str] = OrderedDict()
        self._last_seq: int | None = None
        """The stream sequence of the last message acknowledged on this connection (unknown: None)."""

    async def run(self, stop: asyncio.Event) -> None:
        """Relay until ``stop`` is set: wait to lead, relay, and start over after any failure.

        Leadership is a session advisory lock, so it ends with the connection: a relay that
        dies or loses its database connection hands over to a standby within a second. The
        pause before starting over follows ``RESTART_POLICY`` (``workers.leadership``).
        """
        await restarting("relay", lambda: self._lead_and_relay(stop), stop, log)

    async def _lead_and_relay(self, stop: asyncio.Event) -> None:
        async with leading(self._database_url, self._lock_key, stop) as leader:
            if leader is None:
                return
            log.info("relay is the leader for stream %s", self.names.stream)
            await self._relay(leader, stop)

    async def _relay(self, leader: Leader, stop: asyncio.Event) -> None:
        # With unlimited reconnects nats-py retries the first connect forever: bound it here.
        nc = await asyncio.wait_for(nats.connect(self.names.urls, max_reconnect_attempts=-1), NATS_CONNECT_S)
        self.max_payload = nc.max_payload
        self._last_seq = None
        pipeline = Pipelined(nc, PIPELINE)
        try:
            js = nc.jetstream()
            await ensure_stream(js, self.names, self.limits)
            await pipeline.start()
            position = await self._position.load(leader)
            async with LogFollower(self.store, after=position, shared_log=self.shared_log) as follower:
                while not stop.is_set():
                    batch = await follower.next_batch(IDLE_WAIT_S, stop)
                    if batch:
                        await self.publish(js, pipeline, leader, batch)
        finally:
            await pipeline.close()
            await nc.close()

    async def publish(
        self,
        js: Any,
        pipeline: Pipelined,
        leader: Leader,
        batch: Sequence[tuple[Any, Tracking]],
    ) -> int:
        """Publish ``batch`` (events in log order), pipelined, then save its last position.

        Until JetStream has stored a message of this connection that was no duplicate, each
        publish goes alone and is awaited (``js``); from then on each expects the stream's last
        sequence to be its predecessor's (``pipeline``), so none is stored out of order, and only
        the last asks for an acknowledgement. Any failure raises, and the relay starts over.
        """
        tenants = await self._tenants_of(batch)
        last = len(batch) - 1
        pipelined = 0
        acked: asyncio.Future[PubAck] | None = None
        for index, (event, tracking) in enumerate(batch):
            position = tracking.notification_id
            tenant = tenants.get(UUID(str(event.originator_id)), "default")
            headers = {
                "Nats-Msg-Id": f"{self.names.stream}:{position}",
                "Longhaul-Position": str(position),
                "Longhaul-Task": str(event.originator_id),
                "Longhaul-Version": str(event.originator_version),
                "Longhaul-Type": type(event).__name__,
            }
            if self._last_seq is not None:
                headers[EXPECTED_LAST_SEQUENCE] = str(self._last_seq + pipelined)
            payload = self._payload(position, tenant, event, headers)
            subject = self.names.subject(tenant, event.originator_id, type(event).__name__)
            if self._last_seq is None:
                ack = await js.publish(subject, payload, headers=headers, timeout=PUBLISH_TIMEOUT_S)
                if not ack.duplicate:
                    self._last_seq = ack.seq
                continue
            pipelined += 1
            if index < last:  # the last one's acknowledgement answers for this one
                await pipeline.send(subject, payload, headers)
            else:
                acked = await pipeline.publish(subject, payload, headers)
        if acked is not None:
            try:
                done = await asyncio.wait_for(acked, PUBLISH_TIMEOUT_S)
            except BaseException:
                self._last_seq = None
                acked.cancel()
                raise
            self._last_seq = done.seq
        position = batch[-1][1].notification_id
        await self._position.save(leader, position)
        self.published += len(batch)
        return position

    async def _tenants_of(self, batch: Sequence[tuple[Any, Tracking]]) -> dict[UUID, str]:
        """Each task's tenant: from its ``Submitted`` event or memory, else one query for the rest.

        A task's tenant is set when it is submitted and never changes, so the relay asks the run
        queue only for tasks it has not seen since it started (or has forgotten).
        """
        known = self._tenants
        for event, _ in batch:
            if isinstance(event, Task.Submitted):
                known[UUID(str(event.originator_id))] = event.tenant
        ids = {UUID(str(event.originator_id)) for event, _ in batch}
        missing = [i for i in ids if i not in known]
        if missing:
            known.update(await asyncio.to_thread(self.store.run_queue.tenants, missing))
        tenants = {i: known[i] for i in ids if i in known}
        for task_id in tenants:
            known.move_to_end(task_id)
        while len(known) > KNOWN_TENANTS:
            known.popitem(last=False)
        return tenants

    def _payload(self, position: int, tenant: str, event: Any, headers: dict[str, str]) -> bytes:
        """The event's message, or a reference to it when NATS cannot carry it: nothing stalls.

        An event whose message (with its headers) exceeds the server's ``max_payload``, or whose
        body cannot be encoded, goes out as its envelope with ``bodyOmitted``; readers take the
        body from the log. Either way the stream keeps one message per event, in commit order.
        """
        limit = self.max_payload - header_size(headers)
        try:
            payload = dumps(event_message(position, tenant, event)).encode()
        except (TypeError, ValueError) as error:
            reason = f"the body cannot be encoded as JSON ({error}); read it from the log"
        else:
            if len(payload) <= limit:
                return payload
            reason = (
                f"the message ({len(payload)} bytes) exceeds the NATS maximum payload "
                f"({self.max_payload} bytes with headers); read the body from the log"
            )
        log.warning(
            "task %s version %d (%s): published as a reference: %s",
            event.originator_id,
            event.originator_version,
            type(event).__name__,
            reason,
        )
        self.referenced += 1
        return dumps(reference_message(position, tenant, event, reason=reason)).encode()
