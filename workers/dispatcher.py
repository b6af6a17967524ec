"""The webhook dispatcher: push notifications for every event of a task with push configs.

Two loops in one process. The *intake* runs in one dispatcher at a time (an advisory lock; the
others stand by) and follows a durable JetStream pull consumer (``longhaul-dispatcher`` on the
deployment's stream; it survives restarts of the dispatcher and of NATS). For each event of a
task with push configs it records one delivery per config (``store.deliveries.records``), the event's
``StreamResponse`` (``store.public_form.stream_frames``) as the body, and only then acknowledges
the message: an event is never lost between NATS and the record, and a redelivered message
records nothing new. The configs, with their secrets, come from the task in the log: the
intake loads the task at the event's version when it first sees the task or missed a version,
and otherwise uses what it knows; a config change it records from the message (its id and URL)
while it reads the change's secrets from the log, and it starts nothing of the batch before both
are done (ADR 0042).

The *delivery* loop runs in every dispatcher. A lane is one task and config: its deliveries go
out in version order, each after the one before it was delivered or given up. The intake claims
the heads of the lanes it records (as many as it has room for) and starts them at once; a
finished delivery claims its lane's next in the same transaction; every 0.25 s a claim query
takes due heads nobody holds (retries, the rest, lanes of a dispatcher that died). Up to
``concurrency`` deliveries run at once; each POSTs to its URL with ``Authorization`` from the config's
authentication, the config token as ``X-A2A-Notification-Token``, and Standard Webhooks
signature headers (``workers.webhook_signing``). Before connecting it checks the URL again with
the SSRF guard (``store.deliveries.push_urls``): a refused URL is recorded as ``refused``. A 2xx is
delivered; another 4xx than 408 or 429 gives up at once (the receiver refused this request,
and the same request would be refused again); anything else (5xx, 408, 429, a timeout, a
refused connection) is retried under the webhook retry policy (``store.log.retry``) until its total
time has passed, and then given up. See docs/webhooks.md and ADR 0014. A body's stored files
(``domain.files``) get their URLs as it is sent (``store.public_form.FileLinks``): the record
keeps the log's form.

The dispatcher needs a store on PostgreSQL (the delivery record lives there): over an in-memory
store it refuses to start.

Longer than 500 lines on purpose: the intake, the lanes and the delivery attempt share the
dispatcher's loop, its leases and its counters; what stands alone is elsewhere
(``store/deliveries``, ``workers/webhook_signing.py``, ``workers/webhook_resolver.py``,
``workers/jetstream_pull.py``).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import random
import time
from collections import OrderedDict, deque
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any
from uuid import NAMESPACE_URL, UUID, uuid5

import aiohttp
import nats
import psycopg
from nats.js.api import AckPolicy, ConsumerConfig, DeliverPolicy
from nats.js.errors import NotFoundError

from domain.clock import Clock
from domain.retry_policy import RetryPolicy
from domain.states import TERMINAL
from domain.task import Task
from store.deliveries import (
    Attempt,
    Delivery,
    DeliveryRecorder,
    DeliveryState,
    Finished,
    NewDelivery,
    Recorded,
    check_push_url,
)
from store.log import (
    Leader,
    PostgresRunQueueRecorder,
    PushUrlRefusedError,
    StoreConfig,
    TaskApplication,
    TaskNotFoundError,
    advisory_key,
    leading,
    select_events_at,
    webhook_retry,
)
from store.public_form import FileLinks, NatsNames, event_message, stream_response
from workers.jetstream_pull import Pull
from workers.leadership import restarting
from workers.relay import NATS_CONNECT_S, StreamLimits, ensure_stream
from workers.webhook_resolver import PublicOnlyResolver, refused_by_resolver
from workers.webhook_signing import WebhookSigner

log = logging.getLogger(__name__)

DURABLE = "longhaul-dispatcher"
"""The durable consumer's name (one per stream: a stream is one deployment)."""
FETCH_BATCH = 256
ACK_WAIT_S = 30.0
MAX_ACK_PENDING = 4096
LOCK_CHECK_S = 5.0
"""How often the intake checks that the connection holding its leadership lock is alive."""
POLL_S = 0.25
"""How often the delivery loop looks for due deliveries it was not woken for (retries, others')."""
LINGER_S = 0.02
"""While no task with push configs has been seen for ``QUIET_S``, the intake takes the stream in
bursts this far apart (``Pull.linger_s``) instead of each message as it is stored (ADR 0058)."""
QUIET_S = 10.0
"""How long after the last event of a task with push configs the intake takes each message as it arrives."""
KNOWN_TASKS = 20_000
"""Tasks whose configs the intake remembers (least recently seen are forgotten, then reloaded)."""
KNOWN_HEADERS = 100_000
"""Deliveries whose auth headers the dispatcher remembers (forgotten ones are read from the log)."""
CONFIG_EVENTS = frozenset({"PushConfigSet", "PushConfigRemoved"})
WEBHOOK_NAMESPACE = uuid5(NAMESPACE_URL, "https://longhaul.invalid/webhook-deliveries")
RETRIED_4XX = frozenset({408, 429})
"""Client errors that say "try again later": retried like a 5xx."""
CONTENT_TYPE = "application/a2a+json"
DEFAULT_RETRY = webhook_retry(total_s=24 * 3600.0)
"""Retries for 24 hours (``LONGHAUL_WEBHOOK_RETRY_FOR``), pauses from 0.5-1 s up to 30-60 min."""


def _lanes_of(deliveries: list[Delivery]) -> list[list[Delivery]]:
    """``deliveries`` by lane, each lane's in version order (the lanes in order of their heads)."""
    lanes: dict[tuple[UUID, str], list[Delivery]] = {}
    for delivery in sorted(deliveries, key=lambda d: d.version):
        lanes.setdefault((delivery.task_id, delivery.config_id), []).append(delivery)
    return list(lanes.values())


class DispatcherUnavailableError(RuntimeError):
    """The store is not on PostgreSQL, so there is nowhere to record deliveries."""


@dataclass(frozen=True)
class DispatchConfig:
    """A dispatcher's identity and limits."""

    dispatcher_id: str
    policy: RetryPolicy = DEFAULT_RETRY
    timeout_s: float = 10.0
    concurrency: int = 128
    allow_private: bool = False

    @property
    def claim_lease(self) -> timedelta:
        """How long a claim holds a lane: longer than any attempt (the HTTP timeout, and then some)."""
        return timedelta(seconds=self.timeout_s + max(5.0, self.timeout_s))


@dataclass
class _Known:
    """What the intake knows of one task: as of ``version``, its context, tenant and configs."""

    version: int
    context_id: str
    tenant: str
    configs: dict[str, dict[str, Any]]


def webhook_id(task_id: UUID, config_id: str, version: int) -> str:
    """The delivery's ``webhook-id``: derived from the event and config, the same on every retry."""
    return "msg_" + uuid5(WEBHOOK_NAMESPACE, f"{task_id}/{config_id}/{version}").hex


def auth_headers(config: dict[str, Any]) -> dict[str, str]:
    """``Authorization`` from the config's authentication, ``X-A2A-Notification-Token`` from its token."""
    headers = {}
    authentication = config.get("authentication")
    if isinstance(authentication, dict) and authentication.get("scheme"):
        credentials = authentication.get("credentials")
        scheme = str(authentication["scheme"])
        headers["Authorization"] = f"{scheme} {credentials}" if credentials else scheme
    if config.get("token"):
        headers["X-A2A-Notification-Token"] = str(config["token"])
    return headers


def outcome_of(status: int | None) -> str:
    """``delivered`` (2xx), ``gave_up`` (a 4xx that is no "try later") or ``retry`` (anything else)."""
    if status is not None and 200 <= status < 300:
        return "delivered"
    if status is not None and 400 <= status < 500 and status not in RETRIED_4XX:
        return "gave_up"
    return "retry"


class Dispatcher:
    """Records deliveries from the stream and delivers them, until stopped."""

    def __init__(
        self,
        *,
        store: TaskApplication,
        names: NatsNames,
        signer: WebhookSigner,
        config: DispatchConfig,
        clock: Clock,
        limits: StreamLimits | None = None,
        links: FileLinks | None = None,
    ) -> None:
        if not isinstance(store.config, StoreConfig):
            raise DispatcherUnavailableError(
                "the dispatcher needs the store on PostgreSQL (LONGHAUL_STORE=postgres): an in-memory "
                "store lives inside one process, with no delivery record or stream to share"
            )
        self.store = store
        self.names = names
        self.signer = signer
        self.config = config
        self.clock = clock
        self.limits = limits
        self.links = links
        """The URLs a webhook's stored files are given as it is sent (``store.public_form.FileLinks``)."""
        self.recorder = DeliveryRecorder(store.config.database_url, store.config.schema)
        self._known: OrderedDict[UUID, _Known] = OrderedDict()
        self._headers: OrderedDict[str, dict[str, str]] = OrderedDict()
        self._wake = asyncio.Event()
        self._ready: deque[tuple[datetime, list[Delivery]]] = deque()
        """Lanes claimed for this dispatcher outside the delivery loop (their claimed deliveries in
        version order), with when they were claimed."""
        self._from_log: dict[tuple[UUID, int], Any] = {}
        self._incomplete: dict[tuple[UUID, int], dict[str, Any]] = {}
        """The batch's configs set as NATS carried them (no secrets), by their ``PushConfigSet``."""
        self._unsigned: list[tuple[str, dict[str, Any]]] = []
        """The batch's deliveries built from those configs, whose headers wait for the secrets."""
        self._log_reads: psycopg.AsyncConnection[Any] | None = None
        """The intake's connection (autocommit, the one holding its lock): its reads of the log."""
        self._in_flight: set[asyncio.Task[None]] = set()
        self._lanes: dict[tuple[UUID, str], bool] = {}
        """Lanes an attempt of this dispatcher runs in, and whether more was recorded for them."""
        self._intake_key = advisory_key(f"dispatcher-intake:{store.config.schema}:{names.stream}")
        self._http: aiohttp.ClientSession | None = None
        self._pushed_at = float("-inf")
        """When (``time.monotonic``) the intake last took an event of a task with push configs."""
        self.recorded = 0
        self.attempted = 0

    async def run(self, stop: asyncio.Event) -> None:
        """Take in events and deliver until ``stop`` is set; each loop starts over after a failure."""
        await self.recorder.open()
        # aiohttp, not httpx: httpcore's pool scans every connection per request, which made the
        # dispatcher CPU-bound with a few dozen POSTs in flight (ADR 0014).
        self._http = aiohttp.ClientSession(
            timeout=aiohttp.ClientTimeout(total=self.config.timeout_s),
            connector=aiohttp.TCPConnector(
                limit=self.config.concurrency * 2,
                keepalive_timeout=30,
                # With the guard on, the connection resolves names through the check itself.
                resolver=None if self.config.allow_private else PublicOnlyResolver(),
            ),
            auto_decompress=False,
        )
        try:
            loops = [
                asyncio.ensure_future(self._supervise("intake", self._intake, stop)),
                asyncio.ensure_future(self._supervise("delivery", self._deliver, stop)),
            ]
            await asyncio.gather(*loops)
        finally:
            if self._in_flight:  # the intake starts attempts too: let the last ones end first
                await asyncio.gather(*self._in_flight, return_exceptions=True)
            await self._http.close()
            await self.recorder.close()

    async def _supervise(
        self, name: str, loop: Callable[[asyncio.Event], Awaitable[None]], stop: asyncio.Event
    ) -> None:
        await restarting(f"dispatcher {name}", lambda: loop(stop), stop, log)

    # ------------------------------------------------------------------ intake

    async def _intake(self, stop: asyncio.Event) -> None:
        """Lead the intake (one dispatcher at a time), then follow the stream until ``stop``.

        One intake records in stream order, so a lane's deliveries are recorded in version
        order; every dispatcher delivers. Leadership is a session advisory lock, held on a
        connection of its own and checked every few seconds: it ends with that connection.
        """
        assert isinstance(self.store.config, StoreConfig)
        async with leading(self.store.config.database_url, self._intake_key, stop) as lock:
            if lock is None:
                return
            self._log_reads = lock.connection
            try:
                await self._follow(stop, lock)
            finally:
                self._log_reads = None

    async def _follow(self, stop: asyncio.Event, lock: Leader) -> None:
        # With unlimited reconnects nats-py retries the first connect forever: bound it here.
        client = await asyncio.wait_for(
            nats.connect(self.names.urls, max_reconnect_attempts=-1, reconnect_time_wait=0.5), NATS_CONNECT_S
        )
        try:
            js = client.jetstream()
            await ensure_stream(js, self.names, self.limits)
            consumer = ConsumerConfig(
                durable_name=DURABLE,
                ack_policy=AckPolicy.EXPLICIT,
                ack_wait=ACK_WAIT_S,
                max_ack_pending=MAX_ACK_PENDING,
                deliver_policy=DeliverPolicy.ALL,
            )
            try:
                await js.consumer_info(self.names.stream, DURABLE)
            except NotFoundError:
                await js.add_consumer(self.names.stream, consumer)
            log.info("dispatcher %s following stream %s", self.config.dispatcher_id, self.names.stream)
            checked = time.monotonic()
            pull = Pull(client, self.names.stream, DURABLE, batch=FETCH_BATCH, linger_s=self.linger_s)
            async for messages in pull.batches(stop):
                if time.monotonic() - checked > LOCK_CHECK_S:
                    await lock.check()  # the lock's connection is alive: still the leader
                    checked = time.monotonic()
                await self.take(messages)
        finally:
            await client.close()

    def linger_s(self) -> float:
        """How long the intake's next pull request waits to take a burst (``Pull.linger_s``).

        ``LINGER_S`` while no event of a task with push configs came for ``QUIET_S``, else 0 (each
        message as it arrives). Where no task has push configs, every event is taken for nothing;
        in bursts it costs NATS and this process a wake-up per burst instead of one per event (ADR
        0058). The first event after the stream was idle still comes at once (``Pull``), and one of a
        task with push configs makes the intake take each message as it arrives again.
        """
        return LINGER_S if time.monotonic() - self._pushed_at > QUIET_S else 0.0

    async def take(self, messages: list[Any]) -> None:
        """Record the deliveries of ``messages`` (JetStream messages), then acknowledge them."""
        events = []
        for message in messages:
            try:
                events.append(json.loads(message.data))
            except ValueError:
                log.warning("dispatcher: a message on %s is not JSON; skipped", message.subject)
        # What a record needs and the messages cannot carry (an oversize body): one query first.
        bodiless = [(UUID(e["taskId"]), int(e["version"])) for e in events if e.get("body") is None]
        self._from_log = await self._stored_events(bodiless) if bodiless else {}
        self._incomplete, self._unsigned = {}, []
        new: list[NewDelivery] = []
        for event in events:
            new += await self._deliveries_for(event)
        # A config change's secrets are needed to POST, not to record: read from the log while the
        # batch is recorded (ADR 0042), both done before anything of the batch goes out.
        completing = (
            asyncio.ensure_future(self._complete_configs(self._incomplete, self._unsigned))
            if self._incomplete
            else None
        )
        try:
            recorded = await self._record(new) if new else None
        finally:
            if completing is not None:
                await completing
        if recorded is not None:
            claimed_at = self.clock()
            self._ready.extend((claimed_at, lane) for lane in _lanes_of(recorded.claimed))
            await self._behind(recorded.waiting)
            # Recorded: what was claimed goes out now, before the acknowledgements. Started here,
            # not by waking the delivery loop: the acknowledgements do not yield to the event
            # loop, so a woken loop ran only after all of them. One yield lets each new attempt
            # send its POST first.
            self._start(self._take_ready(self.config.concurrency - len(self._in_flight)))
            await asyncio.sleep(0)
        for message in messages:
            await message.ack()

    async def _record(self, new: list[NewDelivery]) -> Recorded:
        # Claim at most what this dispatcher can start now: other dispatchers take the rest.
        free = self.config.concurrency - len(self._in_flight) - len(self._ready)
        recorded = await self.recorder.record(
            new,
            self.clock(),
            claimant=self.config.dispatcher_id,
            lease=self.config.claim_lease,
            claim_limit=max(0, free),
        )
        self.recorded += recorded.new
        return recorded

    async def _complete_configs(
        self, incomplete: dict[tuple[UUID, int], dict[str, Any]], unsigned: list[tuple[str, dict[str, Any]]]
    ) -> None:
        """Complete the configs set in this batch with their secrets from the log, then their headers.

        ``incomplete`` holds each config as NATS carried it (without ``token`` and credentials),
        the very dict the task's ``_Known`` holds, keyed by its ``PushConfigSet``; ``unsigned``
        the deliveries built from them. A task whose change is not in the log (purged since) or
        whose read failed is forgotten (``_Known``), and its deliveries' headers are not
        remembered: an attempt then reads the config from the log itself (``_headers_for``).
        """
        try:
            stored = await self._stored_events(list(incomplete))
        except BaseException:
            for task_id, _ in incomplete:
                self._known.pop(task_id, None)
            raise
        completed = set()
        for (task_id, version), config in incomplete.items():
            event = stored.get((task_id, version))
            if isinstance(event, Task.PushConfigSet):
                config.clear()
                config.update(event.config)
                completed.add(id(config))
            else:
                self._known.pop(task_id, None)
        for delivery_id, config in unsigned:
            if id(config) in completed:
                self._remember_headers(delivery_id, auth_headers(config))

    async def _behind(self, lanes: set[tuple[UUID, str]]) -> None:
        """New deliveries that wait behind a pending one: make sure their lane moves on to them.

        A lane this dispatcher is delivering picks them up when its current delivery ends (its
        attempt is told here). For any other lane the head may have finished while they were
        being recorded, too early to see them: its heads are claimed now if due.
        """
        elsewhere = []
        for lane in lanes:
            if lane in self._lanes:
                self._lanes[lane] = True
            else:
                elsewhere.append(lane)
        if elsewhere:
            heads = await self.recorder.claim_lanes(
                elsewhere, self.config.dispatcher_id, self.clock(), self.config.claim_lease
            )
            claimed_at = self.clock()
            self._ready.extend((claimed_at, [d]) for d in heads)

    async def _deliveries_for(self, event: dict[str, Any]) -> list[NewDelivery]:
        task_id, version, kind = UUID(event["taskId"]), int(event["version"]), str(event["type"])
        known = await self._configs_at(task_id, version, kind, event)
        if known is None or not known.configs:
            return []
        self._pushed_at = time.monotonic()
        if event.get("body") is None:  # a reference: NATS could not carry the body
            try:
                event = await self._event_from_log(task_id, version, event)
            except TaskNotFoundError:
                return []
        response = stream_response(event, known.context_id)
        if response is None:
            return []
        body = json.dumps(response, separators=(",", ":"), ensure_ascii=False)
        event_time = datetime.fromisoformat(str(event["time"]))
        new = []
        for config_id, config in known.configs.items():
            delivery_id = webhook_id(task_id, config_id, version)
            if any(config is waiting for waiting in self._incomplete.values()):
                self._unsigned.append((delivery_id, config))  # its headers once its secrets are read
            else:
                self._remember_headers(delivery_id, auth_headers(config))
            new.append(
                NewDelivery(
                    webhook_id=delivery_id,
                    task_id=task_id,
                    tenant=known.tenant,
                    version=version,
                    event_type=kind,
                    event_time=event_time,
                    config_id=config_id,
                    url=str(config["url"]),
                    body=body,
                )
            )
        return new

    async def _configs_at(
        self, task_id: UUID, version: int, kind: str, event: dict[str, Any]
    ) -> _Known | None:
        """The task's push configs as of ``version``: from memory when nothing could have changed them."""
        known = self._known.get(task_id)
        if kind == "Submitted" and event.get("body") is not None:
            body = event["body"]
            known = _Known(version, str(body["context_id"]), str(event["tenant"]), {})
        elif known is not None and kind in CONFIG_EVENTS and version == known.version + 1:
            if not await self._change(known, task_id, version, kind, event):
                self._known.pop(task_id, None)
                return None  # purged since (archived): nothing to deliver
        elif known is None or kind in CONFIG_EVENTS or version != known.version + 1:
            try:
                task = await asyncio.to_thread(self.store.get, task_id, version)
            except TaskNotFoundError:
                self._known.pop(task_id, None)
                return None  # purged since (archived): nothing to deliver
            known = _Known(version, task.context_id, task.tenant, dict(task.push_configs))
            if task.state in TERMINAL:
                self._known.pop(task_id, None)
                return known
        else:
            known.version = version
        self._known[task_id] = known
        self._known.move_to_end(task_id)
        if kind in {"Completed", "Failed", "Canceled", "Rejected", "Expired"}:
            self._known.pop(task_id, None)  # nothing follows that needs a delivery
        while len(self._known) > KNOWN_TASKS:
            self._known.popitem(last=False)
        return known

    async def _change(
        self, known: _Known, task_id: UUID, version: int, kind: str, event: dict[str, Any]
    ) -> bool:
        """Apply the config change at ``version`` to ``known``; False if the log no longer has it."""
        body = event.get("body")
        if body is not None:
            # From the message: what a record needs (the config's id and URL). NATS carries a
            # config without its secrets; ``take`` completes it from the log meanwhile.
            if kind == "PushConfigSet":
                config = dict(body["config"])
                known.configs[str(config["id"])] = config
                self._incomplete[(task_id, version)] = config
            else:
                known.configs.pop(str(body["config_id"]), None)
        else:
            # Read from the log (the message had no body to carry it).
            try:
                stored = await self._stored_event(task_id, version)
            except TaskNotFoundError:
                return False
            if isinstance(stored, Task.PushConfigSet):
                known.configs[stored.config["id"]] = dict(stored.config)
            elif isinstance(stored, Task.PushConfigRemoved):
                known.configs.pop(stored.config_id, None)
        known.version = version
        return True

    async def _stored_events(self, keys: list[tuple[UUID, int]]) -> dict[tuple[UUID, int], Any]:
        """The events at ``keys`` (task id, version), as the log holds them: one query, no replay.

        Read on the intake's own connection (the one that holds its lock), in the event loop.
        """
        recorder = self.store.recorder
        assert isinstance(recorder, PostgresRunQueueRecorder)
        assert self._log_reads is not None
        stored = await select_events_at(
            self._log_reads, recorder.datastore.schema, recorder.events_table_name, keys
        )
        return {k: self.store.mapper.to_domain_event(e) for k, e in stored.items()}

    async def _stored_event(self, task_id: UUID, version: int) -> Any:
        """The task's event at ``version``: from the batch's read, else one query."""
        found = self._from_log.get((task_id, version))
        if found is None:
            found = (await self._stored_events([(task_id, version)])).get((task_id, version))
        if found is None:
            raise TaskNotFoundError(str(task_id))
        return found

    async def _event_from_log(self, task_id: UUID, version: int, reference: dict[str, Any]) -> dict[str, Any]:
        domain_event = await self._stored_event(task_id, version)
        return event_message(reference.get("position"), str(reference["tenant"]), domain_event)

    def _remember_headers(self, delivery_id: str, headers: dict[str, str]) -> None:
        self._headers[delivery_id] = headers
        while len(self._headers) > KNOWN_HEADERS:
            self._headers.popitem(last=False)

    # ------------------------------------------------------------------ delivery

    async def _deliver(self, stop: asyncio.Event) -> None:
        """Start what the intake claimed as it comes; look for other due deliveries every ``POLL_S``.

        The claim query (retries, lanes freed by other dispatchers or expired claims) runs on the
        poll only, not on every wake-up: a lane moves on by itself (``_attempt`` claims its next
        delivery as it finishes one), and the intake hands over the heads it claimed.
        """
        in_flight = self._in_flight
        polled = 0.0
        try:
            while not stop.is_set():
                self._wake.clear()
                free = self.config.concurrency - len(in_flight)
                claimed = self._take_ready(free)
                if free > len(claimed) and time.monotonic() - polled >= POLL_S:
                    polled = time.monotonic()
                    now = self.clock()
                    heads = await self.recorder.claim(
                        self.config.dispatcher_id, now, self.config.claim_lease, free - len(claimed)
                    )
                    claimed += [(now, [d]) for d in heads]
                self._start(claimed)
                waker = asyncio.ensure_future(self._wake.wait())
                stopper = asyncio.ensure_future(stop.wait())
                await asyncio.wait([waker, stopper], timeout=POLL_S, return_when=asyncio.FIRST_COMPLETED)
                waker.cancel()
                stopper.cancel()
        finally:
            if in_flight:
                await asyncio.gather(*in_flight, return_exceptions=True)

    def _start(self, claimed: list[tuple[datetime, list[Delivery]]]) -> None:
        """Start an attempt at each claimed lane (its deliveries in version order)."""
        for claimed_at, lane in claimed:
            attempt = asyncio.ensure_future(self._attempt(lane, claimed_at))
            self._in_flight.add(attempt)
            attempt.add_done_callback(self._attempt_done(self._in_flight))

    def _take_ready(self, free: int) -> list[tuple[datetime, list[Delivery]]]:
        """Up to ``free`` lanes the intake claimed for us, leaving out claims too old to use.

        A claim that waited for a free slot for half its lease is left to expire: another
        dispatcher (or our own claim query) takes the lane then, with a lease of its own.
        """
        fresh_after = self.clock() - self.config.claim_lease / 2
        taken: list[tuple[datetime, list[Delivery]]] = []
        while self._ready and len(taken) < free:
            claimed_at, lane = self._ready.popleft()
            if claimed_at >= fresh_after:
                taken.append((claimed_at, lane))
        return taken

    def _attempt_done(self, in_flight: set[asyncio.Task[None]]) -> Callable[[asyncio.Task[None]], None]:
        def done(attempt: asyncio.Task[None]) -> None:
            in_flight.discard(attempt)
            if self._ready:
                self._wake.set()  # a slot is free for what the intake claimed
            if not attempt.cancelled() and attempt.exception() is not None:
                log.warning("dispatcher: an attempt failed: %r", attempt.exception())

        return done

    async def _attempt(self, claimed: list[Delivery], claimed_at: datetime) -> None:
        """Attempt the lane's ``claimed`` deliveries in order, then each next one due, claimed as it finishes.

        A 2xx lets the lane's next claimed delivery go out at once, while the finish of the one
        before is recorded behind it (the lane's order holds: a delivery is sent only after the
        one before it was answered, and its own finish waits for that finish). A retry, a lost
        claim or a claim past half its lease stops the lane short: the rest is given back.

        While it runs the lane is in ``_lanes``; the intake marks it there when it records more
        for the lane, and a finish that claimed nothing then claims the lane's head once more
        (the delivery may have been recorded too late for the finish to see it).
        """
        lane = (claimed[0].task_id, claimed[0].config_id)
        self._lanes[lane] = False
        queue = deque(claimed)
        behind: asyncio.Future[Finished] | None = None
        """The finish of the delivery before, still being recorded."""
        try:
            while queue:
                delivery = queue.popleft()
                attempt, state, next_attempt_at = await self._attempt_one(delivery)
                if behind is not None:
                    before, behind = await behind, None
                    if not before.recorded:  # the claim was lost: the lane is another's now
                        queue.appendleft(delivery)  # given back unrecorded (the claim is gone anyway)
                        break
                fresh = bool(queue) and self.clock() < claimed_at + self.config.claim_lease / 2
                if state == "delivered" and fresh:
                    behind = asyncio.ensure_future(
                        self._finish(delivery, attempt, state, next_attempt_at, None)
                    )
                    continue
                if queue and not fresh and state != "pending":
                    # What is left was claimed too long ago to be sure of: give it back, claim anew.
                    await self.recorder.release(list(queue), self.config.dispatcher_id)
                    queue.clear()
                finished = await self._finish(
                    delivery, attempt, state, next_attempt_at, None if queue else self.config.claim_lease
                )
                if state == "pending" or not finished.recorded:
                    break
                following = finished.next
                if not queue and following is None and self._lanes.get(lane):
                    self._lanes[lane] = False
                    heads = await self.recorder.claim_lanes(
                        [lane], self.config.dispatcher_id, self.clock(), self.config.claim_lease
                    )
                    following = heads[0] if heads else None
                if following is not None:
                    queue.append(following)
                    claimed_at = self.clock()
        finally:
            if behind is not None:
                with contextlib.suppress(Exception):
                    await behind
            if queue:
                await self.recorder.release(list(queue), self.config.dispatcher_id)
            self._lanes.pop(lane, None)

    async def _attempt_one(self, delivery: Delivery) -> tuple[Attempt, DeliveryState, datetime | None]:
        """One attempt at ``delivery``: what it was, the state it leaves, when a retry is due."""
        started = self.clock()
        began = time.perf_counter()
        number = delivery.attempts + 1
        outcome, status, error = await self._post(delivery)
        duration_ms = (time.perf_counter() - began) * 1000
        state: DeliveryState = "pending"
        next_attempt_at = None
        if outcome == "delivered":
            state = "delivered"
        elif outcome == "refused":
            state = "refused"
        elif outcome == "gave_up":
            state = "gave_up"
        else:
            elapsed = (started - delivery.created_at).total_seconds()
            pause = self.config.policy.next_delay(number, elapsed, random.random)
            if pause is None:
                state, outcome = "gave_up", "gave_up"
                error = f"{error}; gave up: the retry period ended"
            else:
                next_attempt_at = started + timedelta(seconds=pause)
        attempt = Attempt(
            attempt=number,
            started_at=started,
            duration_ms=duration_ms,
            http_status=status,
            error=error,
            outcome=outcome,
            dispatcher=self.config.dispatcher_id,
        )
        self.attempted += 1
        if state != "pending":
            self._headers.pop(delivery.webhook_id, None)
        if state in ("gave_up", "refused"):
            log.warning(
                "webhook %s of task %s v%d to %s: %s (%s)",
                delivery.webhook_id,
                delivery.task_id,
                delivery.version,
                delivery.url,
                state,
                error,
            )
        return attempt, state, next_attempt_at

    async def _finish(
        self,
        delivery: Delivery,
        attempt: Attempt,
        state: DeliveryState,
        next_attempt_at: datetime | None,
        lease: timedelta | None,
    ) -> Finished:
        """Record the attempt; with ``lease``, claim the lane's next due delivery in the same transaction."""
        return await self.recorder.finish(
            delivery, attempt, state=state, next_attempt_at=next_attempt_at, lease=lease, now=self.clock()
        )

    async def _post(self, delivery: Delivery) -> tuple[str, int | None, str | None]:
        """POST the delivery once: ``(outcome, HTTP status, error)``; ``outcome_of`` names the outcome."""
        assert self._http is not None
        try:
            headers = await self._headers_for(delivery)
            # No DNS here: a literal address is checked now, a name where the connection resolves
            # it (PublicOnlyResolver), so what is checked is what is connected to.
            check_push_url(delivery.url, allow_private=self.config.allow_private, resolve=False)
        except PushUrlRefusedError as refused:
            return "refused", None, str(refused)
        except TaskNotFoundError:
            return "gave_up", None, f"task {delivery.task_id} is no longer in the store (purged)"
        body = (await self._public_body(delivery)).encode()
        headers |= self.signer.headers(delivery.webhook_id, delivery.tenant, int(time.time()), body)
        headers["Content-Type"] = CONTENT_TYPE
        try:
            async with self._http.post(
                delivery.url, data=body, headers=headers, allow_redirects=False
            ) as response:
                status = response.status
                await response.content.readany()  # some of the answer: what a receiver says is not kept
        except (aiohttp.ClientError, TimeoutError) as failure:
            rebound = refused_by_resolver(failure)
            if rebound is not None:
                return "refused", None, f"push URL {delivery.url!r}: {rebound}"
            name = "Timeout" if isinstance(failure, TimeoutError) else type(failure).__name__
            return "retry", None, f"{name}: {failure}".removesuffix(": ")
        outcome = outcome_of(status)
        if outcome == "gave_up":
            return outcome, status, f"HTTP {status}: the receiver refused the request; not retried"
        return outcome, status, None if outcome == "delivered" else f"HTTP {status}"

    async def _public_body(self, delivery: Delivery) -> str:
        """The delivery's body as the receiver sees it: each stored file's part with its URL.

        The record keeps the log's form; the URL is made at each attempt, so that a pre-signed
        one (S3) is fresh when it is sent.
        """
        if self.links is None:
            return delivery.body
        return await self.links.public_text(delivery.body, delivery.task_id)

    async def _headers_for(self, delivery: Delivery) -> dict[str, str]:
        """The delivery's auth headers: remembered, or read from the config as the log held it then."""
        remembered = self._headers.get(delivery.webhook_id)
        if remembered is not None:
            return dict(remembered)
        task: Task = await asyncio.to_thread(self.store.get, delivery.task_id, delivery.version)
        config = task.push_configs.get(delivery.config_id, {})
        headers = auth_headers(config)
        self._remember_headers(delivery.webhook_id, headers)
        return dict(headers)
