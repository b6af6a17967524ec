"""The dispatcher: signed StreamResponses reach receivers, in order, through outages, or give up visibly."""

from __future__ import annotations

import asyncio
import json
from collections import defaultdict
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg
import pytest
from psycopg import sql
from standardwebhooks.webhooks import Webhook

from store.deliveries.records import task_deliveries
from store.log.application import TaskApplication
from store.log.config import StoreConfig
from store.log.retry import webhook_retry
from store.public_form.stream_frames import event_stream_response
from store.public_form.subjects import NatsNames
from tests.support.tasks import new_task
from tests.support.webhooks import Receiver, finished_task, plain_task
from tests.webhooks.conftest import FAST, Run, eventually
from workers import dispatcher as dispatcher_module
from workers.dispatcher import Dispatcher
from workers.relay import Relay
from workers.webhook_signing import WebhookSigner


def _deliveries(store: TaskApplication, task_id: Any) -> list[Any]:
    config = store.config
    assert isinstance(config, StoreConfig)
    with psycopg.connect(config.database_url, autocommit=True) as conn:
        return task_deliveries(conn, config.schema, task_id)


def _expected_bodies(store: TaskApplication, task_id: Any) -> list[dict[str, Any]]:
    """The StreamResponses of the task's events after its push config (v2), in version order."""
    context = store.get(task_id).context_id
    responses = [
        event_stream_response(event, context)
        for event in store.history(task_id)
        if event.originator_version > 2
    ]
    return [r for r in responses if r is not None]


async def test_events_arrive_as_signed_stream_responses_with_token_and_authorization(
    store: TaskApplication, receiver: Receiver, dispatching: Run, secret: str
) -> None:
    task = finished_task(store, receiver.url())
    async with dispatching():
        await eventually(lambda: len(receiver.answered()) >= 3, message="3 deliveries")
    received = receiver.answered()
    assert len(received) == 3
    assert [r.json for r in received] == _expected_bodies(store, task.id)
    assert [next(iter(r.json)) for r in received] == ["statusUpdate", "artifactUpdate", "statusUpdate"]
    assert received[0].json["statusUpdate"]["status"]["state"] == "TASK_STATE_WORKING"
    assert received[-1].json["statusUpdate"]["status"]["state"] == "TASK_STATE_COMPLETED"
    assert received[-1].json["statusUpdate"]["taskId"] == str(task.id)
    verifier = Webhook(secret)
    for request in received:
        assert verifier.verify(request.body, request.headers) == request.json
        assert request.headers["Authorization"] == "Bearer s3cret"
        assert request.headers["X-A2A-Notification-Token"] == "tok-1"
        assert request.headers["Content-Type"] == "application/a2a+json"
    assert len({r.headers["webhook-id"] for r in received}) == 3
    with pytest.raises(Exception, match="signature"):
        Webhook(secret).verify(received[0].body + b" ", received[0].headers)
    assert all(d.state == "delivered" and d.attempts == 1 for d, _ in _deliveries(store, task.id))


async def test_a_receiver_down_then_up_gets_every_event_once_in_version_order(
    store: TaskApplication, receiver: Receiver, dispatching: Run
) -> None:
    receiver.stop()  # connections refused
    tasks = [finished_task(store, receiver.url(), artifacts=3) for _ in range(6)]
    async with dispatching() as dispatcher:
        await eventually(lambda: dispatcher.attempted >= 12, message="attempts against a refusing port")
        await asyncio.sleep(4)
        receiver.status = 503  # up, but failing
        receiver.start()
        await eventually(lambda: len(receiver.answered(503)) >= 12, message="503s")
        await asyncio.sleep(4)
        receiver.status = 200
        await eventually(lambda: len(receiver.answered()) >= 6 * 5, within=30, message="every event")
        await asyncio.sleep(0.5)  # nothing more may come
    answered = receiver.answered()
    assert len(answered) == 6 * 5
    by_task: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for request in answered:
        update = request.json.get("statusUpdate") or request.json["artifactUpdate"]
        by_task[update["taskId"]].append(request.json)
    for task in tasks:
        # Each event once, in version order, after minutes of failures in front of it.
        assert by_task[str(task.id)] == _expected_bodies(store, task.id)
        recorded = _deliveries(store, task.id)
        assert [d.state for d, _ in recorded] == ["delivered"] * 5
        first, attempts = recorded[0]
        assert first.attempts > 3
        outcomes = [a.outcome for a in attempts]
        assert outcomes[-1] == "delivered"
        assert set(outcomes[:-1]) == {"retry"}
        assert {a.http_status for a in attempts[:-1]} >= {None, 503}
    ids = [r.headers["webhook-id"] for r in answered]
    assert len(set(ids)) == len(ids)


async def test_a_delivery_gives_up_after_the_retry_period_and_deliveries_shows_it(
    store: TaskApplication, receiver: Receiver, dispatching: Run, cli: Any
) -> None:
    receiver.status = 503
    task = finished_task(store, receiver.url(), artifacts=0)
    policy = webhook_retry(total_s=1.0, first_delay_s=0.1, max_delay_s=0.2)
    async with dispatching(policy=policy):
        await eventually(
            lambda: [d.state for d, _ in _deliveries(store, task.id)] == ["gave_up", "gave_up"],
            message="both deliveries given up",
        )
    (first, attempts), _ = _deliveries(store, task.id)
    assert attempts[-1].outcome == "gave_up"
    assert "retry period ended" in (first.last_error or "")
    assert (attempts[-1].started_at - first.created_at).total_seconds() + 0.25 >= 1.0
    code, out, _ = cli("deliveries", str(task.id))
    assert code == 0
    assert out.count("GAVE UP") == 2
    assert "503" in out
    code, out, _ = cli("deliveries", str(task.id), "--json")
    rows = [json.loads(line) for line in out.splitlines()]
    assert [r["state"] for r in rows] == ["gave_up", "gave_up"]
    assert rows[0]["attempts"][0]["httpStatus"] == 503


async def test_a_client_error_gives_up_at_once_and_the_lane_moves_on(
    store: TaskApplication, receiver: Receiver, dispatching: Run
) -> None:
    receiver.status = 400
    task = finished_task(store, receiver.url(), artifacts=0)
    async with dispatching():
        await eventually(lambda: len(receiver.answered(400)) >= 2, message="both tried")
    recorded = _deliveries(store, task.id)
    assert [(d.state, d.attempts, d.last_status) for d, _ in recorded] == [("gave_up", 1, 400)] * 2


async def test_a_slow_receiver_for_one_task_does_not_hold_up_another(
    store: TaskApplication, receiver: Receiver, dispatching: Run
) -> None:
    receiver.delays["/slow"] = 1.2
    slow = finished_task(store, receiver.url("/slow"), artifacts=2)
    fast = [finished_task(store, receiver.url("/fast"), artifacts=2) for _ in range(3)]
    async with dispatching():
        await eventually(lambda: len(receiver.answered(path="/fast")) >= 12, message="fast lanes")
        assert len(receiver.answered(path="/slow")) <= 1
        await eventually(lambda: len(receiver.answered(path="/slow")) >= 4, message="the slow lane")
    assert [r.json for r in receiver.answered(path="/slow")] == _expected_bodies(store, slow.id)
    assert {d.state for t in fast for d, _ in _deliveries(store, t.id)} == {"delivered"}


async def test_a_url_that_became_private_is_refused_at_delivery_and_recorded(
    store: TaskApplication, receiver: Receiver, dispatching: Run
) -> None:
    task = finished_task(store, receiver.url(), artifacts=0)  # stored while private URLs were allowed
    async with dispatching(allow_private=False):
        await eventually(
            lambda: [d.state for d, _ in _deliveries(store, task.id)] == ["refused", "refused"],
            message="refused",
        )
    assert receiver.received == []
    (first, attempts), _ = _deliveries(store, task.id)
    assert "not a public address" in (first.last_error or "")
    assert [a.outcome for a in attempts] == ["refused"]


async def test_nothing_is_recorded_for_a_task_without_push_configs(
    store: TaskApplication, receiver: Receiver, dispatching: Run
) -> None:
    now = datetime.now(UTC)
    plain = plain_task(store, now)
    with_config = finished_task(store, receiver.url(), artifacts=0)
    async with dispatching():
        await eventually(lambda: len(receiver.answered()) >= 2, message="the task with a config")
    assert _deliveries(store, plain.id) == []
    assert len(_deliveries(store, with_config.id)) == 2


async def test_two_dispatchers_share_the_lanes_and_never_deliver_one_twice(
    store: TaskApplication, receiver: Receiver, names: NatsNames, secret: str
) -> None:
    receiver.delays["/hook"] = 0.05
    tasks = [finished_task(store, receiver.url(), artifacts=2) for _ in range(10)]
    dispatchers = [
        Dispatcher(
            store=store,
            names=names,
            signer=WebhookSigner(default=secret),
            config=replace(FAST, dispatcher_id=f"d{n}", concurrency=2),
            clock=lambda: datetime.now(UTC),
        )
        for n in (1, 2)
    ]
    stop = asyncio.Event()
    running = asyncio.gather(Relay(store=store, names=names).run(stop), *(d.run(stop) for d in dispatchers))
    try:
        await eventually(lambda: len(receiver.answered()) >= 40, within=30, message="every delivery")
        await asyncio.sleep(0.5)
    finally:
        stop.set()
        await running
    answered = receiver.answered()
    ids = [r.headers["webhook-id"] for r in answered]
    assert len(ids) == len(set(ids)) == 40  # each once: no lane was delivered by both at once
    by_task: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for request in answered:
        update = request.json.get("statusUpdate") or request.json["artifactUpdate"]
        by_task[update["taskId"]].append(request.json)
    for task in tasks:
        assert by_task[str(task.id)] == _expected_bodies(store, task.id)
    who = {a.dispatcher for t in tasks for _, attempts in _deliveries(store, t.id) for a in attempts}
    assert who == {"d1", "d2"}  # both delivered: the intake's leader does not keep every lane


async def test_a_name_that_resolves_to_a_private_address_is_refused_where_it_connects(
    store: TaskApplication, receiver: Receiver, dispatching: Run
) -> None:
    # A name, not a literal: the dispatcher does no DNS of its own, so the refusal comes from the
    # connection's resolution (PublicOnlyResolver), the addresses it would have connected to.
    by_name = receiver.url().replace("127.0.0.1", "localhost")
    task = finished_task(store, by_name, artifacts=0)
    async with dispatching(allow_private=False):
        await eventually(
            lambda: [d.state for d, _ in _deliveries(store, task.id)] == ["refused", "refused"],
            message="refused",
        )
    assert receiver.received == []
    (first, _), _ = _deliveries(store, task.id)
    assert "localhost resolves to" in (first.last_error or "")
    assert "not a public address" in (first.last_error or "")


async def test_every_delivery_is_in_the_record_before_its_post_arrives(
    store: TaskApplication, receiver: Receiver, dispatching: Run
) -> None:
    # The intake records a batch while it reads the batch's config secrets from the log (ADR
    # 0042): nothing of the batch may go out before its record, whichever of the two ends first.
    config = store.config
    assert isinstance(config, StoreConfig)
    seen: dict[str, bool] = {}
    with psycopg.connect(config.database_url, autocommit=True) as conn:
        query = sql.SQL("SELECT 1 FROM {} WHERE webhook_id = %s").format(
            sql.Identifier(config.schema, "longhaul_deliveries")
        )

        def recorded(headers: dict[str, str]) -> None:
            seen[headers["webhook-id"]] = conn.execute(query, (headers["webhook-id"],)).fetchone() is not None

        receiver.on_post = recorded
        tasks = [finished_task(store, receiver.url(), artifacts=1) for _ in range(5)]
        async with dispatching():
            for _ in range(15):  # and in the live stream, in batches of whatever has arrived
                tasks.append(finished_task(store, receiver.url(), artifacts=1))
                await asyncio.sleep(0.01)
            await eventually(lambda: len(receiver.answered()) >= 3 * 20, message="every delivery")
    assert all(seen.values()), [w for w, found in seen.items() if not found]
    assert len(seen) == 3 * 20
    for task in tasks:
        assert [d.state for d, _ in _deliveries(store, task.id)] == ["delivered"] * 3


async def test_a_config_replaced_within_one_batch_signs_each_event_with_its_own_version(
    store: TaskApplication, receiver: Receiver, dispatching: Run
) -> None:
    # One commit, so one batch: the intake records from the configs NATS carries (no secrets)
    # and completes each from the log (ADR 0042); each event goes with the config of its version.
    now = datetime.now(UTC)
    task = new_task(now)

    def config(n: int) -> dict[str, Any]:
        return {
            "id": "cfg-1",
            "url": receiver.url(f"/hook-{n}"),
            "token": f"tok-{n}",
            "authentication": {"scheme": "Bearer", "credentials": f"s3cret-{n}"},
        }

    task.set_push_config(now=now, config=config(1))
    epoch = task.grant_lease(worker="w", now=now, until=now + timedelta(seconds=30))
    task.set_push_config(now=now, config=config(2))
    task.append_artifact(epoch=epoch, now=now, artifact={"artifactId": "a0", "parts": [{"text": "x"}]})
    task.complete(epoch=epoch, now=now, message=None)
    store.save_tasks(task)
    async with dispatching():
        await eventually(lambda: len(receiver.answered()) >= 3, message="3 deliveries")
    received = receiver.answered()
    assert [
        (r.path, r.headers["X-A2A-Notification-Token"], r.headers["Authorization"]) for r in received
    ] == [
        ("/hook-1", "tok-1", "Bearer s3cret-1"),
        ("/hook-2", "tok-2", "Bearer s3cret-2"),
        ("/hook-2", "tok-2", "Bearer s3cret-2"),
    ]
    assert [next(iter(r.json)) for r in received] == ["statusUpdate", "artifactUpdate", "statusUpdate"]


async def test_the_intake_takes_bursts_until_a_task_with_push_configs_comes_and_again_after_a_quiet_spell(
    store: TaskApplication, receiver: Receiver, dispatching: Run, monkeypatch: pytest.MonkeyPatch
) -> None:
    now = datetime.now(UTC)
    plain = plain_task(store, now)
    async with dispatching() as dispatcher:
        await asyncio.sleep(0.5)  # the plain task's events taken: nothing to deliver
        assert dispatcher.linger_s() == dispatcher_module.LINGER_S
        task = finished_task(store, receiver.url())
        await eventually(lambda: len(receiver.answered()) >= 3, message="3 deliveries")
        assert dispatcher.linger_s() == 0.0  # a task with push configs: each event as it arrives
        monkeypatch.setattr(dispatcher_module, "QUIET_S", 0.0)
        assert dispatcher.linger_s() == dispatcher_module.LINGER_S  # quiet for QUIET_S: bursts again
    assert [r.json for r in receiver.answered()] == _expected_bodies(store, task.id)
    assert _deliveries(store, plain.id) == []
