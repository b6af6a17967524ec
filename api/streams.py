"""The two streaming methods, SendStreamingMessage and SubscribeToTask, for any binding.

Each method checks its request and commits what it must (SendStreamingMessage accepts the message
exactly as SendMessage does: ``A2AService.accept_message``) before it returns, so that every
refusal is an ordinary error answer; what it returns is an async iterator of ``(version,
StreamResponse)`` frames that the binding writes as SSE (``api.sse``):

- without ``last_event_id``: the task as committed (``task``, its version the frame's id: a
  ``PrimedFrames`` first frame, built before the method returns and written at once), then
  the ``statusUpdate``/``artifactUpdate`` of every later event
  (``store.public_form.stream_frames``), read from the task feed (``api.task_feed``: NATS live, the
  log for what NATS did not bring), in version order, each once;
- with ``last_event_id`` N (a reconnect): no snapshot, the events after version N, from the log
  and then live (ADR 0017);
- the stream ends after the first frame that leaves the task terminal or interrupted
  (INPUT_REQUIRED, AUTH_REQUIRED), the snapshot included; a resumed stream of a task that is
  already terminal sends what is left of its log after N and ends.

A stream never writes: the client going away closes the iterator and its subscription, and the
task runs on. A reader too slow for its task (more than ``max_pending`` events waiting) gets
``SlowReaderError`` as its stream's last frame and reconnects with its last id.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncGenerator, AsyncIterator
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge

from api.authentication import TenantOf
from api.errors import InvalidParamsError, SlowReaderError, UnsupportedOperationError
from api.file_parts import FileParts
from api.service import A2AService
from api.sse import Frame, PrimedFrames
from api.sse import last_event_id as last_event_id_of
from api.task_feed import PAGE, FeedOverflowError, StoreLog, TaskFeed
from api.wire import SendMessageRequest, SubscribeToTaskRequest, parse_params
from domain.states import INTERRUPTED, TERMINAL
from domain.task import Task
from store.public_form import stream_response

JSON = dict[str, Any]

DEFAULT_MAX_PENDING = 1000
"""Events that may wait for one slow stream before it is closed (``LONGHAUL_STREAM_MAX_PENDING``)."""

NO_FEED = (
    "is not available on this gateway: streams follow the relay's NATS messages and need "
    "LONGHAUL_STORE=postgres and LONGHAUL_NATS_URL (capabilities.streaming is false)"
)

STREAM_METHODS = frozenset({"SendStreamingMessage", "SubscribeToTask"})
"""The methods answered with a stream (``TaskStreams.open``)."""

ENDS_SEND_STREAM = frozenset(str(state) for state in TERMINAL | INTERRUPTED)
"""The wire states after which a SendStreamingMessage stream ends: the task settled, as a blocking send."""

ENDS_SUBSCRIPTION = frozenset(str(state) for state in TERMINAL)
"""The wire states after which a SubscribeToTask stream ends: the task ended (a pause does not end it)."""


class StreamMetrics:
    """This gateway process's streams, in its ``/metrics`` registry (``docs/operations.md``)."""

    def __init__(self, registry: CollectorRegistry | None) -> None:
        self.open = Gauge(
            "longhaul_streams_open", "SSE streams this gateway process is sending now.", registry=registry
        )
        self.cut_slow = Counter(
            "longhaul_streams_cut_slow",
            "SSE streams this gateway process closed because their reader fell too far behind.",
            registry=registry,
        )
        self.sending = 0
        """The open gauge's value: the streams being sent now."""

    def counted(self, frames: AsyncIterator[Frame]) -> AsyncIterator[Frame]:
        """``frames``, counted as an open stream while they are read (a primed first frame stays ready)."""
        if isinstance(frames, PrimedFrames) and frames.first is not None:
            return PrimedFrames(frames.first, self._counted(frames.rest))
        return self._counted(frames)

    async def _counted(self, frames: AsyncIterator[Frame]) -> AsyncGenerator[Frame, None]:
        self.open.inc()
        self.sending += 1
        try:
            async for item in frames:
                yield item
        except SlowReaderError:
            self.cut_slow.inc()
            raise
        finally:
            self.open.dec()
            self.sending -= 1
            close = getattr(frames, "aclose", None)
            if close is not None:
                await close()


class TaskStreams:
    """SendStreamingMessage and SubscribeToTask over ``service`` and a task ``feed``.

    Without a feed (an in-memory store, or no NATS) both methods answer UnsupportedOperation and
    the agent card says ``streaming: false``.
    """

    def __init__(
        self,
        service: A2AService,
        feed: TaskFeed | None,
        store_log: StoreLog | None,
        *,
        max_pending: int = DEFAULT_MAX_PENDING,
        metrics: CollectorRegistry | None = None,
    ) -> None:
        self._metrics = StreamMetrics(metrics)
        self._service = service
        self._feed = feed
        self._log = store_log
        self._max_pending = max_pending

    @property
    def available(self) -> bool:
        """Whether this gateway streams (it has a task feed)."""
        return self._feed is not None and self._log is not None

    def _sources(self, method: str) -> tuple[TaskFeed, StoreLog]:
        """The feed and the log a stream reads, or UnsupportedOperation without them."""
        if self._feed is None or self._log is None:
            raise UnsupportedOperationError(f"{method} {NO_FEED}")
        return self._feed, self._log

    async def open(
        self, method: str, params: Any, last_event_id: str | None, tenant_of: TenantOf
    ) -> AsyncIterator[Frame]:
        """One streaming method's frames, for any binding; refusals raise before any frame.

        ``params`` (JSON) are checked as the method's request, the ``Last-Event-ID`` header is
        read, the method's commit is made. A binding assembles ``params`` (JSON-RPC: the
        request's params; HTTP+JSON: the body, or the task id and tenant from the path) and
        writes the frames with ``api.sse.sse_response``. The request runs as the tenant
        ``tenant_of`` gives for the one its params name (``api.authentication.caller_tenant``).
        """
        self._sources(method)  # a gateway that does not stream says so before it reads anything
        after = last_event_id_of(last_event_id)
        if method == "SendStreamingMessage":
            request = parse_params(SendMessageRequest, params)
            request = request.model_copy(update={"tenant": tenant_of(request.tenant)})
            return self._metrics.counted(await self.send_streaming_message(request, last_event_id=after))
        if method == "SubscribeToTask":
            subscribe = parse_params(SubscribeToTaskRequest, params)
            subscribe = subscribe.model_copy(update={"tenant": tenant_of(subscribe.tenant)})
            return self._metrics.counted(await self.subscribe_to_task(subscribe, last_event_id=after))
        raise ValueError(f"{method} is not a streaming method ({', '.join(sorted(STREAM_METHODS))})")

    async def send_streaming_message(
        self, request: SendMessageRequest, *, last_event_id: int | None = None
    ) -> AsyncIterator[Frame]:
        """Accept the message as SendMessage does, then stream its task until it settles.

        The only stream of this gateway hands its new task to the worker of its process if that
        worker is idle (ADR 0055); beside other streams the task goes to the run queue.
        """
        sources = self._sources("SendStreamingMessage")
        task = await self._service.accept_message(request, hand_off=self._metrics.sending == 0)
        if self._service.answers_with_message(task):
            return _message_only(self._service, task)
        history_length = request.configuration.history_length if request.configuration else None
        return await self._frames(
            sources, task, last_event_id, ENDS_SEND_STREAM, history_length=history_length
        )

    async def subscribe_to_task(
        self, request: SubscribeToTaskRequest, *, last_event_id: int | None = None
    ) -> AsyncIterator[Frame]:
        """Stream a task: its current state, then its events, until it settles.

        A terminal task is refused with UnsupportedOperation (it has nothing more to stream),
        unless ``last_event_id`` asks for what the client missed before it ended.
        """
        sources = self._sources("SubscribeToTask")
        task = await self._service.visible_task(request.id, request.tenant)
        if task.is_terminal and last_event_id is None:
            raise UnsupportedOperationError(
                f"task {request.id} is {task.state}: a terminal task has no more events to stream "
                "(GetTask reads it)"
            )
        return await self._frames(sources, task, last_event_id, ENDS_SUBSCRIPTION)

    async def _frames(
        self,
        sources: tuple[TaskFeed, StoreLog],
        task: Task,
        last_event_id: int | None,
        ends: frozenset[str],
        *,
        history_length: int | None = None,
    ) -> AsyncIterator[Frame]:
        """The stream's frames, ending after the first that leaves the task in a state of ``ends``.

        Every frame is as a client sees it: its stored files' parts carry their URLs
        (``A2AService.files``).
        """
        feed, store_log = sources
        if last_event_id is None:
            snapshot = {"task": await self._service.wire(task, history_length=history_length)}
            rest = _nothing() if ends_stream(snapshot, ends) else self._events(feed, task, task.version, ends)
            return PrimedFrames((task.version, snapshot), rest)
        if last_event_id > task.version:
            raise InvalidParamsError.with_violations(
                f"Last-Event-ID {last_event_id} is past task {task.id}'s version {task.version}",
                [("Last-Event-ID", f"must be at most {task.version}, the task's version")],
            )
        if task.is_terminal:
            return _ended(self._service.files, store_log, task, last_event_id, ends)
        return self._events(feed, task, last_event_id, ends)

    async def _events(
        self, feed: TaskFeed, task: Task, after: int, ends: frozenset[str]
    ) -> AsyncGenerator[Frame, None]:
        """The frames of the task's events after version ``after``, until one ends the stream."""
        messages = feed.follow(task.id, task.tenant, after, max_pending=self._max_pending)
        async with contextlib.aclosing(messages):
            try:
                async for message in messages:
                    response = stream_response(message, task.context_id)
                    if response is None:
                        continue
                    yield message["version"], await self._service.files.public(response, task.id)
                    if ends_stream(response, ends):
                        return
            except FeedOverflowError as error:
                raise SlowReaderError(
                    f"stream closed: more than {error.max_pending} events waited for this client; "
                    "reconnect with Last-Event-ID set to the last id received to go on from there"
                ) from None


async def _nothing() -> AsyncGenerator[Frame, None]:
    """No frames: the snapshot ended the stream."""
    nothing: tuple[Frame, ...] = ()
    for item in nothing:
        yield item


async def _ended(
    files: FileParts, store_log: StoreLog, task: Task, after: int, ends: frozenset[str]
) -> AsyncGenerator[Frame, None]:
    """The frames of a terminal task's events after ``after``, from the log (nothing is live)."""
    while after < task.version:
        messages = await asyncio.to_thread(store_log.read, task.id, task.tenant, after, task.version, PAGE)
        if not messages:
            return
        for message in messages:
            after = message["version"]
            response = stream_response(message, task.context_id)
            if response is not None:
                yield after, await files.public(response, task.id)
                if ends_stream(response, ends):
                    return


def ends_stream(response: JSON, ends: frozenset[str]) -> bool:
    """Whether a ``StreamResponse`` leaves its task in one of the states ``ends`` (the stream ends)."""
    update = response.get("statusUpdate") or response.get("task")
    return update is not None and update["status"]["state"] in ends


async def _message_only(service: A2AService, task: Task) -> AsyncGenerator[Frame, None]:
    """A message-only stream: the one ``message`` answer once the task settled, then the end.

    Its id is the version the send committed (the answer comes from a later one; a resume
    after it gets the task's events, as for any stream).
    """
    yield task.version, await service.message_answer(task)
