"""A webhook shows a stored file's part with its URL, signed as sent; the record keeps the log's form."""

from __future__ import annotations

import asyncio
import hashlib
import json
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg
from standardwebhooks.webhooks import Webhook

from domain.files import SCHEME, FileRef, file_part
from store.deliveries.records import task_deliveries
from store.log.application import TaskApplication
from store.log.config import StoreConfig
from store.public_form import FileLinks
from store.public_form.subjects import NatsNames
from tests.support.tasks import new_task
from tests.support.webhooks import Receiver
from tests.webhooks.conftest import FAST, eventually
from workers.dispatcher import Dispatcher
from workers.relay import Relay
from workers.webhook_signing import WebhookSigner

PUBLIC_URL = "https://longhaul.example"
SHA = hashlib.sha256(b"report").hexdigest()


async def test_a_webhook_carries_the_files_url_and_its_signature_covers_what_was_sent(
    store: TaskApplication, receiver: Receiver, names: NatsNames, secret: str
) -> None:
    now = datetime.now(UTC)
    task = new_task(now)
    task.set_push_config(now=now, config={"id": "cfg", "url": receiver.url()})
    epoch = task.grant_lease(worker="w", now=now, until=now + timedelta(seconds=30))
    part = file_part(FileRef(SHA, 6), media_type="application/pdf", filename="report.pdf")
    task.append_artifact(epoch=epoch, now=now, artifact={"artifactId": "r", "parts": [part]})
    task.complete(epoch=epoch, now=now, message={"role": "ROLE_AGENT", "parts": [{"text": "done"}]})
    store.save_tasks(task)
    dispatcher = Dispatcher(
        store=store,
        names=names,
        signer=WebhookSigner(default=secret),
        config=replace(FAST),
        clock=lambda: datetime.now(UTC),
        links=FileLinks(PUBLIC_URL),
    )
    stop = asyncio.Event()
    running = asyncio.gather(Relay(store=store, names=names).run(stop), dispatcher.run(stop))
    try:
        await eventually(lambda: len(receiver.answered()) >= 3, message="3 deliveries")
    finally:
        stop.set()
        await running

    received = receiver.answered()
    artifact = next(r for r in received if "artifactUpdate" in r.json)
    assert artifact.json["artifactUpdate"]["artifact"]["parts"] == [
        {
            "url": f"{PUBLIC_URL}/a2a/files/{task.id}/{SHA}",
            "mediaType": "application/pdf",
            "filename": "report.pdf",
            "metadata": {"sha256": SHA, "size": 6},
        }
    ]
    assert all(SCHEME.encode() not in r.body for r in received)
    for request in received:
        assert Webhook(secret).verify(request.body, request.headers) == request.json
    recorded = [json.loads(delivery.body) for delivery, _ in _deliveries(store, task.id)]
    logged = next(body for body in recorded if "artifactUpdate" in body)
    assert logged["artifactUpdate"]["artifact"]["parts"][0]["url"] == SCHEME + SHA, (
        "the record keeps the log's form"
    )


def _deliveries(store: TaskApplication, task_id: Any) -> list[Any]:
    config = store.config
    assert isinstance(config, StoreConfig)
    with psycopg.connect(config.database_url, autocommit=True) as conn:
        return task_deliveries(conn, config.schema, task_id)
