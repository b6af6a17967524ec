"""``GET /metrics``: Prometheus text, with the figures of the store as it is."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from uuid import uuid4

import httpx
import psycopg
import pytest
from litestar import Litestar
from prometheus_client import CollectorRegistry, Counter
from prometheus_client.parser import text_string_to_metric_families

from domain.states import TaskState
from projections.projector import PROJECTIONS
from store.deliveries.records import Attempt, DeliveryRecorder, NewDelivery
from store.evidence.merkle_log import catch_up
from store.evidence.signed_notes import SignerKey
from store.log.application import TaskApplication
from store.log.config import StoreConfig
from store.log.run_queue import RunQueueRow
from tests.api.support import http_client, log_position
from tests.support.projector import projector_running
from tests.support.tasks import new_task

NOW = datetime(2026, 6, 1, 12, tzinfo=UTC)


def _put(store: TaskApplication, state: TaskState, *, expired: bool = False) -> None:
    task = new_task(NOW)
    row = replace(RunQueueRow.of(task), state=str(state), expired=expired)
    store.save(task, run_queue=[row])


def _known_state(store: TaskApplication) -> None:
    for state in (TaskState.WORKING, TaskState.WORKING, TaskState.INPUT_REQUIRED, TaskState.COMPLETED):
        _put(store, state)
    _put(store, TaskState.COMPLETED, expired=True)


async def _scrape(
    app: Litestar,
) -> tuple[httpx.Response, dict[tuple[str, tuple[tuple[str, str], ...]], float]]:
    async with http_client(app) as http:
        response = await http.get("/metrics")
    samples = {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(response.text)
        for sample in family.samples
    }
    return response, samples


async def test_tasks_by_state_and_the_log_position(
    store: TaskApplication, make_app: Callable[..., Litestar]
) -> None:
    _known_state(store)
    response, samples = await _scrape(make_app())

    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/plain")
    tasks = {
        dict(labels)["state"]: value for (name, labels), value in samples.items() if name == "longhaul_tasks"
    }
    assert tasks == {str(s): 0 for s in TaskState} | {
        "TASK_STATE_WORKING": 2,
        "TASK_STATE_INPUT_REQUIRED": 1,
        "TASK_STATE_COMPLETED": 1,
    }
    assert samples[("longhaul_log_position", ())] == 5
    # In memory there is no relay and no current-task view.
    assert not any(name.startswith(("longhaul_relay", "longhaul_projection")) for name, _ in samples)


async def test_metrics_of_this_process_are_included(
    store: TaskApplication, make_app: Callable[..., Litestar]
) -> None:
    mine = CollectorRegistry()
    Counter("longhaul_worker_claims", "Claims.", registry=mine).inc(3)
    _, samples = await _scrape(make_app(process_metrics=mine))
    assert samples[("longhaul_worker_claims_total", ())] == 3
    # Another app's registry is its own: nothing leaks between apps (or tests).
    _, others = await _scrape(make_app())
    assert ("longhaul_worker_claims_total", ()) not in others


@pytest.mark.postgres
async def test_relay_and_projection_lag(
    store: TaskApplication, store_config: StoreConfig, make_app: Callable[..., Litestar]
) -> None:
    _known_state(store)
    with psycopg.connect(store_config.database_url, autocommit=True) as conn:
        conn.execute(
            f'INSERT INTO "{store_config.schema}".longhaul_relay_position (stream, position) VALUES (%s, %s)',
            ("OTHER", 2),
        )
    app = make_app(relay_stream="LONGHAUL_TASKS")
    _, samples = await _scrape(app)

    assert samples[("longhaul_tasks", (("state", "TASK_STATE_WORKING"),))] == 2
    assert samples[("longhaul_log_position", ())] == 5
    assert samples[("longhaul_relay_position", (("stream", "OTHER"),))] == 2
    assert samples[("longhaul_relay_lag", (("stream", "OTHER"),))] == 3
    # The configured stream is reported before any relay published to it.
    assert samples[("longhaul_relay_lag", (("stream", "LONGHAUL_TASKS"),))] == 5
    for projection in ("task_view", "retention_index"):
        assert samples[("longhaul_projection_position", (("projection", projection),))] == 0
        assert samples[("longhaul_projection_lag", (("projection", projection),))] == 5

    with projector_running(store_config, projections=PROJECTIONS[:1]) as runner:  # the view alone
        await asyncio.to_thread(runner.wait, log_position(store), 20.0)
    _, samples = await _scrape(app)
    view = (("projection", "task_view"),)
    assert samples[("longhaul_projection_position", view)] == 5
    assert samples[("longhaul_projection_lag", view)] == 0
    assert samples[("longhaul_projection_lag", (("projection", "retention_index"),))] == 5  # no runner


@pytest.mark.postgres
async def test_webhook_backlog_attempts_and_give_ups(
    store: TaskApplication, store_config: StoreConfig, make_app: Callable[..., Litestar]
) -> None:
    recorder = DeliveryRecorder(store_config.database_url, store_config.schema, pool_size=1)
    await recorder.open()
    try:
        task_id = uuid4()
        new = [
            NewDelivery(f"msg_{c}", task_id, "acme", 3, "Completed", NOW, c, "https://example.com", "{}")
            for c in ("a", "b", "c")
        ]
        lease = timedelta(seconds=30)
        recorded = await recorder.record(new, NOW, claimant="me", lease=lease)
        assert recorded.new == 3
        assert (await recorder.record(new, NOW, claimant="me", lease=lease)).new == 0  # nothing new
        claimed = {d.config_id: d for d in recorded.claimed}  # each the head of its lane
        assert sorted(claimed) == ["a", "b", "c"]
        delivered = Attempt(1, NOW, 1.0, 200, None, "delivered", "me")
        assert await recorder.finish(claimed["a"], delivered, state="delivered")
        refused = Attempt(1, NOW, 1.0, 400, "HTTP 400", "gave_up", "me")
        assert await recorder.finish(claimed["b"], refused, state="gave_up")
        retry = Attempt(1, NOW, 1.0, 503, "HTTP 503", "retry", "me")
        later = NOW + timedelta(seconds=5)
        assert await recorder.finish(claimed["c"], retry, state="pending", next_attempt_at=later)
    finally:
        await recorder.close()
    _, samples = await _scrape(make_app())
    assert samples[("longhaul_webhook_backlog", ())] == 1
    assert samples[("longhaul_webhook_deliveries", (("state", "delivered"),))] == 1
    assert samples[("longhaul_webhook_deliveries", (("state", "refused"),))] == 0
    assert samples[("longhaul_webhook_attempts_total", (("outcome", "retry"),))] == 1
    assert samples[("longhaul_webhook_attempts_total", (("outcome", "delivered"),))] == 1
    assert samples[("longhaul_webhook_give_ups_total", ())] == 1


@pytest.mark.postgres
async def test_sequencer_lag_and_the_latest_checkpoint(
    store: TaskApplication, make_app: Callable[..., Litestar]
) -> None:
    _known_state(store)
    merkle_log = store.merkle_log
    assert merkle_log is not None
    app = make_app()
    _, samples = await _scrape(app)
    assert samples[("longhaul_sequencer_position", ())] == 0
    assert samples[("longhaul_sequencer_lag", ())] == 5
    assert samples[("longhaul_checkpoint_size", ())] == 0
    assert ("longhaul_checkpoint_signed_timestamp_seconds", ()) not in samples  # none signed yet

    signer = SignerKey.generate("longhaul/metrics-test")
    catch_up(merkle_log, store.recorder.select_notifications, signer, NOW)
    _put(store, TaskState.WORKING)
    _, samples = await _scrape(app)
    assert samples[("longhaul_sequencer_position", ())] == 5
    assert samples[("longhaul_sequencer_lag", ())] == 1
    assert samples[("longhaul_checkpoint_size", ())] == 5
    assert samples[("longhaul_checkpoint_signed_timestamp_seconds", ())] == NOW.timestamp()


async def test_no_sequencer_figures_over_a_memory_store(
    store: TaskApplication, make_app: Callable[..., Litestar]
) -> None:
    _, samples = await _scrape(make_app())
    assert not any(name.startswith(("longhaul_sequencer", "longhaul_checkpoint")) for name, _ in samples)
