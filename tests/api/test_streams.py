"""SendStreamingMessage and SubscribeToTask over real HTTP, PostgreSQL, NATS and a relay.

The gateway is served by uvicorn in the test's loop (``tests/api/streams_support.py``); the test
moves tasks as a worker would (``Advance``), the relay publishes the commits, the gateway's task
feed follows them. Every stream is compared with the log: the frames' ids are the versions of
the events a client sees, in order, each once.
"""

from __future__ import annotations

import asyncio
import socket
from collections.abc import AsyncIterator, Callable
from datetime import timedelta
from typing import Any
from uuid import UUID

import httpx
import pytest
from litestar import Litestar

from api.task_feed import StoreLog, TaskFeed
from domain.skill import SkillRegistry
from store.log.application import TaskApplication
from store.public_form.stream_frames import stream_response
from store.public_form.subjects import NatsNames
from tests.api.streams_support import (
    A2A_HEADERS,
    open_rest_stream,
    open_stream,
    pairs,
    relay_and_feed,
    results,
    rpc_body,
    served,
    state_of,
)
from tests.api.support import Advance, FakeClock, error_of, make_registry, user_message
from tests.support.tasks import new_task
from workers.task_runner import RunPolicy
from workers.worker import Worker, WorkerConfig

JSON = dict[str, Any]

pytestmark = pytest.mark.postgres


@pytest.fixture
async def feed(store: TaskApplication, nats_url: str, nats_names: tuple[str, str]) -> AsyncIterator[TaskFeed]:
    names = NatsNames(url=nats_url, stream=nats_names[0], subject_prefix=nats_names[1])
    async with relay_and_feed(store, names) as task_feed:
        yield task_feed


@pytest.fixture
async def base(make_app: Callable[..., Litestar], feed: TaskFeed) -> AsyncIterator[str]:
    async with served(make_app(feed=feed, stream_keepalive_s=0.2)) as url:
        yield url


@pytest.fixture
async def http(base: str) -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(base_url=base, headers=A2A_HEADERS, timeout=10) as client:
        yield client


def visible(store: TaskApplication, task_id: UUID, after: int = 0) -> list[tuple[int, JSON]]:
    """What a client may see of the task's log after ``after``: (version, StreamResponse) pairs."""
    task = store.get(task_id)
    messages = StoreLog(store).read(task_id, task.tenant, after, None)
    pairs = [(m["version"], stream_response(m, task.context_id)) for m in messages]
    return [(version, response) for version, response in pairs if response is not None]


async def _started(http: httpx.AsyncClient, advance: Advance) -> UUID:
    """A task submitted (returnImmediately) and started: WORKING at version 2."""
    answer = await http.post(
        "/a2a/jsonrpc",
        json=rpc_body(
            "SendMessage", {"message": user_message(), "configuration": {"returnImmediately": True}}
        ),
    )
    task_id = UUID(answer.json()["result"]["task"]["id"])
    await asyncio.to_thread(advance.start, task_id)
    return task_id


async def test_send_streaming_message_sends_the_task_then_its_events_until_it_completes(
    http: httpx.AsyncClient, store: TaskApplication, advance: Advance
) -> None:
    async with open_stream(http, "SendStreamingMessage", {"message": user_message("hi")}) as stream:
        first = await stream.next()
        task_id = UUID(first.data["result"]["task"]["id"])
        await asyncio.to_thread(advance.start, task_id)
        working = await stream.next()
        await asyncio.to_thread(advance.complete, task_id, "bye")
        rest = await stream.rest()

    events = [first, working, *rest]
    assert first.id == 1
    assert first.data["id"] == 1
    assert first.data["jsonrpc"] == "2.0"
    assert state_of(first.data["result"]) == "TASK_STATE_SUBMITTED"
    assert [state_of(r) for r in results(events)] == [
        "TASK_STATE_SUBMITTED",
        "TASK_STATE_WORKING",
        None,
        "TASK_STATE_COMPLETED",
    ]
    # Every frame after the snapshot is the log's, with the log's version as its id.
    assert pairs(events[1:]) == visible(store, task_id, after=1)


async def test_subscribe_sends_the_current_task_first_then_the_events_after_its_version(
    http: httpx.AsyncClient, store: TaskApplication, advance: Advance
) -> None:
    task_id = await _started(http, advance)
    async with open_stream(http, "SubscribeToTask", {"id": str(task_id)}) as stream:
        snapshot = await stream.next()
        await asyncio.to_thread(advance.complete, task_id)
        rest = await stream.rest()

    assert snapshot.id == 2
    assert snapshot.data["result"]["task"]["status"]["state"] == "TASK_STATE_WORKING"
    assert pairs(rest) == visible(store, task_id, after=2)
    assert state_of(results(rest)[-1]) == "TASK_STATE_COMPLETED"


async def test_a_send_stream_ends_at_an_interrupted_state(
    http: httpx.AsyncClient, store: TaskApplication, advance: Advance
) -> None:
    async with open_stream(http, "SendStreamingMessage", {"message": user_message("hi")}) as stream:
        first = await stream.next()
        task_id = UUID(first.data["result"]["task"]["id"])
        await asyncio.to_thread(advance.start, task_id)
        await asyncio.to_thread(advance.ask, task_id)
        rest = await stream.rest()
    assert [state_of(r) for r in results(rest)] == ["TASK_STATE_WORKING", "TASK_STATE_INPUT_REQUIRED"]
    assert pairs(rest) == visible(store, task_id, after=1)


async def test_a_subscription_goes_on_through_a_pause_and_ends_when_the_task_ends(
    http: httpx.AsyncClient, store: TaskApplication, advance: Advance
) -> None:
    task_id = await _started(http, advance)
    async with open_stream(http, "SubscribeToTask", {"id": str(task_id)}) as stream:
        await stream.next()
        await asyncio.to_thread(advance.ask, task_id)
        paused = await stream.next()
        assert state_of(results([paused])[0]) == "TASK_STATE_INPUT_REQUIRED"
        canceled = await http.post("/a2a/jsonrpc", json=rpc_body("CancelTask", {"id": str(task_id)}))
        assert "result" in canceled.json(), canceled.text
        rest = await stream.rest()
    assert [state_of(r) for r in results(rest)] == ["TASK_STATE_CANCELED"]
    assert pairs([paused, *rest]) == visible(store, task_id, after=2)

    # Subscribing to a paused task: its snapshot, then whatever comes (here: nothing until cut).
    other = await _started(http, advance)
    await asyncio.to_thread(advance.ask, other)
    async with open_stream(http, "SubscribeToTask", {"id": str(other)}) as stream:
        snapshot = await stream.next()
    assert state_of(results([snapshot])[0]) == "TASK_STATE_INPUT_REQUIRED"


async def test_subscribe_refuses_a_terminal_task_and_an_unknown_or_foreign_one_before_streaming(
    http: httpx.AsyncClient, advance: Advance
) -> None:
    task_id = await _started(http, advance)
    await asyncio.to_thread(advance.complete, task_id)

    async def call(params: JSON) -> httpx.Response:
        return await http.post("/a2a/jsonrpc", json=rpc_body("SubscribeToTask", params))

    terminal = await call({"id": str(task_id)})
    unknown = await call({"id": "00000000-0000-0000-0000-000000000000"})
    foreign = await call({"id": str(task_id), "tenant": "someone-else"})
    for answer in (terminal, unknown, foreign):
        assert answer.headers["content-type"].startswith("application/json"), answer.headers
    error_of(terminal.json(), -32004, "UNSUPPORTED_OPERATION")
    error_of(unknown.json(), -32001, "TASK_NOT_FOUND")
    error_of(foreign.json(), -32001, "TASK_NOT_FOUND")


async def test_a_reconnect_with_last_event_id_gets_every_event_after_it_once_in_order(
    http: httpx.AsyncClient, store: TaskApplication, advance: Advance
) -> None:
    task_id = await _started(http, advance)
    async with open_stream(http, "SubscribeToTask", {"id": str(task_id)}) as stream:
        snapshot = await stream.next()
        task = await asyncio.to_thread(store.get, task_id)
        for text in ("one", "two"):
            task.report_progress(
                epoch=task.lease_epoch, now=advance.clock(), message={"parts": [{"text": text}]}
            )
        await asyncio.to_thread(store.save_tasks, task)
        seen = [await stream.next(), await stream.next()]
    # Gone after version 4; meanwhile two more progress reports and the end.
    task = await asyncio.to_thread(store.get, task_id)
    task.report_progress(epoch=task.lease_epoch, now=advance.clock(), message={"parts": [{"text": "three"}]})
    await asyncio.to_thread(store.save_tasks, task)
    await asyncio.to_thread(advance.complete, task_id)

    async with open_stream(http, "SubscribeToTask", {"id": str(task_id)}, last_event_id=seen[-1].id) as again:
        resumed = await again.rest()

    assert snapshot.id == 2
    assert [e.id for e in seen] == [3, 4]
    assert "task" not in results(resumed)[0]  # a resumed stream starts with the events after its id
    everything = seen + resumed
    assert pairs(everything) == visible(store, task_id, after=2)


async def test_send_streaming_message_sent_again_with_last_event_id_resumes_its_task(
    http: httpx.AsyncClient, store: TaskApplication, advance: Advance
) -> None:
    params = {"message": user_message("once")}
    async with open_stream(http, "SendStreamingMessage", params) as stream:
        first = await stream.next()
        task_id = UUID(first.data["result"]["task"]["id"])
        await asyncio.to_thread(advance.start, task_id)
        working = await stream.next()
    await asyncio.to_thread(advance.complete, task_id)
    version = (await asyncio.to_thread(store.get, task_id)).version

    async with open_stream(http, "SendStreamingMessage", params, last_event_id=working.id) as again:
        resumed = await again.rest()

    assert pairs([working, *resumed]) == visible(store, task_id, after=1)
    assert (await asyncio.to_thread(store.get, task_id)).version == version  # the resend appended nothing


async def test_a_resumed_stream_of_a_task_that_ended_meanwhile_sends_what_is_left_and_ends(
    http: httpx.AsyncClient, store: TaskApplication, advance: Advance
) -> None:
    task_id = await _started(http, advance)
    await asyncio.to_thread(advance.complete, task_id)
    async with open_stream(http, "SubscribeToTask", {"id": str(task_id)}, last_event_id=2) as stream:
        resumed = await stream.rest()
    assert pairs(resumed) == visible(store, task_id, after=2)
    last = resumed[-1].id
    async with open_stream(http, "SubscribeToTask", {"id": str(task_id)}, last_event_id=last) as stream:
        assert await stream.rest() == []


async def test_push_configs_after_the_end_add_no_frame_and_subscribe_still_refuses(
    http: httpx.AsyncClient, store: TaskApplication, advance: Advance
) -> None:
    """ADR 0025: a config set on an ended task is in its log, yet a client sees no new event."""
    task_id = await _started(http, advance)
    ended = (await asyncio.to_thread(advance.complete, task_id)).version
    config = {"taskId": str(task_id), "id": "late", "url": "https://93.184.215.14/late"}
    created = await http.post("/a2a/jsonrpc", json=rpc_body("CreateTaskPushNotificationConfig", config))
    assert created.json()["result"]["id"] == "late"
    assert (await asyncio.to_thread(store.get, task_id)).version == ended + 1

    refused = await http.post("/a2a/jsonrpc", json=rpc_body("SubscribeToTask", {"id": str(task_id)}))
    error_of(refused.json(), -32004, "UNSUPPORTED_OPERATION")
    async with open_stream(http, "SubscribeToTask", {"id": str(task_id)}, last_event_id=2) as stream:
        resumed = await stream.rest()
    async with open_stream(http, "SubscribeToTask", {"id": str(task_id)}, last_event_id=ended) as stream:
        assert await stream.rest() == []
    assert pairs(resumed) == visible(store, task_id, after=2)
    assert resumed[-1].id == ended


async def test_a_bad_last_event_id_is_an_error_before_the_stream(
    http: httpx.AsyncClient, advance: Advance
) -> None:
    task_id = await _started(http, advance)
    for bad in ("abc", "-1", "99"):
        answer = await http.post(
            "/a2a/jsonrpc",
            json=rpc_body("SubscribeToTask", {"id": str(task_id)}),
            headers={"Last-Event-ID": bad},
        )
        assert answer.headers["content-type"].startswith("application/json")
        error_of(answer.json(), -32602, "INVALID_PARAMS")


async def test_two_streams_on_one_task_get_the_same_events_and_closing_one_leaves_the_other(
    http: httpx.AsyncClient, store: TaskApplication, advance: Advance
) -> None:
    task_id = await _started(http, advance)
    params = {"id": str(task_id)}
    async with (
        open_stream(http, "SubscribeToTask", params) as first,
        open_stream(http, "SubscribeToTask", params) as second,
    ):
        await first.next()
        await second.next()
        async with open_stream(http, "SubscribeToTask", params) as third:
            await third.next()
        # the third went away; the other two go on
        await asyncio.to_thread(advance.complete, task_id)
        one, two = await asyncio.gather(first.rest(), second.rest())
    assert [(e.id, e.data) for e in one] == [(e.id, e.data) for e in two]
    assert pairs(one) == visible(store, task_id, after=2)


async def test_a_client_that_goes_away_cancels_nothing(
    http: httpx.AsyncClient, store: TaskApplication, advance: Advance
) -> None:
    async with open_stream(http, "SendStreamingMessage", {"message": user_message()}) as stream:
        task_id = UUID((await stream.next()).data["result"]["task"]["id"])
    await asyncio.sleep(0.3)  # the gateway notices the disconnect
    await asyncio.to_thread(advance.complete, task_id)
    task = await asyncio.to_thread(store.get, task_id)
    assert str(task.state) == "TASK_STATE_COMPLETED"
    assert "Canceled" not in [m["type"] for m in StoreLog(store).read(task_id, task.tenant, 0, None)]


async def test_an_idle_stream_gets_keepalive_comments(http: httpx.AsyncClient, advance: Advance) -> None:
    task_id = await _started(http, advance)
    async with open_stream(http, "SubscribeToTask", {"id": str(task_id)}) as stream:
        await stream.next()
        async with asyncio.timeout(5):
            comment = await anext(stream.events)  # keepalive_s is 0.2 in these tests
    assert comment.comment == "keepalive"


async def test_a_reader_that_stops_reading_is_closed_past_the_limit_and_resumes_from_its_last_id(
    make_app: Callable[..., Litestar], feed: TaskFeed, store: TaskApplication, advance: Advance
) -> None:
    app = make_app(feed=feed, stream_max_pending=5, stream_keepalive_s=30)
    small = [(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)]
    async with (
        served(app, send_buffer=4096) as url,
        httpx.AsyncClient(
            base_url=url,
            headers=A2A_HEADERS,
            timeout=10,
            transport=httpx.AsyncHTTPTransport(socket_options=small),
        ) as slow,
    ):
        task_id = await _started(slow, advance)
        async with open_stream(slow, "SubscribeToTask", {"id": str(task_id)}) as stream:
            await stream.next()
            # The client reads nothing while 60 progress reports of 8 KiB each are committed.
            task = await asyncio.to_thread(store.get, task_id)
            for i in range(60):
                task.report_progress(
                    epoch=task.lease_epoch,
                    now=advance.clock(),
                    message={"parts": [{"text": f"{i}" + "x" * 8192}]},
                )
                await asyncio.to_thread(store.save_tasks, task)
            await asyncio.to_thread(advance.complete, task_id)
            await asyncio.sleep(1.0)  # the relay publishes them all; the gateway's writes block
            received = await stream.rest()
        assert received, "the stream sent nothing before it closed"
        last = received[-1]
        assert last.id is None
        assert last.data["error"]["data"][0]["reason"] == "SLOW_READER", last.data
        frames = received[:-1]
        assert 0 < len(frames) < 60  # cut short: not every event waited for it
        async with open_stream(
            slow, "SubscribeToTask", {"id": str(task_id)}, last_event_id=frames[-1].id
        ) as again:
            resumed = await again.rest(timeout=30)
        metrics = await _metrics_once_closed(slow)
    assert "longhaul_streams_cut_slow_total 1.0" in metrics
    everything = frames + resumed
    assert pairs(everything) == visible(store, task_id, after=2)
    assert state_of(results(resumed)[-1]) == "TASK_STATE_COMPLETED"


async def _metrics_once_closed(client: httpx.AsyncClient) -> str:
    """The gateway's ``/metrics`` once it counts no open stream (it closes them as clients end)."""
    async with asyncio.timeout(5):
        while "longhaul_streams_open 0.0" not in (text := (await client.get("/metrics")).text):  # noqa: ASYNC110
            await asyncio.sleep(0.05)
    return text


async def test_open_streams_are_counted(http: httpx.AsyncClient, advance: Advance) -> None:
    task_id = await _started(http, advance)
    async with open_stream(http, "SubscribeToTask", {"id": str(task_id)}) as stream:
        await stream.next()
        during = (await http.get("/metrics")).text
    assert "longhaul_streams_open 1.0" in during
    after = await _metrics_once_closed(http)
    assert "longhaul_streams_cut_slow_total 0.0" in after


async def test_the_card_says_streaming_only_with_a_feed(
    make_app: Callable[..., Litestar], feed: TaskFeed
) -> None:
    for app, streaming in ((make_app(feed=feed), True), (make_app(), False)):
        async with served(app) as url, httpx.AsyncClient(base_url=url) as client:
            card = (await client.get("/.well-known/agent-card.json")).json()
        assert card["capabilities"]["streaming"] is streaming


class TestRestBinding:
    """The HTTP+JSON routes serve the same streams: bare StreamResponses, the same ids."""

    async def test_message_stream_sends_bare_stream_responses_with_the_logs_versions(
        self, http: httpx.AsyncClient, store: TaskApplication, advance: Advance
    ) -> None:
        body = {"message": user_message("hi")}
        async with open_rest_stream(http, "POST", "/message:stream", body) as stream:
            first = await stream.next()
            task_id = UUID(first.data["task"]["id"])
            await asyncio.to_thread(advance.start, task_id)
            await asyncio.to_thread(advance.complete, task_id, "bye")
            rest = await stream.rest()

        assert first.id == 1
        assert state_of(first.data) == "TASK_STATE_SUBMITTED"
        assert [(event.id, event.data) for event in rest] == visible(store, task_id, after=1)
        assert state_of(rest[-1].data) == "TASK_STATE_COMPLETED"

    @pytest.mark.parametrize("verb", ["GET", "POST"])
    async def test_subscribe_by_get_or_post_resumes_after_last_event_id(
        self, verb: str, http: httpx.AsyncClient, store: TaskApplication, advance: Advance
    ) -> None:
        task_id = await _started(http, advance)
        async with open_rest_stream(http, verb, f"/tasks/{task_id}:subscribe") as stream:
            snapshot = await stream.next()
        assert snapshot.id == 2
        assert state_of(snapshot.data) == "TASK_STATE_WORKING"

        await asyncio.to_thread(advance.complete, task_id)
        path = f"/tasks/{task_id}:subscribe"
        async with open_rest_stream(http, verb, path, last_event_id=snapshot.id) as resumed:
            rest = await resumed.rest()
        assert [(event.id, event.data) for event in rest] == visible(store, task_id, after=2)

    async def test_subscribing_to_a_terminal_task_is_a_status_body_before_any_frame(
        self, http: httpx.AsyncClient, advance: Advance
    ) -> None:
        task_id = await _started(http, advance)
        await asyncio.to_thread(advance.complete, task_id)
        response = await http.post(f"/a2a/rest/tasks/{task_id}:subscribe")
        assert response.status_code == 400
        assert response.json()["error"]["details"][0]["reason"] == "UNSUPPORTED_OPERATION"


async def test_only_the_lone_streams_task_is_handed_to_the_idle_worker(
    make_app: Callable[..., Litestar], feed: TaskFeed, store: TaskApplication, clock: FakeClock
) -> None:
    """ADR 0055: the first frame of a handed-over task shows its lease (WORKING); a queued one's does not."""
    echo = make_registry().newest("echo")
    worker = Worker(
        store=store,
        registry=SkillRegistry([echo]),  # not ``research``: a task of it stays queued, its stream open
        clock=clock,
        config=WorkerConfig(
            worker_id="w1", lease_seconds=30, concurrency=4, grace_seconds=1, poll_seconds=60
        ),
        policy=RunPolicy(max_pause=timedelta(days=1)),
    )
    stop = asyncio.Event()
    running = asyncio.ensure_future(worker.run(stop))
    try:
        async with (
            served(make_app(feed=feed, hand_off=worker)) as url,
            httpx.AsyncClient(base_url=url, headers=A2A_HEADERS, timeout=10) as http,
        ):
            await _idle(worker, echo.version)
            async with open_stream(http, "SendStreamingMessage", {"message": user_message()}) as alone:
                lone = [results([await alone.next()])[0]]
                while state_of(lone[-1]) != "TASK_STATE_COMPLETED":
                    lone += results([await alone.next()])
            assert state_of(lone[0]) == "TASK_STATE_WORKING"  # leased in the submission's commit

            other = new_task(clock(), tenant="default", skill="research")
            await asyncio.to_thread(store.save_tasks, other)
            async with open_stream(http, "SubscribeToTask", {"id": str(other.id)}) as beside:
                await beside.next()
                await _idle(worker, echo.version)
                async with open_stream(http, "SendStreamingMessage", {"message": user_message()}) as queued:
                    seen = [results([await queued.next()])[0]]
                    while state_of(seen[-1]) != "TASK_STATE_COMPLETED":
                        seen += results([await queued.next()])
            assert state_of(seen[0]) == "TASK_STATE_SUBMITTED"  # beside another stream: queued
            assert "TASK_STATE_WORKING" in [state_of(response) for response in seen[1:]]  # then claimed
    finally:
        stop.set()
        await running


async def _idle(worker: Worker, version: int) -> None:
    """Wait until ``worker`` runs and is idle (a slot it would hand to a lone stream, given back)."""
    async with asyncio.timeout(10):
        while (slot := worker.reserve_idle("echo", version)) is None:  # noqa: ASYNC110 - idleness has no event
            await asyncio.sleep(0.02)
    slot.release()
