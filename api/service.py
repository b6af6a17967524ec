"""The gateway's A2A methods: SendMessage, GetTask, CancelTask and ListTasks, translated to the application.

Each method turns its wire request into one call of a ``TaskApplication`` use case (in a worker
thread, because the store is synchronous), the use case's refusals into the A2A errors the
specification names, and the task it returns into a wire ``Task``. The use cases themselves
(ids, resends, retries after lost races) live in the application, not here. ListTasks reads
the page (ids, order, count) from the current-task view (``projections.task_view``) and the
page's tasks from the log (``TaskApplication.get_many``).
"""

from __future__ import annotations

import asyncio
import time
from typing import Any
from uuid import UUID

from api.errors import (
    A2AError,
    InvalidParamsError,
    PushNotificationNotSupportedError,
    TaskNotCancelableError,
    TaskNotFoundError,
    UnsupportedOperationError,
    a2a_error_of,
)
from api.task_wire import iso_millis, task_to_wire
from api.waiting import TaskWaiter
from api.wire import (
    DEFAULT_PAGE_SIZE,
    CancelTaskRequest,
    GetTaskRequest,
    ListTasksRequest,
    SendMessageRequest,
)
from domain.clock import Clock
from domain.errors import TaskTerminalError
from domain.skill import Skill, SkillRegistry, UnknownSkillError
from domain.states import INTERRUPTED, TERMINAL, TaskState
from domain.task import Task
from projections.task_view import PageCursor, TaskQuery, TaskViewRecorder
from store.application import TaskApplication
from store.errors import AnswerTooLateError, ApplicationError, ConflictError, NotWaitingForInputError

JSON = dict[str, Any]

DEFAULT_TENANT = "default"
"""The tenant of a request that names none."""

NO_VIEW = (
    "ListTasks is not available with LONGHAUL_STORE=memory: it is served from the current-task "
    "view that `longhaul projector` keeps on PostgreSQL (use GetTask by id)"
)


class A2AService:
    """SendMessage, GetTask, CancelTask and ListTasks for one task application and skill registry.

    ``task_view`` is the current-task view ListTasks reads; without one (a memory store)
    ListTasks answers UnsupportedOperation.
    """

    def __init__(
        self,
        *,
        store: TaskApplication,
        registry: SkillRegistry,
        clock: Clock,
        default_skill: str,
        waiter: TaskWaiter,
        blocking_timeout_s: float = 600,
        task_view: TaskViewRecorder | None = None,
    ) -> None:
        self._store = store
        self._view = task_view
        self._registry = registry
        self._clock = clock
        self._default_skill = default_skill
        self._waiter = waiter
        self._blocking_timeout_s = blocking_timeout_s

    async def send_message(self, request: SendMessageRequest) -> JSON:
        """Start a task, or answer a paused one; blocks until it settles unless asked not to."""
        configuration = request.configuration
        if configuration is not None and configuration.task_push_notification_config is not None:
            raise PushNotificationNotSupportedError(
                "push notifications are not supported by this agent (capabilities.pushNotifications is false)"
            )
        tenant = request.tenant or DEFAULT_TENANT
        message = request.message
        try:
            if message.task_id is None:
                task = await asyncio.to_thread(
                    self._store.submit,
                    tenant=tenant,
                    message=message.to_json(),
                    skill=self._skill_for(request),
                    clock=self._clock,
                )
            else:
                task = await asyncio.to_thread(
                    self._store.answer,
                    _task_id(message.task_id),
                    tenant=tenant,
                    message=message.to_json(),
                    clock=self._clock,
                )
        except (TaskTerminalError, ApplicationError, ConflictError) as error:
            raise _refused_answer(error) from None
        if configuration is None or not configuration.return_immediately:
            task = await self._settled(task)
        history_length = configuration.history_length if configuration is not None else None
        return {"task": task_to_wire(task, history_length=history_length)}

    async def get_task(self, request: GetTaskRequest) -> JSON:
        """The task as it is now."""
        tenant = request.tenant or DEFAULT_TENANT
        try:
            task = await asyncio.to_thread(self._store.get_visible, _task_id(request.id), tenant=tenant)
        except ApplicationError as error:
            raise a2a_error_of(error) from None
        return task_to_wire(task, history_length=request.history_length)

    async def cancel_task(self, request: CancelTaskRequest) -> JSON:
        """Cancel a task that has not finished; the worker holding it is fenced out."""
        tenant = request.tenant or DEFAULT_TENANT
        try:
            task = await asyncio.to_thread(
                self._store.cancel, _task_id(request.id), tenant=tenant, clock=self._clock
            )
        except TaskTerminalError as error:
            raise TaskNotCancelableError(
                f"task is {error.source}; a terminal task cannot be canceled"
            ) from None
        except (ApplicationError, ConflictError) as error:
            raise a2a_error_of(error) from None
        return task_to_wire(task)

    async def list_tasks(self, request: ListTasksRequest) -> JSON:
        """A page of the caller's tenant's tasks, newest status first, with the next page's token.

        The view gives the page's ids, their order and the total; each task is loaded from the
        log, and one the log shows expired (the view may trail it) is left out.
        """
        if self._view is None:
            raise UnsupportedOperationError(NO_VIEW)
        tenant = request.tenant or DEFAULT_TENANT
        after = None
        if request.page_token:
            try:
                after = PageCursor.parse(request.page_token)
            except ValueError as error:
                raise InvalidParamsError.with_violations(
                    f"invalid params: pageToken: {error}", [("pageToken", str(error))]
                ) from None
        size = request.page_size or DEFAULT_PAGE_SIZE
        query = TaskQuery(
            tenant=tenant,
            context_id=request.context_id,
            state=None if request.status is None else str(request.status),
            status_after=request.status_timestamp_after,
        )
        page = await asyncio.to_thread(self._view.page, query, size=size, after=after)
        tasks = await asyncio.to_thread(self._store.get_many, [row.task_id for row in page.rows])
        wire = []
        for row in page.rows:
            task = tasks.get(row.task_id)
            if task is None or task.tenant != tenant or task.expired:
                continue
            listed = task_to_wire(task, history_length=request.history_length)
            if not request.include_artifacts:
                listed.pop("artifacts", None)
            wire.append(listed)
        return {
            "tasks": wire,
            "nextPageToken": page.next.token() if page.next is not None else "",
            "pageSize": size,
            "totalSize": page.total,
        }

    # ------------------------------------------------------------------ wire in

    def _skill_for(self, request: SendMessageRequest) -> Skill:
        """The newest version of the skill the message (or else the request) names, or the default."""
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

    # ------------------------------------------------------------------ waiting

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


def _task_id(text: str) -> UUID:
    """A task id from the wire: a UUID in its canonical spelling (any case), else TaskNotFound."""
    try:
        task_id = UUID(text)
    except ValueError:
        raise TaskNotFoundError(f"task {text!r} not found") from None
    if str(task_id) != text.lower():
        raise TaskNotFoundError(f"task {text!r} not found")
    return task_id


def _refused_answer(error: TaskTerminalError | ApplicationError | ConflictError) -> A2AError:
    """The A2A error for a refused SendMessage."""
    if isinstance(error, TaskTerminalError):
        return UnsupportedOperationError(
            f"task is {error.source}; terminal tasks are immutable (start a new task in the same context)"
        )
    if isinstance(error, NotWaitingForInputError):
        return UnsupportedOperationError(
            f"task is {error.state} and is not waiting for input; a follow-up message is accepted only in "
            f"{TaskState.INPUT_REQUIRED} or {TaskState.AUTH_REQUIRED}"
        )
    if isinstance(error, AnswerTooLateError):
        deadline = iso_millis(error.deadline)
        return UnsupportedOperationError(
            f"task {error.task_id} no longer waits for input: its deadline {deadline} passed"
        )
    return a2a_error_of(error)
