"""The webhook dispatcher: push notifications for every event of a task with push configs.

Two loops in one process. The *intake* follows a durable JetStream pull consumer
(``longhaul-dispatcher`` on the deployment's stream; it survives restarts of the dispatcher and
of NATS, and several dispatchers share it). For each event of a task with push configs it
records one delivery per config (``store.deliveries``), the event's ``StreamResponse``
(``projections.stream_response``) as the body, and only then acknowledges the message: an
event is never lost between NATS and the record, and a redelivered message records nothing new.
The configs, with their secrets, come from the task in the log: the dispatcher loads the task
at the event's version when it first sees the task, after a push config changed, and whenever
it missed a version (another dispatcher took it); otherwise it uses what it knows.

The *delivery* loop claims due lane heads (a lane is one task and config: its deliveries go out
in version order, each after the one before it was delivered or given up), up to
``concurrency`` at once, and POSTs each to its URL with ``Authorization`` from the config's
authentication, the config token as ``X-A2A-Notification-Token``, and Standard Webhooks
signature headers (``workers.webhook_signing``). Before connecting it checks the URL again with
the SSRF guard (``store.push_urls``): a refused URL is recorded as ``refused``. A 2xx is
delivered; another 4xx than 408 or 429 gives up at once (the receiver refused this request,
and the same request would be refused again); anything else (5xx, 408, 429, a timeout, a
refused connection) is retried under the webhook retry policy (``store.retry``) until its total
time has passed, and then given up. See docs/webhooks.md and ADR 0014.

The dispatcher needs a store on PostgreSQL (the delivery record lives there): over an in-memory
store it refuses to start.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import time
from collections import OrderedDict
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any
from uuid import NAMESPACE_URL, UUID, uuid5

import httpx
import nats
import nats.errors
from nats.js.api import AckPolicy, ConsumerConfig, DeliverPolicy

from domain.clock import Clock
from domain.states import TERMINAL
from domain.task import Task
from projections.event_json import event_message
from projections.stream_response import stream_response
from projections.subjects import NatsNames
from store.application import TaskApplication
from store.config import StoreConfig
from store.deliveries import Attempt, Delivery, DeliveryRecorder, DeliveryState, NewDelivery
from store.errors import PushUrlRefusedError, TaskNotFoundError
from store.push_urls import check_push_url
from store.retry import RetryPolicy, webhook_retry
from workers.relay import NATS_CONNECT_S, StreamLimits, ensure_stream
from workers.webhook_signing import WebhookSigner

log = logging.getLogger(__name__)

DURABLE = "longhaul-dispatcher"
"""The durable consumer's name (one per stream: a stream is one deployment)."""
FETCH_BATCH = 256
ACK_WAIT_S = 30.0
MAX_ACK_PENDING = 4096
POLL_S = 0.25
"""How often the delivery loop looks for due deliveries it was not woken for (retries, others')."""
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


class DispatcherUnavailableError(RuntimeError):
    """The store is not on PostgreSQL, so there is nowhere to record deliveries."""


@dataclass(frozen=True)
class DispatchConfig:
    """A dispatcher's identity and limits."""

    dispatcher_id: str
    policy: RetryPolicy = DEFAULT_RETRY
    timeout_s: float = 10.0
    concurrency: int = 32
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
        self.recorder = DeliveryRecorder(store.config.database_url, store.config.schema)
        self._known: OrderedDict[UUID, _Known] = OrderedDict()
        self._headers: OrderedDict[str, dict[str, str]] = OrderedDict()
        self._wake = asyncio.Event()
        self._http: httpx.AsyncClient | None = None
        self.recorded = 0
        self.attempted = 0

    async def run(self, stop: asyncio.Event) -> None:
        """Take in events and deliver until ``stop`` is set; each loop starts over after a failure."""
        await self.recorder.open()
        limits = httpx.Limits(max_connections=self.config.concurrency * 2, keepalive_expiry=30)
        self._http = httpx.AsyncClient(timeout=self.config.timeout_s, limits=limits, follow_redirects=False)
        try:
            loops = [
                asyncio.ensure_future(self._supervise("intake", self._intake, stop)),
                asyncio.ensure_future(self._supervise("delivery", self._deliver, stop)),
            ]
            await asyncio.gather(*loops)
        finally:
            await self._http.aclose()
            await self.recorder.close()

    async def _supervise(
        self, name: str, loop: Callable[[asyncio.Event], Awaitable[None]], stop: asyncio.Event
    ) -> None:
        backoff = 0.5
        while not stop.is_set():
            try:
                await loop(stop)
                return
            except Exception as error:  # noqa: BLE001 - database or NATS trouble: start over
                log.warning("dispatcher %s failed (%r); starting over in %.1fs", name, error, backoff)
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(stop.wait(), backoff)
                backoff = min(backoff * 2, 10.0)

    # ------------------------------------------------------------------ intake

    async def _intake(self, stop: asyncio.Event) -> None:
        # With unlimited reconnects nats-py retries the first connect forever: bound it here.
        client = await asyncio.wait_for(
            nats.connect(self.names.url, max_reconnect_attempts=-1, reconnect_time_wait=0.5), NATS_CONNECT_S
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
            subscription = await js.pull_subscribe(
                self.names.all_subjects, durable=DURABLE, stream=self.names.stream, config=consumer
            )
            log.info("dispatcher %s following stream %s", self.config.dispatcher_id, self.names.stream)
            while not stop.is_set():
                try:
                    messages = await subscription.fetch(FETCH_BATCH, timeout=1.0)
                except (TimeoutError, nats.errors.TimeoutError):
                    continue
                await self.take(messages)
        finally:
            await client.close()

    async def take(self, messages: list[Any]) -> None:
        """Record the deliveries of ``messages`` (JetStream messages), then acknowledge them."""
        new: list[NewDelivery] = []
        for message in messages:
            try:
                event = json.loads(message.data)
            except ValueError:
                log.warning("dispatcher: a message on %s is not JSON; skipped", message.subject)
                continue
            new += await self._deliveries_for(event)
        if new:
            self.recorded += await self.recorder.record(new, self.clock())
        for message in messages:
            await message.ack()
        if new:
            self._wake.set()

    async def _deliveries_for(self, event: dict[str, Any]) -> list[NewDelivery]:
        task_id, version, kind = UUID(event["taskId"]), int(event["version"]), str(event["type"])
        known = await self._configs_at(task_id, version, kind, event)
        if known is None or not known.configs:
            return []
        if event.get("body") is None:  # a reference: NATS could not carry the body
            event = await asyncio.to_thread(self._event_from_log, task_id, version, event)
        response = stream_response(event, known.context_id)
        if response is None:
            return []
        body = json.dumps(response, separators=(",", ":"), ensure_ascii=False)
        event_time = datetime.fromisoformat(str(event["time"]))
        new = []
        for config_id, config in known.configs.items():
            delivery_id = webhook_id(task_id, config_id, version)
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

    def _event_from_log(self, task_id: UUID, version: int, reference: dict[str, Any]) -> dict[str, Any]:
        for stored in self.store.recorder.select_events(task_id, gt=version - 1, lte=version):
            domain_event = self.store.mapper.to_domain_event(stored)
            return event_message(reference.get("position"), str(reference["tenant"]), domain_event)
        raise TaskNotFoundError(str(task_id))

    def _remember_headers(self, delivery_id: str, headers: dict[str, str]) -> None:
        self._headers[delivery_id] = headers
        while len(self._headers) > KNOWN_HEADERS:
            self._headers.popitem(last=False)

    # ------------------------------------------------------------------ delivery

    async def _deliver(self, stop: asyncio.Event) -> None:
        in_flight: set[asyncio.Task[None]] = set()
        try:
            while not stop.is_set():
                self._wake.clear()
                free = self.config.concurrency - len(in_flight)
                claimed: list[Delivery] = []
                if free > 0:
                    claimed = await self.recorder.claim(
                        self.config.dispatcher_id, self.clock(), self.config.claim_lease, free
                    )
                for delivery in claimed:
                    attempt = asyncio.ensure_future(self._attempt(delivery))
                    in_flight.add(attempt)
                    attempt.add_done_callback(self._attempt_done(in_flight))
                if claimed and len(claimed) == free:
                    continue
                waker = asyncio.ensure_future(self._wake.wait())
                stopper = asyncio.ensure_future(stop.wait())
                await asyncio.wait([waker, stopper], timeout=POLL_S, return_when=asyncio.FIRST_COMPLETED)
                waker.cancel()
                stopper.cancel()
        finally:
            if in_flight:
                await asyncio.gather(*in_flight, return_exceptions=True)

    def _attempt_done(self, in_flight: set[asyncio.Task[None]]) -> Callable[[asyncio.Task[None]], None]:
        def done(attempt: asyncio.Task[None]) -> None:
            in_flight.discard(attempt)
            self._wake.set()  # the lane's next delivery may be due now
            if not attempt.cancelled() and attempt.exception() is not None:
                log.warning("dispatcher: an attempt failed: %r", attempt.exception())

        return done

    async def _attempt(self, delivery: Delivery) -> None:
        """One attempt at ``delivery``, recorded with what it leads to."""
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
            pause = self.config.policy.next_delay(number, elapsed)
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
        await self.recorder.finish(delivery, attempt, state=state, next_attempt_at=next_attempt_at)

    async def _post(self, delivery: Delivery) -> tuple[str, int | None, str | None]:
        """POST the delivery once: ``(outcome, HTTP status, error)``; ``outcome_of`` names the outcome."""
        assert self._http is not None
        try:
            headers = await self._headers_for(delivery)
            await asyncio.to_thread(check_push_url, delivery.url, allow_private=self.config.allow_private)
        except PushUrlRefusedError as refused:
            return "refused", None, str(refused)
        except TaskNotFoundError:
            return "gave_up", None, f"task {delivery.task_id} is no longer in the store (purged)"
        body = delivery.body.encode()
        headers |= self.signer.headers(delivery.webhook_id, delivery.tenant, int(time.time()), body)
        headers["Content-Type"] = CONTENT_TYPE
        try:
            response = await self._http.post(delivery.url, content=body, headers=headers)
        except httpx.HTTPError as failure:
            return "retry", None, f"{type(failure).__name__}: {failure}".removesuffix(": ")
        status = response.status_code
        outcome = outcome_of(status)
        if outcome == "gave_up":
            return outcome, status, f"HTTP {status}: the receiver refused the request; not retried"
        return outcome, status, None if outcome == "delivered" else f"HTTP {status}"

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
