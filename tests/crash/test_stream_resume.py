"""Streams over real processes: a resume across a killed gateway, and the research skill's chunks.

A client streaming from gateway A; A is SIGKILLed mid-task; the client resumes on gateway B.
Real processes: a worker, the relay, two gateways. The client reads SendStreamingMessage from A
until a few chunks arrived, A is killed, and the client reconnects to B with SubscribeToTask and
``Last-Event-ID`` set to the last id it received. What it read from both, in order, must be every
event of the log a client sees, each once; and the task completes as if nothing happened (the
gateway never ran it).

The research skill over one gateway: its first stream ends at the question (AUTH_REQUIRED), the
answer's stream carries the report as ``artifactUpdate`` chunks with ``append`` and ``lastChunk``
as the skill emitted them, and ends at COMPLETED.
"""

from __future__ import annotations

import asyncio
import signal
from uuid import UUID

import httpx

from api.sse import SseEvent
from store.log.application import TaskApplication
from tests.api.streams_support import A2A_HEADERS, open_stream, pairs, results, state_of
from tests.api.test_streams import visible
from tests.crash.cluster import STARTUP_TIMEOUT, Cluster, user_message
from tests.support.processes import wait_until

CHUNKS = 30


def _relay_and_worker(cluster: Cluster) -> None:
    """Start the relay (returning once it leads) and a worker."""
    relay = cluster.start(["relay"])
    wait_until(lambda: "relay is the leader" in relay.log(), STARTUP_TIMEOUT, "the relay to lead")
    cluster.worker()


def test_a_stream_resumes_on_another_gateway_after_its_gateway_was_killed(
    cluster: Cluster, store: TaskApplication
) -> None:
    _relay_and_worker(cluster)
    first_url = cluster.gateway()
    second_url = cluster.gateway()
    gateway_a = cluster.processes[-2]
    message = {**user_message({"chunks": CHUNKS, "chunk_ms": 60}), "metadata": {"skill": "crash-chunker"}}

    async def scenario() -> tuple[UUID, list[SseEvent], list[SseEvent]]:
        before: list[SseEvent] = []
        async with httpx.AsyncClient(base_url=first_url, headers=A2A_HEADERS, timeout=30) as client:
            try:
                async with open_stream(client, "SendStreamingMessage", {"message": message}) as stream:
                    while True:
                        event = await stream.next(timeout=30)
                        before.append(event)
                        if len(before) == 6:  # the task, WORKING and four chunks
                            gateway_a.signal(signal.SIGKILL)
            except (httpx.HTTPError, StopAsyncIteration):
                pass  # the connection died with the gateway
        task_id = UUID(before[0].data["result"]["task"]["id"])
        async with (
            httpx.AsyncClient(base_url=second_url, headers=A2A_HEADERS, timeout=30) as client,
            open_stream(
                client, "SubscribeToTask", {"id": str(task_id)}, last_event_id=before[-1].id
            ) as stream,
        ):
            after = await stream.rest(timeout=60)
        return task_id, before, after

    task_id, before, after = asyncio.run(scenario())

    assert 6 <= len(before) < CHUNKS, "A was killed before the task ended"
    assert before[0].id == 1
    assert state_of(before[0].data["result"]) == "TASK_STATE_SUBMITTED"
    received = before[1:] + after
    assert pairs(received) == visible(store, task_id, after=1)
    assert state_of(results(after)[-1]) == "TASK_STATE_COMPLETED"
    updates = [r["artifactUpdate"] for r in results(received) if "artifactUpdate" in r]
    assert len(updates) == CHUNKS
    assert [u.get("append", False) for u in updates] == [False] + [True] * (CHUNKS - 1)
    assert [u.get("lastChunk", False) for u in updates] == [False] * (CHUNKS - 1) + [True]


def test_the_research_skill_streams_its_question_then_its_report_in_chunks(
    cluster: Cluster, store: TaskApplication
) -> None:
    _relay_and_worker(cluster)
    url = cluster.gateway()
    first = {**user_message({"chunks": 4}, text="tides"), "metadata": {"skill": "research"}}

    async def scenario() -> tuple[list[SseEvent], list[SseEvent]]:
        async with httpx.AsyncClient(base_url=url, headers=A2A_HEADERS, timeout=30) as client:
            async with open_stream(client, "SendStreamingMessage", {"message": first}) as stream:
                asked = await stream.rest(timeout=30)
            task = asked[0].data["result"]["task"]
            answer = {
                **user_message({"api_key": "sk-test-0123456789"}, text="here"),
                "taskId": task["id"],
                "contextId": task["contextId"],
            }
            async with open_stream(client, "SendStreamingMessage", {"message": answer}) as stream:
                report = await stream.rest(timeout=30)
        return asked, report

    asked, report = asyncio.run(scenario())

    assert [state_of(r) for r in results(asked)] == [
        "TASK_STATE_SUBMITTED",
        "TASK_STATE_WORKING",
        "TASK_STATE_AUTH_REQUIRED",
    ]
    task_id = UUID(asked[0].data["result"]["task"]["id"])
    assert state_of(results(report)[0]) == "TASK_STATE_WORKING"  # the answer's snapshot
    assert pairs(report[1:]) == visible(store, task_id, after=report[0].id or 0)
    updates = [r["artifactUpdate"] for r in results(report) if "artifactUpdate" in r]
    assert [(u.get("append", False), u.get("lastChunk", False)) for u in updates] == [
        (False, False),
        (True, False),
        (True, False),
        (True, True),
    ]
    assert all(u["artifact"]["artifactId"] == "report" for u in updates)
    assert state_of(results(report)[-1]) == "TASK_STATE_COMPLETED"
