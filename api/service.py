"""The gateway's use cases: SendMessage, GetTask and CancelTask over the event store.

Each use case is *load -> domain command -> save* on the ``Task`` aggregate, run in a worker
thread because the store is synchronous. A refused command raises an ``A2AError`` and appends
nothing. A lost optimistic race (``ConflictError``) is retried after reloading: the reload
re-checks everything, so a retry never acts on a stale decision.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Any, TypeVar
from uuid import UUID, uuid4, uuid5

from api.errors import (
    InternalError,
    InvalidParamsError,
    PushNotificationNotSupportedError,
    TaskNotCancelableError,
    TaskNotFoundError,
    UnsupportedOperationError,
)
from api.task_wire import agent_message, iso_millis, task_to_wire
from api.waiting import TaskWaiter
from api.wire import CancelTaskRequest, GetTaskRequest, Message, SendMessageRequest
from domain.clock import Clock
from domain.errors import NotPausedError, PauseDeadlinePassedError, TaskTerminalError
from domain.skill import Skill, SkillRegistry, UnknownSkillError
from domain.states import INTERRUPTED, TERMINAL
from domain.task import Task
from store.application import ConflictError, TaskStore
from store.application import TaskNotFoundError as StoredTaskNotFound

JSON = dict[str, Any]
T = TypeVar("T")

DEFAULT_TENANT = "default"
"""The tenant of a request that names none."""

TASK_ID_NAMESPACE = UUID("6f0d5b8e-3a4c-5d7e-9b1a-2c3d4e5f6a7b")
"""Fixed namespace of task ids: ``uuid5(TASK_ID_NAMESPACE, f"{tenant}\\n{messageId}")``.

Deriving the id from the first message's id makes a resend of that message find the task it
created instead of creating a second one. Never change it: existing ids would stop matching.
"""

CONFLICT_RETRIES = 5
CANCEL_REASON = "canceled by the client"


class A2AService:
    """SendMessage, GetTask and CancelTask for one event store and skill registry."""

    def __init__(
        self,
        *,
        store: TaskStore,
        registry: SkillRegistry,
        clock: Clock,
        default_skill: str,
        waiter: TaskWaiter,
        blocking_timeout_s: float = 600,
    ) -> None:
        self._store = store
        self._registry = registry
        self._clock = clock
        self._default_skill = default_skill
        self._waiter = waiter
        self._blocking_timeout_s = blocking_timeout_s

    # ------------------------------------------------------------------ use cases

    async def send_message(self, request: SendMessageRequest) -> JSON:
        """Start a task, or answer a paused one; blocks until it settles unless asked not to."""
        configuration = request.configuration
        if configuration is not None and configuration.task_push_notification_config is not None:
            raise PushNotificationNotSupportedError(
                "push notifications are not supported by this agent (capabilities.pushNotifications is false)"
            )
        tenant = request.tenant or DEFAULT_TENANT
        if request.message.task_id is None:
            task = await asyncio.to_thread(self._submit, tenant, request)
        else:
            task_id = request.message.task_id
            task = await self._with_retries(lambda: self._answer(tenant, task_id, request.message))
        if configuration is None or not configuration.return_immediately:
            task = await self._settled(task)
        history_length = configuration.history_length if configuration is not None else None
        return {"task": task_to_wire(task, history_length=history_length)}

    async def get_task(self, request: GetTaskRequest) -> JSON:
        """The task as it is now."""
        task = await asyncio.to_thread(self._visible, request.tenant or DEFAULT_TENANT, request.id)
        return task_to_wire(task, history_length=request.history_length)

    async def cancel_task(self, request: CancelTaskRequest) -> JSON:
        """Cancel a task that has not finished; the worker holding it is fenced out."""
        tenant = request.tenant or DEFAULT_TENANT
        task = await self._with_retries(lambda: self._cancel(tenant, request.id))
        return task_to_wire(task)

    # ------------------------------------------------------------------ commands (run in a thread)

    def _submit(self, tenant: str, request: SendMessageRequest) -> Task:
        message = request.message
        skill = self._skill_for(request)
        task_id = uuid5(TASK_ID_NAMESPACE, f"{tenant}\n{message.message_id}")
        existing = self._maybe_load(task_id)
        if existing is not None:
            return self._resent(existing, tenant, message)
        context_id = message.context_id or str(uuid4())
        task = Task.submit(
            task_id=task_id,
            now=self._clock(),
            tenant=tenant,
            context_id=context_id,
            skill=skill.name,
            skill_version=skill.version,
            message={**message.to_json(), "taskId": str(task_id), "contextId": context_id},
            params=_params_of(message),
        )
        try:
            self._store.save_tasks(task)
        except ConflictError:
            # The same message was submitted concurrently and the other request won.
            return self._resent(self._store.get(task_id), tenant, message)
        return task

    def _answer(self, tenant: str, task_id: str, message: Message) -> Task:
        task = self._visible(tenant, task_id)
        if message.context_id is not None and message.context_id != task.context_id:
            raise InvalidParamsError(
                f"contextId {message.context_id!r} does not match the context of task {task.id} "
                f"({task.context_id!r})"
            )
        answer = {**message.to_json(), "taskId": str(task.id), "contextId": task.context_id}
        try:
            task.receive_input(now=self._clock(), message=answer)
        except TaskTerminalError:
            raise UnsupportedOperationError(
                f"task is {task.state}; terminal tasks are immutable (start a new task in the same context)"
            ) from None
        except NotPausedError:
            raise UnsupportedOperationError(
                f"task is {task.state} and is not waiting for input; a follow-up message is accepted only in "
                "TASK_STATE_INPUT_REQUIRED or TASK_STATE_AUTH_REQUIRED"
            ) from None
        except PauseDeadlinePassedError:
            deadline = iso_millis(task.pause_deadline)
            raise UnsupportedOperationError(
                f"task {task.id} no longer waits for input: its deadline {deadline} passed"
            ) from None
        self._store.save_tasks(task)
        return task

    def _cancel(self, tenant: str, task_id: str) -> Task:
        task = self._visible(tenant, task_id)
        if task.is_terminal:
            raise _not_cancelable(task)
        message = agent_message(
            "Canceled by the client.", task_id=task.id, context_id=task.context_id, message_id=str(uuid4())
        )
        try:
            task.cancel(now=self._clock(), reason=CANCEL_REASON, message=message)
        except TaskTerminalError:
            raise _not_cancelable(task) from None
        self._store.save_tasks(task)
        return task

    # ------------------------------------------------------------------ helpers

    def _skill_for(self, request: SendMessageRequest) -> Skill:
        name: object = (request.message.metadata or {}).get("skill") or (request.metadata or {}).get("skill")
        if name is None:
            name = self._default_skill
        if not isinstance(name, str):
            raise InvalidParamsError.with_violations(
                "invalid params: metadata.skill must be a string", [("metadata.skill", "must be a string")]
            )
        try:
            return self._registry.newest(name)
        except UnknownSkillError as error:
            raise InvalidParamsError(str(error)) from None

    def _maybe_load(self, task_id: UUID) -> Task | None:
        try:
            return self._store.get(task_id)
        except StoredTaskNotFound:
            return None

    def _resent(self, task: Task, tenant: str, message: Message) -> Task:
        """The task an earlier send of ``message`` created (a resend is answered with it)."""
        first_id = task.history[0].get("messageId") if task.history else None
        if task.tenant != tenant or first_id != message.message_id:
            raise InternalError(f"task id collision for message {message.message_id!r}")
        if task.expired:
            raise TaskNotFoundError(_expired_text(str(task.id)))
        if message.context_id is not None and message.context_id != task.context_id:
            raise InvalidParamsError(
                f"messageId {message.message_id!r} already started task {task.id} in context "
                f"{task.context_id!r}, not {message.context_id!r}"
            )
        return task

    def _visible(self, tenant: str, task_id: str) -> Task:
        """The task, if it exists for this tenant and has not expired; else TaskNotFound."""
        not_found = TaskNotFoundError(f"task {task_id!r} not found")
        try:
            uuid = UUID(task_id)
        except ValueError:
            raise not_found from None
        if str(uuid) != task_id.lower():
            raise not_found
        task = self._maybe_load(uuid)
        if task is None or task.tenant != tenant:
            raise not_found
        if task.expired:
            raise TaskNotFoundError(_expired_text(task_id))
        return task

    async def _with_retries(self, command: Callable[[], T]) -> T:
        for _ in range(CONFLICT_RETRIES):
            try:
                return await asyncio.to_thread(command)
            except ConflictError:
                continue
        raise InternalError("the task kept changing while this request ran; retry it")

    async def _settled(self, task: Task) -> Task:
        """Wait until ``task`` is terminal or interrupted, or the blocking timeout passes."""
        deadline = time.monotonic() + self._blocking_timeout_s
        while task.state not in TERMINAL and task.state not in INTERRUPTED:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                break
            await self._waiter.wait_for_change(task.id, task.version, remaining)
            task = await asyncio.to_thread(self._store.get, task.id)
        return task


def _params_of(message: Message) -> JSON:
    """Skill parameters: the first ``data`` part whose value is a JSON object, else ``{}``."""
    for part in message.parts:
        if isinstance(part.data, dict):
            return dict(part.data)
    return {}


def _not_cancelable(task: Task) -> TaskNotCancelableError:
    return TaskNotCancelableError(f"task is {task.state}; a terminal task cannot be canceled")


def _expired_text(task_id: str) -> str:
    return f"task {task_id!r} not found: it expired (finished tasks are kept only for the retention period)"
