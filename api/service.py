"""The gateway's A2A methods (tasks and push notification configs), translated to the application.

Each method turns its wire request into one call of a ``TaskApplication`` use case (in a worker
thread, because the store is synchronous), the use case's refusals into the A2A errors the
specification names, and the task it returns into a wire ``Task``. The use cases themselves
(ids, resends, retries after lost races) live in the application, not here. ListTasks reads
the page (ids, order, count) from the current-task view (``projections.task_view``) and the
page's tasks from the log (``TaskApplication.get_many``). The push notification config methods
keep configs in the task's log (``PushConfigSet``, ``PushConfigRemoved``) and never read a
config's secrets back (``push_config_to_wire``).

Longer than 500 lines on purpose: it is the one implementation of every A2A method behind both
bindings, with the checks they share (tenant, overload, the file parts in and out); split by
method, each piece would reach back for those.
"""

from __future__ import annotations

import asyncio
import functools
import time
from typing import Any
from uuid import UUID, uuid4

from api.api_keys import CALLER_KEY_ID
from api.errors import (
    A2AError,
    InvalidParamsError,
    TaskNotCancelableError,
    TaskNotFoundError,
    UnsupportedOperationError,
    a2a_error_of,
)
from api.file_parts import FileParts
from api.hand_off import SLOT_WAIT_SECONDS, HandOff, Slot, Takes
from api.waiting import TaskWaiter
from api.wire import (
    DEFAULT_PAGE_SIZE,
    CancelTaskRequest,
    DeleteTaskPushNotificationConfigRequest,
    GetTaskPushNotificationConfigRequest,
    GetTaskRequest,
    ListTaskPushNotificationConfigsRequest,
    ListTasksRequest,
    SendMessageRequest,
    TaskPushNotificationConfig,
)
from domain.clock import Clock
from domain.errors import TaskTerminalError
from domain.skill import Skill, SkillRegistry, UnknownSkillError
from domain.states import INTERRUPTED, TERMINAL, TaskState
from domain.task import Task
from projections.task_view import PageCursor, TaskQuery, TaskViewRecorder
from store.deliveries import check_push_url
from store.log import (
    AnswerTooLateError,
    ApplicationError,
    ConflictError,
    NotWaitingForInputError,
    PushUrlRefusedError,
    TaskApplication,
    retry_lost_connection,
)
from store.public_form import FileLinks, iso_millis, task_to_wire

JSON = dict[str, Any]

DEFAULT_TENANT = "default"
"""The tenant of a request that names none."""

NO_VIEW = (
    "ListTasks is not available with LONGHAUL_STORE=memory: it is served from the current-task "
    "view that `longhaul projector` keeps on PostgreSQL (use GetTask by id)"
)


class A2AService:
    """The A2A methods for one task application and skill registry.

    ``task_view`` is the current-task view ListTasks reads; without one (a memory store)
    ListTasks answers UnsupportedOperation. ``allow_private_webhooks`` lets push URLs point at
    non-public addresses (``store.deliveries.push_urls``). ``hand_off`` is the worker of this process
    (``longhaul up``) that takes a blocking send's new task at once into a free slot
    (``api.hand_off``). ``files`` gives a stored file's part its URL in every answer and turns a
    message's upload URLs into stored files (``api.file_parts``; default: the gateway's URLs under
    ``public_url``, no uploads).
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
        allow_private_webhooks: bool = False,
        hand_off: HandOff | None = None,
        files: FileParts | None = None,
        public_url: str = "",
    ) -> None:
        self._store = store
        self.files = files if files is not None else FileParts(FileLinks(public_url))
        self._hand_off = hand_off
        self._allow_private_webhooks = allow_private_webhooks
        self._view = task_view
        self._registry = registry
        self._clock = clock
        self._default_skill = default_skill
        self._waiter = waiter
        self._blocking_timeout_s = blocking_timeout_s

    async def send_message(self, request: SendMessageRequest) -> JSON:
        """Start a task, or answer a paused one; blocks until it settles unless asked not to.

        The answer is ``{"task": …}``, or ``{"message": …}`` for a task whose skill answers its
        first message with a bare Message (``answers_with_message``); that answer always waits
        for the task to settle, as ``returnImmediately`` has no effect on Message results.
        """
        configuration = request.configuration
        waits = configuration is None or not configuration.return_immediately
        task, slot = await self._accept(request, takes="free" if waits else None)
        if self.answers_with_message(task):
            return await self.message_answer(task, slot)
        if waits:
            task = await self._settled(task, slot)
        history_length = configuration.history_length if configuration is not None else None
        return {"task": await self.wire(task, history_length=history_length)}

    async def accept_message(self, request: SendMessageRequest, *, hand_off: bool = False) -> Task:
        """Submit the message as a new task, or as the answer to the paused task it names.

        The first half of SendMessage and SendStreamingMessage (``api.streams``): the task as the
        commit left it. An inline ``configuration.taskPushNotificationConfig`` is checked like a
        created one and stored in the same commit as the task's ``Submitted`` (or the answer's
        ``InputReceived``). With ``hand_off`` a new task is handed to this process's worker if that
        worker is idle (ADR 0055).
        """
        task, _ = await self._accept(request, takes="idle" if hand_off else None)
        return task

    async def _accept(self, request: SendMessageRequest, *, takes: Takes | None) -> tuple[Task, Slot | None]:
        """``accept_message``; a new task may be handed to a worker slot of this process (``_submit``)."""
        configuration = request.configuration
        tenant = request.tenant or DEFAULT_TENANT
        message = request.message
        inline = configuration.task_push_notification_config if configuration is not None else None
        push_config = None
        if inline is not None:
            if inline.task_id and inline.task_id != message.task_id:
                field = "configuration.taskPushNotificationConfig.taskId"
                rule = "must be empty or the message's taskId"
                raise InvalidParamsError.with_violations(f"invalid params: {field} {rule}", [(field, rule)])
            push_config = await self._checked_config(
                inline, field="configuration.taskPushNotificationConfig.url"
            )
        logged = await self.files.inbound(message.to_json(), tenant)  # its uploads as stored files
        try:
            if message.task_id is None:
                return await self._submit(
                    tenant=tenant,
                    message=logged,
                    skill=self._skill_for(request),
                    push_config=push_config,
                    key_id=CALLER_KEY_ID.get(),
                    takes=takes,
                )
            answered = await asyncio.to_thread(
                self._store.answer,
                _task_id(message.task_id),
                tenant=tenant,
                message=logged,
                clock=self._clock,
                push_config=push_config,
                key_id=CALLER_KEY_ID.get(),
            )
        except (TaskTerminalError, ApplicationError, ConflictError) as error:
            raise _refused_answer(error) from None
        return answered, None

    async def _submit(
        self,
        *,
        tenant: str,
        message: JSON,
        skill: Skill,
        push_config: JSON | None,
        key_id: str | None,
        takes: Takes | None,
    ) -> tuple[Task, Slot | None]:
        """A new task (or a resend's), handed to a worker slot of this process as ``takes`` says.

        ``"free"`` (a blocking SendMessage): a free slot, or the next one freed within
        ``SLOT_WAIT_SECONDS`` (ADRs 0032, 0054). ``"idle"`` (a stream, whose caller follows the
        task to its end): a slot of an idle worker only; under load the task goes to the run
        queue, whose claims take several at once (ADR 0055). None (returnImmediately): the queue.

        With a slot, the lease is granted in the submission's commit and the slot's runner starts
        once the commit returns, whether or not this call is still awaited (a client that hung up
        leaves no leased task without a runner); a resend, or a failure, gives the slot back.
        """
        submit = functools.partial(
            self._store.submit, tenant=tenant, message=message, skill=skill, clock=self._clock
        )
        slot = None
        if self._hand_off is not None and takes == "free":
            slot = await self._hand_off.reserve_within(skill.name, skill.version, SLOT_WAIT_SECONDS)
        elif self._hand_off is not None and takes == "idle":
            slot = self._hand_off.reserve_idle(skill.name, skill.version)
        if slot is None:
            return await asyncio.to_thread(submit, push_config=push_config, key_id=key_id), None
        leased = functools.partial(
            self._store.submit_leased,
            tenant=tenant,
            message=message,
            skill=skill,
            clock=self._clock,
            worker=slot.worker_id,
            lease_seconds=slot.lease_seconds,
            push_config=push_config,
            key_id=key_id,
        )
        submission = asyncio.ensure_future(asyncio.to_thread(leased))
        answer = asyncio.shield(
            submission
        )  # first: this caller resumes (and answers) before the runner starts
        submission.add_done_callback(functools.partial(_settle, slot))
        task, _ = await answer
        return task, slot

    def answers_with_message(self, task: Task) -> bool:
        """Whether ``task``'s sends answer with a bare Message: its skill says so of its first message.

        Decided from the log alone (the pinned skill version and the first message), so a resend
        of the first message gets the same kind of answer on any gateway. A streaming send of
        such a task is a message-only stream: nothing until ``message_answer``, then close.
        """
        if not self._registry.has(task.skill, task.skill_version):
            return False  # a finished task of a version this release dropped: it answers as a task
        return self._registry.get(task.skill, task.skill_version).answers_with_message(task.history[0])

    async def message_answer(self, task: Task, slot: Slot | None = None) -> JSON:
        """``{"message": reply}`` once ``task`` settled with its completion message as the reply.

        A task that settles any other way (failed, canceled, still running at the blocking
        timeout, completed without a message) answers ``{"task": …}``: the caller always learns
        what became of it. As a stream this is the one event before the stream closes.
        """
        task = await self._settled(task, slot)
        if task.state == TaskState.COMPLETED and task.status_message is not None:
            return {"message": await self.files.public(task.status_message, task.id)}
        return {"task": await self.wire(task)}

    async def get_task(self, request: GetTaskRequest) -> JSON:
        """The task as it is now."""
        tenant = request.tenant or DEFAULT_TENANT
        try:
            task = await asyncio.to_thread(self._store.get_visible, _task_id(request.id), tenant=tenant)
        except ApplicationError as error:
            raise a2a_error_of(error) from None
        return await self.wire(task, history_length=request.history_length)

    async def cancel_task(self, request: CancelTaskRequest) -> JSON:
        """Cancel a task that has not finished; the worker holding it is fenced out."""
        tenant = request.tenant or DEFAULT_TENANT
        try:
            task = await asyncio.to_thread(
                self._store.cancel,
                _task_id(request.id),
                tenant=tenant,
                clock=self._clock,
                key_id=CALLER_KEY_ID.get(),
            )
        except TaskTerminalError as error:
            raise TaskNotCancelableError(
                f"task is {error.source}; a terminal task cannot be canceled"
            ) from None
        except (ApplicationError, ConflictError) as error:
            raise a2a_error_of(error) from None
        return await self.wire(task)

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
        read_page = functools.partial(self._view.page, query, size=size, after=after)
        page = await asyncio.to_thread(retry_lost_connection, read_page)
        load = functools.partial(self._store.get_many, [row.task_id for row in page.rows])
        tasks = await asyncio.to_thread(retry_lost_connection, load)
        wire = []
        for row in page.rows:
            task = tasks.get(row.task_id)
            if task is None or task.tenant != tenant or task.expired:
                continue
            listed = task_to_wire(task, history_length=request.history_length)
            if not request.include_artifacts:
                listed.pop("artifacts", None)
            wire.append(await self.files.public(listed, task.id))
        return {
            "tasks": wire,
            "nextPageToken": page.next.token() if page.next is not None else "",
            "pageSize": size,
            "totalSize": page.total,
        }

    async def wire(self, task: Task, *, history_length: int | None = None) -> JSON:
        """The wire ``Task`` a client sees: ``task_to_wire``, its stored files given their URLs."""
        return await self.files.public(task_to_wire(task, history_length=history_length), task.id)

    # ------------------------------------------------------------------ push notification configs

    async def create_push_config(self, request: TaskPushNotificationConfig) -> JSON:
        """Register a webhook for a task, or replace the one with the same ``id``.

        The config is kept in the task's log (``PushConfigSet``); the answer never carries its
        ``token`` or ``authentication.credentials``. A terminal task takes one too (ADR 0025);
        nothing is delivered to it, as no event a client sees follows the task's end.
        """
        if not request.task_id:
            raise InvalidParamsError.with_violations(
                "invalid params: taskId: field required", [("taskId", "field required")]
            )
        tenant = request.tenant or DEFAULT_TENANT
        task_id = (await self.visible_task(request.task_id, tenant)).id  # before any DNS lookup
        config = await self._checked_config(request, field="url")
        try:
            await asyncio.to_thread(
                self._store.set_push_config,
                task_id,
                tenant=tenant,
                config=config,
                clock=self._clock,
                key_id=CALLER_KEY_ID.get(),
            )
        except (ApplicationError, ConflictError) as error:
            raise a2a_error_of(error) from None
        return push_config_to_wire(task_id, config)

    async def get_push_config(self, request: GetTaskPushNotificationConfigRequest) -> JSON:
        """One config of a task; a missing one is TaskNotFound, as the specification lists it."""
        task = await self.visible_task(request.task_id, request.tenant)
        config = task.push_configs.get(request.id)
        if config is None:
            raise TaskNotFoundError(
                f"task {request.task_id!r} has no push notification config {request.id!r}"
            )
        return push_config_to_wire(task.id, config)

    async def list_push_configs(self, request: ListTaskPushNotificationConfigsRequest) -> JSON:
        """A page of a task's configs, by id, with the next page's token (``""`` at the end)."""
        task = await self.visible_task(request.task_id, request.tenant)
        ids = sorted(task.push_configs)
        if request.page_token:
            ids = [config_id for config_id in ids if config_id > request.page_token]
        size = request.page_size or DEFAULT_PAGE_SIZE
        page = ids[:size]
        configs = [push_config_to_wire(task.id, task.push_configs[config_id]) for config_id in page]
        return {"configs": configs, "nextPageToken": page[-1] if len(ids) > size else ""}

    async def delete_push_config(self, request: DeleteTaskPushNotificationConfigRequest) -> JSON:
        """Delete a config (a terminal task's too). Idempotent: an absent config answers ``{}`` too."""
        tenant = request.tenant or DEFAULT_TENANT
        try:
            await asyncio.to_thread(
                self._store.remove_push_config,
                _task_id(request.task_id),
                tenant=tenant,
                config_id=request.id,
                clock=self._clock,
                key_id=CALLER_KEY_ID.get(),
            )
        except (ApplicationError, ConflictError) as error:
            raise a2a_error_of(error) from None
        return {}

    async def _checked_config(self, config: TaskPushNotificationConfig, *, field: str) -> JSON:
        """The config as the log keeps it (``id`` filled in), once its URL passed the SSRF guard."""
        try:
            await asyncio.to_thread(check_push_url, config.url, allow_private=self._allow_private_webhooks)
        except PushUrlRefusedError as error:
            reason = str(error)
            raise InvalidParamsError.with_violations(f"invalid params: {reason}", [(field, reason)]) from None
        stored = config.model_copy(update={"id": config.id or str(uuid4()), "task_id": None, "tenant": None})
        return stored.to_json()

    async def visible_task(self, text: str, tenant: str | None, *, any_tenant: bool = False) -> Task:
        """The task with the wire id ``text`` if ``tenant`` (None: the default) sees it, else TaskNotFound.

        ``any_tenant`` (an open gateway, where a caller may name any tenant): whichever tenant's
        task it is, if it has not expired.
        """
        task_id = _task_id(text)
        try:
            if any_tenant:
                tenant = (await asyncio.to_thread(self._store.get, task_id)).tenant
            return await asyncio.to_thread(self._store.get_visible, task_id, tenant=tenant or DEFAULT_TENANT)
        except ApplicationError as error:
            raise a2a_error_of(error) from None

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

    async def _settled(self, task: Task, slot: Slot | None = None) -> Task:
        """Wait until ``task`` is terminal or interrupted, or the blocking timeout passes.

        A task handed to ``slot`` is answered with the task as its runner's last commit left it
        when that settles it (no wake-up from the feed, no reload); otherwise, and whenever the
        runner stopped without its lease, the waiter wakes on the log's events and the task is
        reloaded.
        """
        deadline = time.monotonic() + self._blocking_timeout_s
        if slot is not None and task.state not in TERMINAL and task.state not in INTERRUPTED:
            ran = await slot.ran(self._blocking_timeout_s)
            if ran is not None and (ran.state in TERMINAL or ran.state in INTERRUPTED):
                return ran
        while task.state not in TERMINAL and task.state not in INTERRUPTED:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                break
            await self._waiter.wait_for_change(task, remaining)
            task = await asyncio.to_thread(self._store.get, task.id)
        return task


def _settle(slot: Slot, submission: asyncio.Future[tuple[Task, Task | None]]) -> None:
    """Start the slot's runner with the worker's copy if the submission granted it the lease, else free it."""
    granted = None
    if not submission.cancelled() and submission.exception() is None:
        _, granted = submission.result()
    if granted is None:
        slot.release()
    else:
        slot.start(granted)


def push_config_to_wire(task_id: UUID, config: JSON) -> JSON:
    """A stored config as a wire ``TaskPushNotificationConfig``, without its secrets.

    ``token`` and ``authentication.credentials`` are left out (``authentication.scheme``
    stays): a config is written with them and read back without them.
    """
    wire: JSON = {"id": config["id"], "taskId": str(task_id), "url": config["url"]}
    authentication = config.get("authentication")
    if isinstance(authentication, dict):
        wire["authentication"] = {k: v for k, v in authentication.items() if k != "credentials"}
    return wire


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
