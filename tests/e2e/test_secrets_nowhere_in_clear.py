"""The research skill's API key, end to end over real processes: read by the step, nowhere in clear.

Gateway, worker, relay, projector and webhook dispatcher run as ``longhaul`` processes on real
PostgreSQL and NATS; a webhook receiver (the edge of the world) takes the task's push
notifications. A client starts a research task over SSE with an inline push config, the task asks
for its key in ``TASK_STATE_AUTH_REQUIRED``, the client answers with the key over SSE, and the
task completes. Then the key is searched for, in clear, everywhere the task left a trace: every
table of the schema (events, snapshots, run queue, task view, retention index, webhook
deliveries and attempts, the key table itself), every message of the NATS stream, GetTask over
both bindings, every SSE frame, every webhook body, ``longhaul history`` (text and JSON), and the
archive file the task is moved to once it expired. The report proves the step did read it.
"""

from __future__ import annotations

import asyncio
import gzip
import json
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from uuid import UUID

import httpx
import psycopg
import pytest
from psycopg import sql

from api.sse import SseEvent
from longhaul.settings import Settings
from store.evidence.merkle_log import catch_up
from store.evidence.signed_notes import SignerKey
from store.log.application import TaskApplication
from store.secrets.secret_parts import REDACTED_PART, SECRET_EXTENSION
from tests.api.streams_support import A2A_HEADERS, open_stream, results, state_of
from tests.crash.cluster import STARTUP_TIMEOUT, Cluster, user_message
from tests.support.jetstream import stream_messages
from tests.support.processes import wait_until
from tests.support.webhooks import Receiver
from workers.skills.research import mask
from workers.webhook_signing import new_secret

API_KEY = "sk-live-e2e-4f8b1c2d9a7e6b5c3d2e1f00"
CHUNKS = 34
"""Three events per chunk: the task passes 100 events, so the store snapshots it."""
TABLES_WITH_TRACES = {
    "longhaul_events",
    "longhaul_snapshots",
    "longhaul_run_queue",
    "longhaul_task_view",
    "longhaul_retention_index",
    "longhaul_deliveries",
    "longhaul_delivery_attempts",
    "longhaul_task_keys",
}


@pytest.fixture
def cluster(settings: Settings, tmp_path: Path) -> Iterator[Cluster]:
    processes = Cluster(settings, tmp_path, allow_private_webhooks="true", webhook_secret=new_secret())
    try:
        yield processes
    finally:
        processes.stop_all()


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    running = Receiver().start()
    yield running
    running.stop()


def clear(text: str | bytes) -> bool:
    """Whether ``text`` holds the API key in clear (as text, or as the hex of its bytes)."""
    if isinstance(text, bytes):
        return API_KEY.encode() in text or API_KEY.encode().hex().encode() in text
    return API_KEY in text or API_KEY.encode().hex() in text


def table_rows(database_url: str, schema: str) -> dict[str, list[tuple[Any, ...]]]:
    """Every row of every table of ``schema``."""
    with psycopg.connect(database_url, autocommit=True) as conn:
        names = [
            row[0]
            for row in conn.execute(
                "SELECT tablename FROM pg_tables WHERE schemaname = %s ORDER BY tablename", (schema,)
            ).fetchall()
        ]
        return {
            name: conn.execute(sql.SQL("SELECT * FROM {}").format(sql.Identifier(schema, name))).fetchall()
            for name in names
        }


def rows_in_clear(rows: dict[str, list[tuple[Any, ...]]]) -> list[str]:
    found = []
    for table, values in rows.items():
        for row in values:
            for value in row:
                raw = bytes(value) if isinstance(value, bytes | memoryview) else str(value).encode()
                if clear(raw):
                    found.append(f"{table}: {raw[:200]!r}")
    return found


def start_service(cluster: Cluster) -> str:
    """Relay, dispatcher, projector, worker and gateway; returns the gateway's URL."""
    relay = cluster.start(["relay"])
    wait_until(lambda: "relay is the leader" in relay.log(), STARTUP_TIMEOUT, "the relay to lead")
    dispatcher = cluster.start(["dispatcher"])
    wait_until(lambda: "following stream" in dispatcher.log(), STARTUP_TIMEOUT, "the dispatcher")
    cluster.start(["projector"])
    cluster.worker()
    return cluster.gateway()


def research_over_sse(url: str, hook: str) -> tuple[list[SseEvent], list[SseEvent]]:
    """A research task started over SSE with an inline push config, then answered with the key."""
    first = {**user_message({"chunks": CHUNKS}, text="tides"), "metadata": {"skill": "research"}}

    async def scenario() -> tuple[list[SseEvent], list[SseEvent]]:
        async with httpx.AsyncClient(base_url=url, headers=A2A_HEADERS, timeout=30) as client:
            params = {"message": first, "configuration": {"taskPushNotificationConfig": {"url": hook}}}
            async with open_stream(client, "SendStreamingMessage", params) as stream:
                asked = await stream.rest(timeout=30)
            task = asked[0].data["result"]["task"]
            answer = {
                **user_message({"api_key": API_KEY}, text="the key"),
                "taskId": task["id"],
                "contextId": task["contextId"],
            }
            async with open_stream(client, "SendStreamingMessage", {"message": answer}) as stream:
                report = await stream.rest(timeout=30)
        return asked, report

    return asyncio.run(scenario())


def check_get_task(url: str, task_id: UUID) -> None:
    """GetTask over both bindings: no key; the answer shows as redacted parts."""
    got_rpc = httpx.post(
        f"{url}/a2a/jsonrpc",
        json={"jsonrpc": "2.0", "id": 1, "method": "GetTask", "params": {"id": str(task_id)}},
        headers=A2A_HEADERS,
        timeout=30,
    ).json()["result"]
    got_rest = httpx.get(f"{url}/a2a/rest/tasks/{task_id}", headers=A2A_HEADERS, timeout=30).json()
    for got in (got_rpc, got_rest):
        assert not clear(json.dumps(got))
        answer_parts = [m["parts"] for m in got["history"] if m.get("role") == "ROLE_USER"][-1]
        assert answer_parts == [REDACTED_PART, REDACTED_PART]  # every part of an auth answer


def check_webhooks(receiver: Receiver) -> None:
    """Every delivery up to the end, none with the key."""

    def completed_delivered() -> bool:
        states = [r.json.get("statusUpdate", {}).get("status", {}).get("state") for r in receiver.answered()]
        return "TASK_STATE_COMPLETED" in states

    wait_until(completed_delivered, 60, "the COMPLETED webhook")
    assert not [r for r in receiver.received if clear(r.body)]


def check_nats(settings: Settings, task_id: UUID, version: int) -> None:
    """Every message of the stream (the task's whole log), none with the key."""
    url = settings.nats_url or ""
    wait_until(
        lambda: len(stream_messages(url, settings.nats_stream, ">")) >= version,
        30,
        "the relay to publish the whole task",
    )
    messages = stream_messages(url, settings.nats_stream, ">")
    assert {m["version"] for _, m in messages if m["taskId"] == str(task_id)} == set(range(1, version + 1))
    assert not [m for _, m in messages if clear(json.dumps(m))]
    (received,) = [m for _, m in messages if m["type"] == "InputReceived"]
    shown = [p["metadata"][SECRET_EXTENSION] for p in received["body"]["message"]["parts"]]
    assert shown == [{"redacted": True}, {"redacted": True}]


def check_tables(settings: Settings) -> None:
    """Every row of every table of the schema: the key row is gone, no key anywhere."""
    rows = table_rows(settings.database_url or "", settings.database_schema)
    assert set(rows) >= TABLES_WITH_TRACES, sorted(rows)
    assert rows["longhaul_task_keys"] == []
    assert rows["longhaul_deliveries"]
    assert rows["longhaul_snapshots"], "the task passed 100 events: it has a snapshot (with its history)"
    assert rows_in_clear(rows) == []


def check_history(cluster: Cluster, task_id: UUID) -> None:
    """``longhaul history``, as text and as JSON."""
    for args in (["history", str(task_id)], ["history", str(task_id), "--json"]):
        printed = cluster.run(args)
        assert printed.returncode == 0, printed.stderr
        assert "InputReceived" in printed.stdout
        assert not clear(printed.stdout + printed.stderr)


def check_archive(cluster: Cluster, store: TaskApplication, task_id: UUID, folder: Path) -> None:
    """Retention ends the task's life in the log: expired, archived to a file, purged."""
    cluster.sweeper(retention="PT1S")
    wait_until(lambda: store.get(task_id).expired, 30, "the task to expire")
    log = store.merkle_log
    assert log is not None
    # A task is archived once a signed checkpoint covers it: sign one, as the sequencer would.
    catch_up(log, store.recorder.select_notifications, SignerKey.generate("longhaul/test"), datetime.now(UTC))
    archived = cluster.run(["archive", "--to", str(folder)])
    assert archived.returncode == 0, archived.stderr
    (path,) = folder.glob("*.jsonl.gz")
    content = gzip.decompress(path.read_bytes())
    assert str(task_id).encode() in content
    assert b"ciphertext" in content  # the sealed answer is archived as stored ...
    assert not clear(content)  # ... and its key is gone for good


def test_the_research_key_is_read_by_the_step_and_appears_nowhere_in_clear(
    cluster: Cluster, store: TaskApplication, settings: Settings, receiver: Receiver, tmp_path: Path
) -> None:
    url = start_service(cluster)

    asked, report = research_over_sse(url, receiver.url())

    assert state_of(results(asked)[-1]) == "TASK_STATE_AUTH_REQUIRED"
    assert state_of(results(report)[-1]) == "TASK_STATE_COMPLETED", cluster.logs()
    task_id = UUID(asked[0].data["result"]["task"]["id"])
    assert not [e for e in [*asked, *report] if clear(json.dumps(e.data))], "an SSE frame carries the key"
    # The step read the key: the report names it masked, which only the clear key gives.
    task = store.get(task_id)
    assert f"`{mask(API_KEY)}`" in "".join(part["text"] for part in task.artifacts["report"]["parts"])
    check_get_task(url, task_id)
    check_webhooks(receiver)
    check_nats(settings, task_id, task.version)
    wait_until(
        lambda: bool(table_rows(settings.database_url or "", settings.database_schema)["longhaul_task_view"]),
        30,
        "the task view row",
    )
    cluster.stop_all()  # every trace is written; the shared database has few connections to spare
    check_tables(settings)
    check_history(cluster, task_id)
    check_archive(cluster, store, task_id, tmp_path / "archive")
