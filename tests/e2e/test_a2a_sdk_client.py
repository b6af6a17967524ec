"""The official ``a2a-sdk`` 1.3 client drives every A2A method, over both bindings, against ``longhaul up``.

One ``longhaul up`` serves the module, on its own PostgreSQL schema and JetStream stream, with the
fake IAM it starts itself (for ``access-review``). Each case makes its client the way a new user
would: ``a2a.client.create_client`` reads the agent card and picks the interface of the binding the
case is parametrized with (``jsonrpc``: ``JSONRPC``, ``http_json``: ``HTTP+JSON``). The SDK's
messages are protobuf, so a data part is a ``Struct`` and the integer 3 goes over the wire as
``3.0``.

Every request the SDK sends is recorded (:class:`Wire`), because the SDK answers some calls without
the server: it sends ``SendMessage`` instead of ``SendStreamingMessage`` and refuses to subscribe
when the card says ``streaming: false``, and returns the public card as the extended one when the
card declares none. A case that needs the server's answer checks that it went over the wire.

Selecting cases (``-k``): ``jsonrpc`` or ``http_json`` for one binding; ``stream`` for the SSE
methods (``SendStreamingMessage``, ``SubscribeToTask``); ``numeric`` for the ProtoJSON numbers of
skill parameters (the integer 3 sent as ``3.0``).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
import uuid
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable, Iterator
from typing import Any, cast

import httpx
import pytest
import pytest_asyncio
from a2a.client import A2ACardResolver, Client, ClientConfig, create_client
from a2a.types import (
    AgentCard,
    AuthenticationInfo,
    CancelTaskRequest,
    DeleteTaskPushNotificationConfigRequest,
    GetExtendedAgentCardRequest,
    GetTaskPushNotificationConfigRequest,
    GetTaskRequest,
    ListTaskPushNotificationConfigsRequest,
    ListTasksRequest,
    Message,
    Part,
    Role,
    SendMessageRequest,
    StreamResponse,
    SubscribeToTaskRequest,
    Task,
    TaskPushNotificationConfig,
    TaskState,
)
from a2a.utils.errors import TaskNotCancelableError, TaskNotFoundError, UnsupportedOperationError

from tests.support.up_server import up_server
from tests.support.webhooks import Receiver

BINDINGS = {"jsonrpc": "JSONRPC", "http_json": "HTTP+JSON"}
STARTUP_TIMEOUT_S = 45.0
CASE_TIMEOUT_S = 60.0
PROJECTION_TIMEOUT_S = 20.0
# The operations the SDK may answer without the server, and their HTTP+JSON routes (verbs, path end).
REST_ROUTES = {
    "SendStreamingMessage": (("POST",), "/message:stream"),
    "SubscribeToTask": (("GET", "POST"), ":subscribe"),
    "GetExtendedAgentCard": (("GET",), "/extendedAgentCard"),
}
COMPLETED, CANCELED = TaskState.TASK_STATE_COMPLETED, TaskState.TASK_STATE_CANCELED
INPUT_REQUIRED = TaskState.TASK_STATE_INPUT_REQUIRED
AUTH_REQUIRED = TaskState.TASK_STATE_AUTH_REQUIRED
IN_PROGRESS = {TaskState.TASK_STATE_SUBMITTED, TaskState.TASK_STATE_WORKING}
API_KEY = "research-key-0123456789"


# ---------------------------------------------------------------------------------------- fixtures


@pytest.fixture(scope="module")
def gateway(database_url: str, nats_url: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """``longhaul up`` on a schema and stream of this module's own; yields its base URL."""
    folder = tmp_path_factory.mktemp("a2a-sdk")
    # allow_private_webhooks: the push case's receiver listens on 127.0.0.1
    with up_server(database_url, nats_url, folder, allow_private_webhooks=True) as base:
        yield base


class Wire:
    """Every request the SDK sent: ``(HTTP method, path, JSON-RPC method or None)``."""

    def __init__(self) -> None:
        self.requests: list[tuple[str, str, str | None]] = []

    async def record(self, request: httpx.Request) -> None:
        """The httpx request hook."""
        method = None
        if request.method == "POST" and request.content:
            with contextlib.suppress(ValueError):
                body = json.loads(request.content)
                method = body.get("method") if isinstance(body, dict) and "jsonrpc" in body else None
        self.requests.append((request.method, request.url.path, method))

    def count(self, operation: str) -> int:
        """How many requests asked for ``operation`` (a JSON-RPC method, or its HTTP+JSON route)."""
        verbs, suffix = REST_ROUTES[operation]
        return sum(
            rpc == operation or (rpc is None and verb in verbs and path.endswith(suffix))
            for verb, path, rpc in self.requests
        )


Connect = Callable[..., Awaitable[Client]]


@pytest.fixture(params=list(BINDINGS), ids=list(BINDINGS))
def binding(request: pytest.FixtureRequest) -> str:
    """The protocol binding of this case: ``JSONRPC`` or ``HTTP+JSON``."""
    return BINDINGS[request.param]


@pytest.fixture
def wire() -> Wire:
    """The requests of this case's clients."""
    return Wire()


@pytest_asyncio.fixture
async def card(gateway: str) -> AgentCard:
    """The agent card, as the SDK resolves it from ``/.well-known/agent-card.json``."""
    async with httpx.AsyncClient(timeout=30.0) as http:
        return await A2ACardResolver(http, gateway).get_agent_card()


@pytest_asyncio.fixture
async def connect(card: AgentCard, binding: str, wire: Wire) -> AsyncIterator[Connect]:
    """``await connect(streaming=..., card=...)``: an SDK client made from the card, closed after the case."""
    http = httpx.AsyncClient(timeout=30.0, event_hooks={"request": [wire.record]})
    clients: list[Client] = []

    async def make(*, streaming: bool = False, card: AgentCard = card) -> Client:
        config = ClientConfig(supported_protocol_bindings=[binding], streaming=streaming, httpx_client=http)
        client = await create_client(card, client_config=config)
        clients.append(client)
        return client

    try:
        yield make
    finally:
        for client in clients:
            await client.close()
        await http.aclose()


# ---------------------------------------------------------------------------------------- helpers


def message(
    skill: str,
    text: str = "",
    *,
    data: dict[str, Any] | None = None,
    message_id: str = "",
    task: Task | None = None,
    context_id: str = "",
) -> Message:
    """A user message for ``skill``; with ``task``, the answer to that task."""
    parts = [Part(text=text)] if text else []
    if data is not None:
        part = Part()
        part.data.struct_value.update(data)  # a protobuf Struct: every number is a double
        parts.append(part)
    sent = Message(
        role=Role.ROLE_USER,
        message_id=message_id or str(uuid.uuid4()),
        parts=parts,
        task_id=task.id if task else "",
        context_id=task.context_id if task else context_id,
    )
    sent.metadata.update({"skill": skill})
    return sent


def request(sent: Message, *, immediately: bool = False) -> SendMessageRequest:
    """``SendMessageRequest`` for ``sent``, blocking unless ``immediately``."""
    wrapped = SendMessageRequest(message=sent)
    wrapped.configuration.return_immediately = immediately
    return wrapped


async def events(stream: AsyncIterator[StreamResponse]) -> list[StreamResponse]:
    """Every event of a stream, until the server closes it."""
    async with asyncio.timeout(CASE_TIMEOUT_S):
        return [event async for event in stream]


async def send(client: Client, sent: Message, *, immediately: bool = False) -> Task:
    """A non-streaming send: the one Task it answers with."""
    [answer] = await events(client.send_message(request(sent, immediately=immediately)))
    assert answer.HasField("task"), answer
    return answer.task


async def until_state(client: Client, task_id: str, state: int) -> Task:
    """Poll ``GetTask`` until the task is in ``state``."""
    deadline = time.monotonic() + CASE_TIMEOUT_S
    while (task := await client.get_task(GetTaskRequest(id=task_id))).status.state != state:
        assert time.monotonic() < deadline, f"task still {name(task)}, never {TaskState.Name(state)}"
        await asyncio.sleep(0.05)
    return task


def name(task: Task) -> str:
    """The task's state as on the wire, e.g. ``TASK_STATE_COMPLETED``."""
    return str(TaskState.Name(task.status.state))


def status_text(task: Task) -> str:
    """The text of the task's status message."""
    return " ".join(str(part.text) for part in task.status.message.parts)


def state_of(event: StreamResponse) -> int | None:
    """The task state an event carries (a task or a status update), else ``None``."""
    if event.HasField("task"):
        return event.task.status.state
    if event.HasField("status_update"):
        return event.status_update.status.state
    return None


def report_texts(task: Task) -> list[str]:
    """The text of every part of the research report artifact."""
    [report] = [artifact for artifact in task.artifacts if artifact.artifact_id == "report"]
    return [part.text for part in report.parts]


async def paused_research(client: Client, **data: Any) -> Task:
    """A research task waiting for its API key (AUTH_REQUIRED: the key is a credential)."""
    task = await send(client, message("research", "durable queues", data=data or None))
    assert task.status.state == AUTH_REQUIRED, name(task)
    return task


# ---------------------------------------------------------------------------------------- unary


async def test_send_blocking_answers_with_the_completed_task(connect: Connect) -> None:
    client = await connect()
    sent = message("echo", "hello from the SDK")
    task = await send(client, sent)
    assert task.status.state == COMPLETED, name(task)
    assert task.id
    assert task.context_id
    assert [part.text for part in task.artifacts[0].parts] == ["hello from the SDK"]
    assert [m.message_id for m in task.history] == [sent.message_id]


async def test_send_return_immediately_answers_before_the_work_is_done(connect: Connect) -> None:
    client = await connect()
    sent = message("conformance", "later", message_id=f"tck-delayed-complete-{uuid.uuid4().hex}")
    task = await send(client, sent, immediately=True)  # the skill takes 2 s
    assert task.status.state in IN_PROGRESS, name(task)
    done = await until_state(client, task.id, COMPLETED)
    assert status_text(done) == "Done after delay"


async def test_send_blocking_returns_at_auth_required_and_the_answer_completes(connect: Connect) -> None:
    client = await connect()
    task = await paused_research(client)
    assert "API key" in status_text(task)
    done = await send(client, message("research", data={"api_key": API_KEY}, task=task))
    assert done.id == task.id
    assert done.status.state == COMPLETED, name(done)
    assert len(report_texts(done)) == 5  # five chunks appended to one artifact


async def test_get_task_trims_the_history_to_history_length(connect: Connect) -> None:
    client = await connect()
    task = await paused_research(client)
    answer = message("research", data={"api_key": API_KEY}, task=task)
    await send(client, answer)
    full = await client.get_task(GetTaskRequest(id=task.id))
    user_messages = [m.message_id for m in full.history if m.role == Role.ROLE_USER]
    assert user_messages == [task.history[0].message_id, answer.message_id]
    assert list((await client.get_task(GetTaskRequest(id=task.id, history_length=0))).history) == []
    [last] = (await client.get_task(GetTaskRequest(id=task.id, history_length=1))).history
    assert last.message_id == full.history[-1].message_id


async def test_list_tasks_pages_through_one_context(connect: Connect) -> None:
    client = await connect()
    context_id = str(uuid.uuid4())
    sent = [await send(client, message("echo", f"task {n}", context_id=context_id)) for n in range(3)]
    listing = ListTasksRequest(context_id=context_id, page_size=2)
    deadline = time.monotonic() + PROJECTION_TIMEOUT_S  # ListTasks reads the projected view
    while (first := await client.list_tasks(listing)).total_size < 3:
        assert time.monotonic() < deadline, f"listed {first.total_size} of 3 tasks"
        await asyncio.sleep(0.1)
    assert first.total_size == 3
    assert len(first.tasks) == 2
    assert first.next_page_token
    second = await client.list_tasks(
        ListTasksRequest(context_id=context_id, page_size=2, page_token=first.next_page_token)
    )
    assert len(second.tasks) == 1
    assert second.next_page_token == ""
    listed = [*first.tasks, *second.tasks]
    assert sorted(t.id for t in listed) == sorted(t.id for t in sent)
    stamps = [t.status.timestamp.ToDatetime() for t in listed]
    assert stamps == sorted(stamps, reverse=True)  # most recently updated first
    assert all(not t.artifacts for t in listed)  # includeArtifacts unset


async def test_cancel_task_cancels_a_paused_task_and_refuses_a_terminal_one(connect: Connect) -> None:
    client = await connect()
    task = await paused_research(client)
    canceled = await client.cancel_task(CancelTaskRequest(id=task.id))
    assert canceled.status.state == CANCELED, name(canceled)
    assert (await client.get_task(GetTaskRequest(id=task.id))).status.state == CANCELED
    with pytest.raises(TaskNotCancelableError):
        await client.cancel_task(CancelTaskRequest(id=task.id))


async def test_unknown_task_is_task_not_found(connect: Connect) -> None:
    client = await connect()
    unknown = str(uuid.uuid4())
    with pytest.raises(TaskNotFoundError):
        await client.get_task(GetTaskRequest(id=unknown))
    with pytest.raises(TaskNotFoundError):
        await client.cancel_task(CancelTaskRequest(id=unknown))


async def test_push_config_methods_create_get_list_delete_and_deliver(connect: Connect) -> None:
    client = await connect()
    task = await paused_research(client)
    hooks = Receiver().start()
    try:
        config = TaskPushNotificationConfig(
            task_id=task.id,
            url=hooks.url(),
            token="push-token",
            authentication=AuthenticationInfo(scheme="Bearer", credentials="push-secret"),
        )
        created = await client.create_task_push_notification_config(config)
        assert created.id
        assert (created.task_id, created.url) == (task.id, hooks.url())
        assert not created.authentication.credentials  # never shown back
        key = GetTaskPushNotificationConfigRequest(task_id=task.id, id=created.id)
        assert await client.get_task_push_notification_config(key) == created
        listing = ListTaskPushNotificationConfigsRequest(task_id=task.id)
        assert list((await client.list_task_push_notification_configs(listing)).configs) == [created]

        deleting = DeleteTaskPushNotificationConfigRequest(task_id=task.id, id=created.id)
        await client.delete_task_push_notification_config(deleting)
        await client.delete_task_push_notification_config(deleting)  # idempotent
        with pytest.raises(TaskNotFoundError):
            await client.get_task_push_notification_config(key)
        assert list((await client.list_task_push_notification_configs(listing)).configs) == []

        # A config made through the SDK is live: the cancel is delivered to it.
        await client.create_task_push_notification_config(config)
        await client.cancel_task(CancelTaskRequest(id=task.id))

        def cancels() -> list[Any]:
            updates = [r.json.get("statusUpdate", {}) for r in hooks.answered()]
            return [u for u in updates if u.get("status", {}).get("state") == "TASK_STATE_CANCELED"]

        deadline = time.monotonic() + PROJECTION_TIMEOUT_S
        while not cancels():
            assert time.monotonic() < deadline, "no webhook for the cancel"
            await asyncio.sleep(0.1)
        assert [u["taskId"] for u in cancels()] == [task.id]
    finally:
        hooks.stop()


async def test_extended_card_is_served_or_refused_as_the_card_declares(
    connect: Connect, card: AgentCard, wire: Wire
) -> None:
    if card.capabilities.extended_agent_card:
        extended = await (await connect()).get_extended_agent_card(GetExtendedAgentCardRequest())
        assert wire.count("GetExtendedAgentCard") == 1
        assert extended.name == "longhaul"
        assert {"echo", "research", "access-review"} <= {skill.id for skill in extended.skills}
        return
    # No extended card declared: the SDK would answer with the public card without asking. A
    # client whose copy of the card claims one asks, and the agent must refuse (UnsupportedOperation).
    believing = AgentCard()
    believing.CopyFrom(card)
    believing.capabilities.extended_agent_card = True
    client = await connect(card=believing)
    with pytest.raises(UnsupportedOperationError):
        await client.get_extended_agent_card(GetExtendedAgentCardRequest())
    assert wire.count("GetExtendedAgentCard") == 1


async def test_numeric_parameter_from_a_protobuf_struct_is_an_integer(connect: Connect) -> None:
    client = await connect()
    # ``systems: 3`` travels as 3.0: access-review must take it as the integer it is.
    task = await send(client, message("access-review", "review", data={"systems": 3, "revocations": 2}))
    assert task.status.state == INPUT_REQUIRED, f"{name(task)}: {status_text(task)}"
    done = await send(client, message("access-review", data={"approve": True}, task=task))
    assert done.status.state == COMPLETED, name(done)
    assert status_text(done) == "Access review complete: 2 of 2 proposed revocations applied."


# ---------------------------------------------------------------------------------------- streams


@pytest_asyncio.fixture
async def streamer(connect: Connect, card: AgentCard) -> Client:
    """A streaming SDK client, on a card that must say ``streaming: true`` (else the SDK polls)."""
    assert card.capabilities.streaming, "the card says no streaming"
    return await connect(streaming=True)


async def test_stream_send_message_sends_the_task_then_its_updates(
    streamer: Client, connect: Connect, wire: Wire
) -> None:
    client = streamer
    streamed = await events(client.send_message(request(message("echo", "streamed echo"))))
    assert wire.count("SendStreamingMessage") == 1
    assert streamed[0].HasField("task"), streamed[0]
    task_id = streamed[0].task.id
    states = [s for s in map(state_of, streamed) if s is not None]
    assert states[-1] == COMPLETED, [TaskState.Name(s) for s in states]
    assert set(states[states.index(COMPLETED) :]) == {COMPLETED}  # at most a final snapshot after it
    chunks = [e.artifact_update for e in streamed if e.HasField("artifact_update")]
    assert [part.text for chunk in chunks for part in chunk.artifact.parts] == ["streamed echo"]
    assert all(chunk.task_id == task_id for chunk in chunks)


async def test_stream_closes_at_auth_required_and_streams_the_chunks_after_the_answer(
    streamer: Client,
) -> None:
    client = streamer
    first = await events(
        client.send_message(request(message("research", "streams", data={"chunk_delay_ms": 20})))
    )
    assert first[0].HasField("task")
    assert state_of(first[-1]) == AUTH_REQUIRED  # the stream closed at the interrupted state
    task = first[0].task
    second = await events(
        client.send_message(request(message("research", data={"api_key": API_KEY}, task=task)))
    )
    chunks = [e.artifact_update for e in second if e.HasField("artifact_update")]
    assert [(c.append, c.last_chunk) for c in chunks] == [(False, False), *[(True, False)] * 3, (True, True)]
    assert state_of(second[-1]) == COMPLETED
    done = await client.get_task(GetTaskRequest(id=task.id))
    assert [part.text for c in chunks for part in c.artifact.parts] == report_texts(done)


async def test_stream_subscribe_and_resubscribe_see_every_chunk_once(
    streamer: Client, connect: Connect, wire: Wire
) -> None:
    client = streamer
    plain = await connect()
    task = await paused_research(plain, chunk_delay_ms=700)  # five chunks: 3.5 s to resubscribe in
    await send(plain, message("research", data={"api_key": API_KEY}, task=task), immediately=True)

    resubscribe = SubscribeToTaskRequest(id=task.id)
    subscription = cast("AsyncGenerator[StreamResponse]", client.subscribe(resubscribe))
    async with contextlib.aclosing(subscription) as stream:
        seen = []
        async for event in stream:  # the snapshot, then up to the first chunk: then hang up
            seen.append(event)
            if event.HasField("artifact_update"):
                break
    assert seen[0].HasField("task"), seen[0]
    assert seen[-1].HasField("artifact_update")

    again = await events(client.subscribe(SubscribeToTaskRequest(id=task.id)))
    assert wire.count("SubscribeToTask") == 2
    assert again[0].HasField("task"), again[0]
    snapshot = again[0].task
    assert snapshot.status.state not in {COMPLETED, CANCELED}, name(snapshot)
    texts = report_texts(snapshot) if snapshot.artifacts else []
    texts += [
        p.text for e in again[1:] if e.HasField("artifact_update") for p in e.artifact_update.artifact.parts
    ]
    assert state_of(again[-1]) == COMPLETED
    done = await plain.get_task(GetTaskRequest(id=task.id))
    assert texts == report_texts(done)  # the snapshot and the events after it: no gap, no repeat


async def test_stream_subscribe_refuses_terminal_and_unknown_tasks(
    streamer: Client, connect: Connect
) -> None:
    client = streamer
    done = await send(await connect(), message("echo", "already done"))
    with pytest.raises(UnsupportedOperationError):
        await events(client.subscribe(SubscribeToTaskRequest(id=done.id)))
    with pytest.raises(TaskNotFoundError):
        await events(client.subscribe(SubscribeToTaskRequest(id=str(uuid.uuid4()))))
