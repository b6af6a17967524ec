"""A config set on an ended task delivers nothing: no event a client sees follows the end (ADR 0025)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg

from store.deliveries.records import task_deliveries
from store.log.application import TaskApplication
from store.log.config import StoreConfig
from tests.support.webhooks import Receiver, finished_task, plain_task
from tests.webhooks.conftest import Run, eventually


def _deliveries(store: TaskApplication, task_id: Any) -> list[Any]:
    config = store.config
    assert isinstance(config, StoreConfig)
    with psycopg.connect(config.database_url, autocommit=True) as conn:
        return task_deliveries(conn, config.schema, task_id)


async def test_a_config_set_after_the_end_gets_no_delivery(
    store: TaskApplication, receiver: Receiver, dispatching: Run
) -> None:
    now = datetime.now(UTC)
    plain = plain_task(store, now)
    late = {"id": "late", "url": receiver.url(), "token": "never-sent"}
    store.set_push_config(
        plain.id, tenant=plain.tenant, config=late, clock=lambda: now + timedelta(seconds=1)
    )
    ran = finished_task(store, receiver.url(), artifacts=0)  # WORKING, COMPLETED to cfg-1
    store.set_push_config(ran.id, tenant=ran.tenant, config=late, clock=lambda: now + timedelta(seconds=2))
    marker = finished_task(store, receiver.url(), artifacts=0)  # committed after both late configs

    async with dispatching():
        await eventually(lambda: len(receiver.answered()) >= 4, message="the two finished tasks' events")
        await eventually(lambda: len(_deliveries(store, marker.id)) == 2, message="the marker's deliveries")

    assert _deliveries(store, plain.id) == []
    assert [d.config_id for d, _ in _deliveries(store, ran.id)] == ["cfg-1", "cfg-1"]
    assert len(receiver.answered()) == 4
    assert all(r.headers.get("X-A2A-Notification-Token") != "never-sent" for r in receiver.answered())
