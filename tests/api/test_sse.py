"""The SSE framing without I/O: frames, ids, keep-alives, errors after the start, closing."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncGenerator, AsyncIterator
from typing import Any

import pytest
from litestar import Litestar, get
from litestar.response import Stream

from api.errors import A2AError, InvalidParamsError, TaskNotFoundError
from api.sse import (
    KEEPALIVE,
    Frame,
    PrimedFrames,
    SseEnvelope,
    frame,
    jsonrpc_envelope,
    last_event_id,
    read_events,
    sse_body,
    sse_response,
)
from api.streams import ENDS_SEND_STREAM, ENDS_SUBSCRIPTION, ends_stream

JSON = dict[str, Any]

BARE = SseEnvelope(result=lambda r: r, error=lambda e: {"error": e.reason}, error_event="error")


async def _frames(*items: Frame | A2AError | float) -> AsyncGenerator[Frame, None]:
    """Yield frames; raise an error item; sleep a float's seconds."""
    for item in items:
        if isinstance(item, float):
            await asyncio.sleep(item)
        elif isinstance(item, A2AError):
            raise item
        else:
            yield item


async def _body(frames: AsyncIterator[Frame], envelope: SseEnvelope, keepalive_s: float = 10.0) -> bytes:
    return b"".join([chunk async for chunk in sse_body(frames, envelope, keepalive_s=keepalive_s)])


async def _lines(data: bytes) -> AsyncGenerator[str, None]:
    for line in data.decode().split("\n"):
        yield line


def test_a_frame_is_its_id_then_one_line_of_json() -> None:
    assert frame({"a": "x\ny"}, event_id=7) == b'id: 7\ndata: {"a":"x\\ny"}\n\n'
    assert frame({"e": 1}, event="error") == b'event: error\ndata: {"e":1}\n\n'


def test_last_event_id_is_a_version() -> None:
    assert last_event_id(None) is None
    assert last_event_id("  ") is None
    assert last_event_id(" 12 ") == 12
    for bad in ("-1", "1.5", "abc", "١٢"):
        with pytest.raises(InvalidParamsError):
            last_event_id(bad)


async def test_jsonrpc_wraps_every_frame_and_the_ids_are_the_versions() -> None:
    body = await _body(_frames((1, {"task": {"id": "t"}}), (3, {"statusUpdate": {}})), jsonrpc_envelope(9))
    events = [e async for e in read_events(_lines(body))]
    assert [(e.id, e.data) for e in events] == [
        (1, {"jsonrpc": "2.0", "id": 9, "result": {"task": {"id": "t"}}}),
        (3, {"jsonrpc": "2.0", "id": 9, "result": {"statusUpdate": {}}}),
    ]


async def test_an_error_after_the_start_is_the_last_frame() -> None:
    body = await _body(
        _frames((1, {"task": {}}), TaskNotFoundError("gone"), (2, {"x": 1})), jsonrpc_envelope(1)
    )
    events = [e async for e in read_events(_lines(body))]
    assert len(events) == 2
    assert events[1].id is None
    assert events[1].data["error"]["code"] == -32001

    bare = await _body(_frames(TaskNotFoundError("gone")), BARE)
    assert bare == b'event: error\ndata: {"error":"TASK_NOT_FOUND"}\n\n'


async def test_an_unexpected_failure_is_an_internal_error_frame() -> None:
    async def broken() -> AsyncGenerator[Frame, None]:
        yield 1, {"task": {}}
        raise RuntimeError("secret detail")

    body = await _body(broken(), jsonrpc_envelope(1))
    assert b"-32603" in body
    assert b"secret detail" not in body


async def test_an_idle_stream_gets_keepalives_and_loses_no_frame() -> None:
    body = await _body(_frames((1, {"a": 1}), 0.25, (2, {"b": 2})), BARE, keepalive_s=0.1)
    assert body.count(KEEPALIVE) >= 1
    events = [e async for e in read_events(_lines(body)) if e.comment is None]
    assert [(e.id, e.data) for e in events] == [(1, {"a": 1}), (2, {"b": 2})]


async def test_closing_the_body_closes_the_stream_even_while_it_waits() -> None:
    closed = asyncio.Event()

    async def endless() -> AsyncGenerator[Frame, None]:
        try:
            yield 1, {"a": 1}
            await asyncio.sleep(3600)
            yield 2, {"b": 2}
        finally:
            closed.set()

    body = sse_body(endless(), BARE, keepalive_s=0.05)
    assert (await anext(body)).startswith(b"id: 1")
    assert await anext(body) == KEEPALIVE  # now waiting for the next frame
    await body.aclose()
    assert closed.is_set()


def test_a_send_stream_ends_at_terminal_and_interrupted_states_a_subscription_at_terminal_only() -> None:
    def update(state: str) -> JSON:
        return {"statusUpdate": {"status": {"state": state}}}

    for ends in (ENDS_SEND_STREAM, ENDS_SUBSCRIPTION):
        assert ends_stream(update("TASK_STATE_COMPLETED"), ends)
        assert ends_stream({"task": {"status": {"state": "TASK_STATE_CANCELED"}}}, ends)
        assert not ends_stream(update("TASK_STATE_WORKING"), ends)
        assert not ends_stream({"task": {"status": {"state": "TASK_STATE_SUBMITTED"}}}, ends)
        assert not ends_stream({"artifactUpdate": {"artifact": {}}}, ends)
    assert ends_stream(update("TASK_STATE_INPUT_REQUIRED"), ENDS_SEND_STREAM)
    assert ends_stream({"task": {"status": {"state": "TASK_STATE_AUTH_REQUIRED"}}}, ENDS_SEND_STREAM)
    assert not ends_stream(update("TASK_STATE_INPUT_REQUIRED"), ENDS_SUBSCRIPTION)
    assert not ends_stream({"task": {"status": {"state": "TASK_STATE_AUTH_REQUIRED"}}}, ENDS_SUBSCRIPTION)


async def test_a_primed_first_frame_is_written_before_the_rest_is_awaited() -> None:
    """The snapshot of a stream goes out at once: no task, no timer, whatever the rest does."""
    started, closed = asyncio.Event(), asyncio.Event()

    async def rest() -> AsyncGenerator[Frame, None]:
        started.set()
        try:
            await asyncio.sleep(3600)
            yield 2, {"b": 2}
        finally:
            closed.set()

    body = sse_body(PrimedFrames((1, {"task": {}}), rest()), BARE, keepalive_s=0.05)
    assert await anext(body) == b'id: 1\ndata: {"task":{}}\n\n'
    assert not started.is_set()  # written before the rest was even asked for its first frame
    assert await anext(body) == KEEPALIVE
    assert started.is_set()
    await body.aclose()
    assert closed.is_set()


async def test_primed_frames_iterate_as_first_then_rest() -> None:
    frames = PrimedFrames((1, {"a": 1}), _frames((2, {"b": 2})))

    assert [f async for f in frames] == [(1, {"a": 1}), (2, {"b": 2})]
    assert await _body(PrimedFrames((3, {"c": 3}), _frames()), BARE) == b'id: 3\ndata: {"c":3}\n\n'


async def test_a_primed_stream_sends_its_first_frame_right_after_the_headers() -> None:
    """Over ASGI: the headers, then the snapshot frame, before the rest of the stream is asked."""
    sent: list[dict[str, Any]] = []
    rest_started_after: list[int] = []

    async def rest() -> AsyncGenerator[Frame, None]:
        rest_started_after.append(len(sent))
        await asyncio.sleep(3600)
        yield 2, {"b": 2}

    @get("/stream")
    async def stream() -> Stream:
        return sse_response(PrimedFrames((1, {"task": {}}), rest()), BARE, keepalive_s=60.0)

    app = Litestar([stream])
    two = asyncio.Event()

    receive_called_after: list[int] = []

    async def receive() -> dict[str, Any]:
        receive_called_after.append(len(sent))
        await asyncio.sleep(3600)  # the request has no body to read; the client stays
        return {"type": "http.disconnect"}

    async def send(message: Any) -> None:
        sent.append(dict(message))
        if len(sent) == 2:
            two.set()

    scope = {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": "GET",
        "scheme": "http",
        "path": "/stream",
        "raw_path": b"/stream",
        "root_path": "",
        "query_string": b"",
        "headers": [],
        "client": ("127.0.0.1", 1),
        "server": ("127.0.0.1", 80),
    }
    serving = asyncio.ensure_future(app(scope, receive, send))  # type: ignore[arg-type]
    await asyncio.wait_for(two.wait(), 5)
    await asyncio.sleep(0.05)  # the rest of the stream starts now, waiting for its next frame
    serving.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await serving

    assert [m["type"] for m in sent[:2]] == ["http.response.start", "http.response.body"]
    assert sent[0]["status"] == 200
    assert sent[1]["body"] == b'id: 1\ndata: {"task":{}}\n\n'
    assert rest_started_after == [2]  # the first frame did not wait for the rest
    # ... nor for the task group Litestar starts for the body and the disconnect listener.
    assert receive_called_after == [2]
