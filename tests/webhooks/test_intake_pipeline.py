"""The intake records a batch while the one before is still recording, for other tasks only (ADR 0043)."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg
from psycopg import sql

from store.application import TaskApplication
from store.config import StoreConfig
from store.deliveries import task_deliveries
from tests.support.tasks import new_task
from tests.support.webhooks import Receiver, finished_task
from tests.webhooks.conftest import Run, eventually
from workers.dispatcher import webhook_id


def _states(conn: psycopg.Connection[Any], schema: str, task_id: Any) -> list[tuple[int, str]]:
    return [(d.version, d.state) for d, _ in task_deliveries(conn, schema, task_id)]


async def test_a_stalled_record_holds_up_its_own_task_only_and_the_task_keeps_its_order(
    store: TaskApplication, receiver: Receiver, dispatching: Run
) -> None:
    config = store.config
    assert isinstance(config, StoreConfig)
    now = datetime.now(UTC)
    held = new_task(now)
    held.set_push_config(now=now, config={"id": "cfg-1", "url": receiver.url(), "token": "tok-1"})
    epoch = held.grant_lease(worker="w", now=now, until=now + timedelta(seconds=30))
    deliveries = sql.Identifier(config.schema, "longhaul_deliveries")
    with (
        psycopg.connect(config.database_url) as blocker,
        psycopg.connect(config.database_url, autocommit=True) as watcher,
    ):
        # An uncommitted row with the webhook-id of the held task's first delivery (WORKING, v3):
        # the intake's insert of that batch waits for this transaction to end.
        blocker.execute(
            sql.SQL(
                "INSERT INTO {} (webhook_id, task_id, tenant, version, event_type, event_time, config_id,"
                " url, body, created_at, next_attempt_at) VALUES (%s, %s, 'acme', 3, 'LeaseGranted',"
                " now(), 'cfg-1', %s, '{{}}', now(), now())"
            ).format(deliveries),
            (webhook_id(held.id, "cfg-1", 3), held.id, receiver.url()),
        )
        blocker_pid = blocker.info.backend_pid

        def stalled() -> bool:
            row = watcher.execute(
                "SELECT count(*) FROM pg_stat_activity WHERE %s = ANY(pg_blocking_pids(pid))", (blocker_pid,)
            ).fetchone()
            return row is not None and row[0] > 0

        async with dispatching():
            try:
                store.save_tasks(held)  # v1-v3: its batch's record stalls
                await eventually(stalled, message="the held task's record waits for the blocker")
                other = finished_task(store, receiver.url("/other"), artifacts=1)
                # Another task's batch is recorded and delivered while the held one's is stalled.
                await eventually(lambda: len(receiver.answered(path="/other")) >= 3, message="the other task")
                held.append_artifact(
                    epoch=epoch, now=now, artifact={"artifactId": "a0", "parts": [{"text": "x"}]}
                )
                held.complete(epoch=epoch, now=now, message=None)
                store.save_tasks(held)  # v4-v5: a batch of the held task, behind the stalled one
                await asyncio.sleep(1.0)
                assert receiver.answered(path="/hook") == []
                assert _states(watcher, config.schema, held.id) == []  # nothing of it recorded yet
            finally:
                blocker.rollback()  # the intake's insert goes on (and the dispatcher can stop)
            await eventually(lambda: len(receiver.answered(path="/hook")) >= 3, message="the held task")
            await asyncio.sleep(0.3)  # nothing more may come
        arrived = receiver.answered(path="/hook")
        assert [(r.headers["webhook-id"], next(iter(r.json))) for r in arrived] == [
            (webhook_id(held.id, "cfg-1", 3), "statusUpdate"),
            (webhook_id(held.id, "cfg-1", 4), "artifactUpdate"),
            (webhook_id(held.id, "cfg-1", 5), "statusUpdate"),
        ]
        assert arrived[-1].json["statusUpdate"]["status"]["state"] == "TASK_STATE_COMPLETED"
        assert _states(watcher, config.schema, held.id) == [
            (3, "delivered"),
            (4, "delivered"),
            (5, "delivered"),
        ]
        assert _states(watcher, config.schema, other.id) == [
            (3, "delivered"),
            (4, "delivered"),
            (5, "delivered"),
        ]
        assert len(receiver.answered(path="/other")) == 3
