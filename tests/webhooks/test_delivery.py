"""The dispatcher: signed StreamResponses reach receivers, in order, through outages, or give up visibly."""

from __future__ import annotations

from typing import Any

import psycopg
import pytest
from standardwebhooks.webhooks import Webhook

from projections.stream_response import event_stream_response
from store.application import TaskApplication
from store.config import StoreConfig
from store.deliveries import task_deliveries
from tests.webhooks.conftest import Run, eventually, finished_task
from tests.webhooks.receiver import Receiver


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
