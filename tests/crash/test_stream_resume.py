"""A client streaming from gateway A; A is SIGKILLed mid-task; the client resumes on gateway B.

Real processes: a worker, the relay, two gateways. The client reads SendStreamingMessage from A
until a few chunks arrived, A is killed, and the client reconnects to B with SubscribeToTask and
``Last-Event-ID`` set to the last id it received. What it read from both, in order, must be every
event of the log a client sees, each once; and the task completes as if nothing happened (the
gateway never ran it).
"""

from __future__ import annotations

import asyncio
import signal
from uuid import UUID

import httpx

from api.sse import SseEvent
from store.application import TaskApplication
from tests.api.streams_support import A2A_HEADERS, open_stream, results, state_of
from tests.api.test_streams import visible
from tests.crash.cluster import STARTUP_TIMEOUT, Cluster, user_message
from tests.support.processes import wait_until

CHUNKS = 30


def test_a_stream_resumes_on_another_gateway_after_its_gateway_was_killed(
    cluster: Cluster, store: TaskApplication
) -> None:
    relay = cluster.start(["relay"])
    wait_until(lambda: "relay is the leader" in relay.log(), STARTUP_TIMEOUT, "the relay to lead")
    cluster.worker()
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
    assert [(e.id, r) for e, r in zip(received, results(received), strict=True)] == visible(
        store, task_id, after=1
    )
    assert state_of(results(after)[-1]) == "TASK_STATE_COMPLETED"
    updates = [r["artifactUpdate"] for r in results(received) if "artifactUpdate" in r]
    assert len(updates) == CHUNKS
    assert [u.get("append", False) for u in updates] == [False] + [True] * (CHUNKS - 1)
    assert [u.get("lastChunk", False) for u in updates] == [False] * (CHUNKS - 1) + [True]
