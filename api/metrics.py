"""``GET /metrics``: the gateway's view of the deployment, in the Prometheus text format.

Every figure is read from the store when Prometheus scrapes (``StoreCollector``), so any gateway
answers the same for the whole deployment: tasks by state (the run queue), the log's position, how
far the relay, the sequencer and each projection (the current-task view, the retention index)
trail it, the latest checkpoint's size and time, the webhook backlog, attempts and give-ups. Each
app has its own ``CollectorRegistry`` (not the library's global one), so two apps in one process,
or in one test run, never share figures.
Counters a process keeps of itself (a worker's claims and step durations) are registered into the
registry passed as ``extra`` — see ``workers.metrics``; they are only seen here when the worker
runs in the gateway's process (``longhaul up``).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any

from prometheus_client import CollectorRegistry
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector

from api.authentication import Authenticate
from api.overload import LimitInFlight
from domain.states import TaskState
from projections.projector import lags
from store.deliveries import DELIVERY_STATES, delivery_counts
from store.log import PostgresRunQueueRecorder, TaskApplication, read_relay_positions, read_transaction


class StoreCollector(Collector):
    """Reads the deployment's figures from the store at each scrape (a few small queries)."""

    def __init__(self, store: TaskApplication, relay_stream: str | None = None) -> None:
        self.store = store
        self.relay_stream = relay_stream

    def collect(self) -> Iterable[Any]:
        """The metric families, read now."""
        tasks = GaugeMetricFamily(
            "longhaul_tasks",
            "Tasks by state (from the run queue; expired tasks are not counted).",
            labels=["state"],
        )
        counts = self.store.run_queue.state_counts()
        for state in TaskState:
            tasks.add_metric([str(state)], counts.get(str(state), 0))
        yield tasks
        log_position = self.store.recorder.max_notification_id() or 0
        yield GaugeMetricFamily(
            "longhaul_log_position",
            "The highest position (notification id) in the event log.",
            value=log_position,
        )
        yield from self._relay(log_position)
        yield from self._sequencer(log_position)
        yield from self._webhooks()
        found = lags(self.store)
        if found:
            position = GaugeMetricFamily(
                "longhaul_projection_position",
                "The last log position each projection (current-task view, retention index) applied.",
                labels=["projection"],
            )
            behind = GaugeMetricFamily(
                "longhaul_projection_lag",
                "Log positions each projection has not applied yet (an upper bound).",
                labels=["projection"],
            )
            for kept, lag in found:
                position.add_metric([kept.key], lag.position)
                behind.add_metric([kept.key], lag.behind)
            yield position
            yield behind

    def _relay(self, log_position: int) -> Iterator[GaugeMetricFamily]:
        recorder = self.store.recorder
        if not isinstance(recorder, PostgresRunQueueRecorder):
            return  # a memory store: no relay
        positions = read_relay_positions(recorder.datastore)
        if self.relay_stream is not None:
            positions.setdefault(self.relay_stream, 0)  # no relay has published yet
        position = GaugeMetricFamily(
            "longhaul_relay_position",
            "The last log position the relay published to the stream.",
            labels=["stream"],
        )
        lag = GaugeMetricFamily(
            "longhaul_relay_lag",
            "Log positions not yet published to the stream (an upper bound: positions can have gaps).",
            labels=["stream"],
        )
        for stream, relayed in sorted(positions.items()):
            position.add_metric([stream], relayed)
            lag.add_metric([stream], max(0, log_position - relayed))
        yield position
        yield lag

    def _sequencer(self, log_position: int) -> Iterator[GaugeMetricFamily]:
        merkle_log = self.store.merkle_log
        if merkle_log is None:
            return  # a memory store: no sequencer
        sequenced = merkle_log.position()
        yield GaugeMetricFamily(
            "longhaul_sequencer_position",
            "The last log position the sequencer appended to the Merkle tree.",
            value=sequenced,
        )
        yield GaugeMetricFamily(
            "longhaul_sequencer_lag",
            "Log positions not yet in the Merkle tree (an upper bound: positions can have gaps).",
            value=max(0, log_position - sequenced),
        )
        latest = merkle_log.latest_checkpoint()
        yield GaugeMetricFamily(
            "longhaul_checkpoint_size",
            "The tree size (events covered) of the latest signed checkpoint (0: none yet).",
            value=latest.size if latest is not None else 0,
        )
        if latest is not None:
            yield GaugeMetricFamily(
                "longhaul_checkpoint_signed_timestamp_seconds",
                "When the latest checkpoint was signed, in Unix seconds (its age: time() minus this).",
                value=latest.signed_at.timestamp(),
            )

    def _webhooks(self) -> Iterator[GaugeMetricFamily | CounterMetricFamily]:
        recorder = self.store.recorder
        if not isinstance(recorder, PostgresRunQueueRecorder):
            return  # a memory store: no dispatcher
        with read_transaction(recorder.datastore) as curs:
            counts = delivery_counts(curs, recorder.datastore.schema)
        yield GaugeMetricFamily(
            "longhaul_webhook_backlog",
            "Webhook deliveries not finished yet (pending: due, waiting to retry, or in flight).",
            value=counts.by_state.get("pending", 0),
        )
        deliveries = GaugeMetricFamily(
            "longhaul_webhook_deliveries",
            "Webhook deliveries recorded, by state (pending, delivered, gave_up, refused).",
            labels=["state"],
        )
        for state in DELIVERY_STATES:
            deliveries.add_metric([state], counts.by_state.get(state, 0))
        yield deliveries
        attempts = CounterMetricFamily(
            "longhaul_webhook_attempts",
            "Webhook delivery attempts, by outcome (delivered, retry, gave_up, refused).",
            labels=["outcome"],
        )
        for outcome in (*DELIVERY_STATES[1:], "retry"):
            attempts.add_metric([outcome], counts.attempts_by_outcome.get(outcome, 0))
        yield attempts
        yield CounterMetricFamily(
            "longhaul_webhook_give_ups",
            "Webhook deliveries given up: the retry period ended, or the receiver refused the request.",
            value=counts.by_state.get("gave_up", 0),
        )


def gateway_registry(
    store: TaskApplication, *, relay_stream: str | None = None, extra: CollectorRegistry | None = None
) -> CollectorRegistry:
    """A registry of this app's own: the store's figures, plus those of ``extra`` (this process's)."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(StoreCollector(store, relay_stream))
    if extra is not None:
        registry.register(_Forward(extra))
    return registry


class GatewayLoadCollector(Collector):
    """This gateway process's own figures: requests in flight, and requests refused before any handler."""

    def __init__(self, limit: LimitInFlight, authenticate: Authenticate) -> None:
        self.limit = limit
        self.authenticate = authenticate

    def collect(self) -> Iterable[Any]:
        """The in-flight gauge and the refusals counter, read now."""
        yield GaugeMetricFamily(
            "longhaul_gateway_in_flight",
            "Requests this gateway has in flight (accepted, answer not started).",
            value=self.limit.in_flight,
        )
        yield GaugeMetricFamily(
            "longhaul_gateway_in_flight_limit",
            "Requests in flight past which this gateway answers 429 now (moves with the requests' sojourn).",
            value=self.limit.limit,
        )
        refusals = CounterMetricFamily(
            "longhaul_gateway_refusals",
            "Requests this gateway refused before any handler ran, by reason (overloaded, unauthenticated).",
            labels=["reason"],
        )
        refusals.add_metric(["overloaded"], self.limit.refused)
        refusals.add_metric(["unauthenticated"], self.authenticate.refused)
        yield refusals


class _Forward(Collector):
    """The metrics of another registry, as part of this one."""

    def __init__(self, source: CollectorRegistry) -> None:
        self.source = source

    def collect(self) -> Iterable[Any]:
        """Every family of ``source``."""
        return self.source.collect()
