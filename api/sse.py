r"""Server-sent events: one stream's frames as the bytes of a ``text/event-stream`` body.

A stream (``api.streams``) is an async iterator of ``(version, StreamResponse)`` pairs. ``sse_body``
writes each as one SSE event whose ``id:`` is the task version and whose ``data:`` is the
binding's envelope around the ``StreamResponse`` (``SseEnvelope``: JSON-RPC wraps it in a
response object, HTTP+JSON sends it bare), and a comment (``: keepalive``) whenever the stream
was idle for ``keepalive_s`` so that proxies do not cut it. An ``A2AError`` raised by the stream
after it started becomes one last event carrying the binding's error, and the body ends.

The data is one line of compact JSON (JSON escapes every newline inside strings), so a frame is
``id: 7\ndata: {...}\n\n``. A client that reconnects sends the last id it saw as
``Last-Event-ID``; ``last_event_id`` reads that header.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from collections.abc import AsyncGenerator, AsyncIterator, Callable
from dataclasses import dataclass
from typing import Any

from litestar.response import Stream
from litestar.response.base import ASGIResponse
from litestar.response.streaming import ASGIStreamingResponse
from litestar.types import Receive, Send

from api.errors import A2AError, InternalError, InvalidParamsError

JSON = dict[str, Any]
Frame = tuple[int, JSON]
"""One event of a stream: the task version it shows and its ``StreamResponse``."""

log = logging.getLogger(__name__)

MEDIA_TYPE = "text/event-stream"
KEEPALIVE = b": keepalive\n\n"
HEADERS = {"Cache-Control": "no-cache", "X-Accel-Buffering": "no"}
"""Sent with every stream: no caching, and no buffering by a proxy in front (nginx honours it)."""


@dataclass(frozen=True)
class SseEnvelope:
    """What a binding puts in ``data:``: ``result`` of a StreamResponse, ``error`` of an A2AError.

    ``error_event`` names the SSE event of an error frame (HTTP+JSON: ``error``); None sends it
    as a plain ``message`` event (JSON-RPC: the data is a JSON-RPC error response).
    """

    result: Callable[[JSON], JSON]
    error: Callable[[A2AError], JSON]
    error_event: str | None = None


class PrimedFrames:
    """A stream whose first frame is ready when it opens (the task snapshot), then ``rest``.

    ``sse_body`` writes ``first`` at once, before it starts waiting on ``rest`` (with keep-alives):
    the first frame of a stream costs no task and no timer, only the write (ADR 0017's snapshot).
    As an iterator it gives ``first`` then ``rest``'s frames.
    """

    def __init__(self, first: Frame, rest: AsyncIterator[Frame]) -> None:
        self.first: Frame | None = first
        self.rest = rest

    def take_first(self) -> Frame | None:
        """The first frame, once (None after it was taken)."""
        first, self.first = self.first, None
        return first

    def __aiter__(self) -> PrimedFrames:
        return self

    async def __anext__(self) -> Frame:
        first = self.take_first()
        if first is not None:
            return first
        return await anext(self.rest)

    async def aclose(self) -> None:
        """Close ``rest`` (and its subscription)."""
        close = getattr(self.rest, "aclose", None)
        if close is not None:
            await close()


def jsonrpc_envelope(request_id: str | int | None) -> SseEnvelope:
    """The JSON-RPC binding's envelope: every ``data:`` is a full JSON-RPC response with ``id``."""
    return SseEnvelope(
        result=lambda response: {"jsonrpc": "2.0", "id": request_id, "result": response},
        error=lambda error: {"jsonrpc": "2.0", "id": request_id, "error": error.to_jsonrpc()},
    )


def rest_envelope(error_body: Callable[[A2AError], JSON]) -> SseEnvelope:
    """The HTTP+JSON binding's envelope: the bare StreamResponse; an error as ``event: error``.

    ``error_body`` is the binding's error body (a ``google.rpc.Status`` JSON, as its non-streaming
    errors carry).
    """
    return SseEnvelope(result=lambda response: response, error=error_body, error_event="error")


def sse_response(frames: AsyncIterator[Frame], envelope: SseEnvelope, keepalive_s: float) -> Stream:
    """The ``text/event-stream`` response of a stream's frames, in any binding's ``envelope``.

    A route of either binding opens the stream first (``api.streams``: refusals raise before
    any frame, as ordinary error answers) and returns this.
    """
    response = SseStream if isinstance(frames, PrimedFrames) else Stream
    return response(
        sse_body(frames, envelope, keepalive_s=keepalive_s),
        media_type=MEDIA_TYPE,
        headers=HEADERS,
        status_code=200,  # Litestar answers a POST with 201 unless told
    )


class SseStream(Stream):
    """The response of a stream with a primed first frame: that frame follows the headers at once.

    Litestar's streaming response starts a task group (the body in one task, the disconnect
    listener in another) after the headers, so the first chunk waits for the loop to run the
    new task. Here the first chunk, ready by construction, is sent by the task that sent the
    headers; the rest is streamed as Litestar does.
    """

    def to_asgi_response(self, *args: Any, **kwargs: Any) -> ASGIResponse:
        """Litestar's streaming response, sending its first chunk before it starts the task group."""
        response = super().to_asgi_response(*args, **kwargs)
        assert isinstance(response, ASGIStreamingResponse)
        response.__class__ = _FirstChunkAtOnce
        return response


class _FirstChunkAtOnce(ASGIStreamingResponse):
    __slots__ = ()  # the layout of ASGIStreamingResponse, so that an instance can become one

    async def send_body(self, send: Send, receive: Receive) -> None:
        first = await anext(aiter(self.iterator), None)
        if first is None:
            await send({"type": "http.response.body", "body": b"", "more_body": False})
            return
        body = first if isinstance(first, bytes) else first.encode(self.encoding)
        await send({"type": "http.response.body", "body": body, "more_body": True})
        await super().send_body(send, receive)


def frame(data: JSON, *, event_id: int | None = None, event: str | None = None) -> bytes:
    """One SSE event: ``id:`` (if any), ``event:`` (if any), then ``data:`` as one line of JSON."""
    lines = []
    if event_id is not None:
        lines.append(f"id: {event_id}")
    if event is not None:
        lines.append(f"event: {event}")
    lines.append("data: " + json.dumps(data, separators=(",", ":"), ensure_ascii=False))
    return ("\n".join(lines) + "\n\n").encode()


def last_event_id(header: str | None) -> int | None:
    """The version in a ``Last-Event-ID`` header (None when absent or empty); InvalidParams otherwise."""
    if header is None or not header.strip():
        return None
    text = header.strip()
    if not text.isdigit() or not text.isascii():
        raise InvalidParamsError.with_violations(
            f"invalid Last-Event-ID {text!r}: send the id of the last event received (a task version)",
            [("Last-Event-ID", "must be a non-negative integer (the id of an event of this stream)")],
        )
    return int(text)


async def sse_body(
    frames: AsyncIterator[Frame], envelope: SseEnvelope, *, keepalive_s: float
) -> AsyncGenerator[bytes, None]:
    """The bytes of the stream: its frames, keep-alive comments while idle, a last error frame.

    A ``PrimedFrames`` stream's first frame is written at once. The stream is read one frame
    ahead of nothing: the next frame is awaited only after the last one was written (the
    server's send waits for a slow client), so nothing piles up here; the feed under the stream
    bounds what waits for a slow reader (``api.task_feed``). When the
    client goes away the body is closed, which closes the stream and its NATS subscription.
    """
    pending: asyncio.Future[Frame] | None = None
    try:
        first = frames.take_first() if isinstance(frames, PrimedFrames) else None
        if first is not None:
            yield frame(envelope.result(first[1]), event_id=first[0])
        while True:
            if pending is None:
                pending = asyncio.ensure_future(anext(frames))
            done, _ = await asyncio.wait({pending}, timeout=keepalive_s)
            if not done:
                yield KEEPALIVE
                continue
            arrived, pending = pending, None
            try:
                version, response = arrived.result()
            except StopAsyncIteration:
                return
            except A2AError as error:
                yield frame(envelope.error(error), event=envelope.error_event)
                return
            except Exception:
                log.exception("a stream failed after it started")
                yield frame(envelope.error(InternalError()), event=envelope.error_event)
                return
            yield frame(envelope.result(response), event_id=version)
    finally:
        if pending is not None and not pending.done():
            pending.cancel()
            with contextlib.suppress(asyncio.CancelledError, StopAsyncIteration, Exception):
                await pending
        close = getattr(frames, "aclose", None)
        if close is not None:
            await close()


@dataclass(frozen=True)
class SseEvent:
    """One event as a client reads it: ``id``, ``event`` and the decoded ``data`` (None for a comment)."""

    id: int | None
    event: str | None
    data: Any
    comment: str | None = None


async def read_events(lines: AsyncIterator[str]) -> AsyncGenerator[SseEvent, None]:
    """The events (and comments) of an SSE body, given line by line (a client's side: tests, bench).

    Reads what ``frame`` and ``sse_body`` write: one ``data:`` line of JSON per event.
    """
    event_id: int | None = None
    event: str | None = None
    data: list[str] = []
    async for line in lines:
        if line == "":
            if data:
                yield SseEvent(event_id, event, json.loads("\n".join(data)))
            event_id, event, data = None, None, []
        elif line.startswith(":"):
            yield SseEvent(None, None, None, comment=line[1:].strip())
        else:
            name, _, value = line.partition(":")
            value = value.removeprefix(" ")
            if name == "id":
                event_id = int(value)
            elif name == "event":
                event = value
            elif name == "data":
                data.append(value)
    if data:
        yield SseEvent(event_id, event, json.loads("\n".join(data)))
