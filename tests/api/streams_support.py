"""A gateway served over real HTTP in the test's event loop, with a relay, and an SSE client.

The streams are tested over a socket (uvicorn), not through httpx's ASGI transport, which reads a
whole response before it returns one: a stream that never ends, a client that stops reading or
goes away, are only real over a connection.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import httpx
import uvicorn
from litestar import Litestar

from api.sse import SseEvent, read_events
from api.task_feed import StoreLog, TaskFeed
from store.log.application import TaskApplication
from store.public_form.subjects import NatsNames
from workers.relay import Relay

JSON = dict[str, Any]
A2A_HEADERS = {"A2A-Version": "1.0"}


@contextlib.asynccontextmanager
async def served(app: Litestar, *, send_buffer: int | None = None) -> AsyncIterator[str]:
    """Serve ``app`` on a free loopback port until the block ends; yields the base URL.

    ``send_buffer`` fixes the kernel's send buffer of every accepted connection (no autotuning),
    so that a client that stops reading blocks the server's writes soon.
    """
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    if send_buffer is not None:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, send_buffer)
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    config = uvicorn.Config(app, log_level="warning", log_config=None, access_log=False, lifespan="off")
    server = uvicorn.Server(config)
    serving = asyncio.ensure_future(server.serve(sockets=[sock]))
    try:
        async with asyncio.timeout(10):
            while not server.started:  # noqa: ASYNC110 - uvicorn sets a flag, not an event
                await asyncio.sleep(0.01)
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        server.force_exit = True
        await serving
        sock.close()


@contextlib.asynccontextmanager
async def relay_and_feed(
    store: TaskApplication, names: NatsNames, *, fallback_poll: float = 1.0
) -> AsyncIterator[TaskFeed]:
    """A real relay publishing the store's log to NATS, and a task feed reading it."""
    stop = asyncio.Event()
    relay = asyncio.ensure_future(Relay(store=store, names=names).run(stop))
    feed = await TaskFeed.connect(names, StoreLog(store), fallback_poll=fallback_poll)
    try:
        yield feed
    finally:
        await feed.close()
        stop.set()
        await relay


def rpc_body(method: str, params: JSON, request_id: int | str = 1) -> JSON:
    """A JSON-RPC request."""
    return {"jsonrpc": "2.0", "id": request_id, "method": method, "params": params}


@dataclass
class OpenStream:
    """A streaming response being read: its HTTP response and its events, one at a time."""

    response: httpx.Response
    events: AsyncIterator[SseEvent]

    async def next(self, timeout: float = 10.0) -> SseEvent:  # noqa: ASYNC109 - a test's bound
        """The next event that is not a comment."""
        async with asyncio.timeout(timeout):
            while True:
                event = await anext(self.events)
                if event.comment is None:
                    return event

    async def rest(self, timeout: float = 10.0) -> list[SseEvent]:  # noqa: ASYNC109 - a test's bound
        """Every event left until the server ends the stream (comments left out)."""
        async with asyncio.timeout(timeout):
            return [event async for event in self.events if event.comment is None]


@contextlib.asynccontextmanager
async def open_stream(
    client: httpx.AsyncClient, method: str, params: JSON, *, last_event_id: int | None = None
) -> AsyncIterator[OpenStream]:
    """POST a streaming JSON-RPC call and read its SSE answer (asserting it is one)."""
    request = client.build_request(
        "POST", "/a2a/jsonrpc", json=rpc_body(method, params), headers=_headers(last_event_id)
    )
    async with _opened(client, request) as stream:
        yield stream


@contextlib.asynccontextmanager
async def open_rest_stream(
    client: httpx.AsyncClient,
    verb: str,
    path: str,
    body: JSON | None = None,
    *,
    last_event_id: int | None = None,
) -> AsyncIterator[OpenStream]:
    """Call a streaming HTTP+JSON route (``path`` under ``/a2a/rest``) and read its SSE answer."""
    request = client.build_request(verb, f"/a2a/rest{path}", json=body, headers=_headers(last_event_id))
    async with _opened(client, request) as stream:
        yield stream


def _headers(last_event_id: int | None) -> dict[str, str]:
    headers = dict(A2A_HEADERS)
    if last_event_id is not None:
        headers["Last-Event-ID"] = str(last_event_id)
    return headers


@contextlib.asynccontextmanager
async def _opened(client: httpx.AsyncClient, request: httpx.Request) -> AsyncIterator[OpenStream]:
    response = await client.send(request, stream=True)
    try:
        assert response.status_code == 200, response.status_code
        assert response.headers["content-type"].startswith("text/event-stream"), response.headers
        yield OpenStream(response, read_events(response.aiter_lines()))
    finally:
        await response.aclose()


def results(events: list[SseEvent]) -> list[JSON]:
    """The StreamResponses of JSON-RPC SSE events (asserting each is a result)."""
    out = []
    for event in events:
        assert "result" in event.data, event
        out.append(event.data["result"])
    return out


def pairs(events: list[SseEvent]) -> list[tuple[int | None, JSON]]:
    """``(id, StreamResponse)`` of each JSON-RPC SSE event: what ``visible`` compares with the log."""
    return list(zip([event.id for event in events], results(events), strict=True))


def state_of(response: JSON) -> str | None:
    """The state a StreamResponse shows (None for an artifact update)."""
    update = response.get("task") or response.get("statusUpdate")
    return None if update is None else str(update["status"]["state"])
