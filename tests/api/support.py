"""Helpers for the gateway tests: a movable clock, sample skills and messages, assertions."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any
from uuid import UUID, uuid4, uuid5

import httpx
import pytest
import pytest_asyncio
from litestar import Litestar

from api.app import create_app
from api.config import GatewayConfig
from domain.skill import Complete, Skill, SkillRegistry, StepContext, StepOutcome
from domain.task import Task
from store.log.application import TASK_ID_NAMESPACE, TaskApplication
from store.log.config import MemoryConfig

JSON = dict[str, Any]
PUBLIC_URL = "http://gateway.test:8080"
A2A_HEADERS = {"A2A-Version": "1.0"}

Rpc = Callable[..., Awaitable[JSON]]
"""``rpc(method, params, *, request_id=1, headers=None)`` -> the decoded JSON-RPC response."""


@dataclass
class FakeClock:
    """A clock the test moves by hand."""

    now: datetime = field(default_factory=lambda: datetime(2026, 3, 1, 9, 30, 0, 123456, tzinfo=UTC))

    def __call__(self) -> datetime:
        return self.now

    def advance(self, delta: timedelta) -> None:
        self.now += delta


async def _echo_step(context: StepContext) -> StepOutcome:
    return Complete()


def make_registry() -> SkillRegistry:
    """echo (versions 1 and 2) and research; no worker runs them in these tests."""
    return SkillRegistry(
        [
            Skill("echo", 1, [_echo_step], "Echo, first version", ("demo",)),
            Skill("echo", 2, [_echo_step], "Echo the text back", ("demo", "test")),
            Skill("research", 1, [_echo_step], "Delegated research", ("research",)),
        ]
    )


def http_client(app: Litestar) -> httpx.AsyncClient:
    """An httpx client that calls ``app`` in this event loop.

    Litestar's own test client runs the app through a thread portal and blocks the loop while it
    does, which would serialise the concurrent requests these tests make.
    """
    transport = httpx.ASGITransport(app=app)  # type: ignore[arg-type]  # Litestar's precise ASGI types
    return httpx.AsyncClient(transport=transport, base_url="http://gateway.test", headers=A2A_HEADERS)


def gateway_app(store: TaskApplication, clock: FakeClock, **overrides: Any) -> Litestar:
    """The gateway app of these tests over ``store``; keyword arguments override ``GatewayConfig``'s."""
    arguments: JSON = {
        "store": store,
        "registry": make_registry(),
        "clock": clock,
        "default_skill": "echo",
        "max_pause": timedelta(days=7),
        "retention": timedelta(days=30),
        "public_url": PUBLIC_URL,
        "blocking_timeout_s": 10.0,
    }
    arguments.update(overrides)
    return create_app(GatewayConfig(**arguments))


class OneGatewayPerClass:
    """Base of a test class whose every test is checked to append nothing: one app for the class.

    Building the app is most of a short gateway test's time (Litestar registers every route anew,
    about 50 ms). A class whose tests each assert that the log did not move (a fixture of its
    module) leaves the store as it found it, empty, so each of its tests sees what a store of its
    own would show. The app's limit on requests in flight is its fixed ceiling (target 0), so no
    test's timing moves the limit a later test meets. A test's own ``make_app(...)`` still builds
    a fresh app (over the class's store).
    """

    @pytest.fixture(scope="class")
    @classmethod
    def store(cls) -> Iterator[TaskApplication]:
        application = TaskApplication(MemoryConfig())
        yield application
        application.close()

    @pytest.fixture(scope="class")
    @classmethod
    def clock(cls) -> FakeClock:
        return FakeClock()

    @pytest.fixture(scope="class")
    @classmethod
    def class_app(cls, store: TaskApplication, clock: FakeClock) -> Litestar:
        return gateway_app(store, clock, overload_target_s=0)

    @pytest_asyncio.fixture
    async def client(self, class_app: Litestar) -> AsyncIterator[httpx.AsyncClient]:
        async with http_client(class_app) as http:
            yield http


def user_message(text: str = "hello", *, message_id: str | None = None, **extra: Any) -> JSON:
    """A client message in wire shape."""
    return {"messageId": message_id or uuid4().hex, "role": "ROLE_USER", "parts": [{"text": text}], **extra}


def task_id_for(message_id: str, tenant: str = "default") -> UUID:
    """The id the gateway derives for a task started by ``message_id``."""
    return uuid5(TASK_ID_NAMESPACE, f"{tenant}\n{message_id}")


def log_position(store: TaskApplication) -> int:
    """The highest notification id in the log (0 when empty)."""
    return store.recorder.max_notification_id() or 0


def error_of(response: JSON, code: int, reason: str) -> JSON:
    """Assert ``response`` is a JSON-RPC error with ``code`` and ErrorInfo ``reason``; return it."""
    assert "result" not in response, response
    error: JSON = response["error"]
    assert set(error) == {"code", "message", "data"}, error
    assert error["code"] == code, error
    info = error["data"][0]
    assert info == {
        "@type": "type.googleapis.com/google.rpc.ErrorInfo",
        "reason": reason,
        "domain": "a2a-protocol.org",
        "metadata": {},
    }
    return error


class Advance:
    """Moves a task through the domain as a worker would (there is no worker in these tests)."""

    def __init__(self, store: TaskApplication, clock: FakeClock) -> None:
        self.store, self.clock = store, clock

    async def wait_exists(self, task_id: UUID) -> Task:
        """Wait (up to 5 s) until the gateway has saved the task."""
        async with asyncio.timeout(5):
            while True:
                try:
                    return await asyncio.to_thread(self.store.get, task_id)
                except LookupError:
                    await asyncio.sleep(0.01)

    async def wait_for(self, task_id: UUID, condition: Callable[[Task], bool]) -> Task:
        """Wait (up to 5 s) until the stored task meets ``condition``."""
        async with asyncio.timeout(5):
            while True:
                task = await asyncio.to_thread(self.store.get, task_id)
                if condition(task):
                    return task
                await asyncio.sleep(0.01)

    def _leased(self, task_id: UUID) -> tuple[Task, int]:
        task = self.store.get(task_id)
        if task.lease_owner is not None:
            return task, task.lease_epoch
        now = self.clock()
        epoch = task.grant_lease(worker="test-worker", now=now, until=now + timedelta(hours=1))
        return task, epoch

    def start(self, task_id: UUID) -> Task:
        """Grant a lease (SUBMITTED -> WORKING)."""
        task, _ = self._leased(task_id)
        self.store.save_tasks(task)
        return task

    def complete(self, task_id: UUID, text: str = "done") -> Task:
        """Lease if needed, add an artifact and complete."""
        task, epoch = self._leased(task_id)
        now = self.clock()
        artifact = {"artifactId": "out", "name": "out", "parts": [{"text": text}]}
        task.append_artifact(epoch=epoch, now=now, artifact=artifact)
        task.complete(epoch=epoch, now=now, message={"role": "ROLE_AGENT", "parts": [{"text": text}]})
        self.store.save_tasks(task)
        return task

    def ask(self, task_id: UUID, question: str = "approve?", deadline: timedelta = timedelta(days=1)) -> Task:
        """Lease if needed and pause for input (the worker's step 0 or the next one)."""
        task, epoch = self._leased(task_id)
        now = self.clock()
        task.request_input(
            epoch=epoch,
            now=now,
            step=task.next_step,
            checkpoint={},
            question={"messageId": uuid4().hex, "role": "ROLE_AGENT", "parts": [{"text": question}]},
            deadline=now + deadline,
        )
        self.store.save_tasks(task)
        return task

    def expire(self, task_id: UUID) -> Task:
        """Complete (if needed) and expire the task."""
        task = self.store.get(task_id)
        if not task.is_terminal:
            task = self.complete(task_id)
        task.expire(now=self.clock(), reason="retention")
        self.store.save_tasks(task)
        return task
