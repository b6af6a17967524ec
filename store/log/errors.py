"""The application's errors: why a use case appended nothing, where the domain's rules are not the reason.

The domain's own refusals (``domain.errors``: an illegal transition, a lost lease...) propagate
from the use cases unchanged. These are the others: a lost optimistic race, and requests that
name a task the caller may not see or contradict the task they name. Each message says what
happened in words a client can act on; the gateway answers with it.
"""

from __future__ import annotations

from datetime import datetime
from uuid import UUID

from domain.states import TaskState


class ConflictError(Exception):
    """Someone appended to one of the saved tasks first. Reload, re-check and retry."""


class RetriesExhaustedError(ConflictError):
    """Every attempt of a use case lost its race: the task kept changing meanwhile."""

    def __init__(self, task_id: UUID, attempts: int) -> None:
        super().__init__(f"task {task_id} kept changing: gave up after {attempts} conflicting attempts")
        self.task_id, self.attempts = task_id, attempts


class ApplicationError(Exception):
    """A use case refused a request for a reason outside the task's own rules."""


class TaskNotFoundError(ApplicationError, LookupError):
    """No task has this id (for this caller: another tenant's task is never distinguished)."""


class TaskExpiredError(TaskNotFoundError):
    """The task ended longer ago than the retention period and is no longer served."""

    def __init__(self, task_id: UUID) -> None:
        super().__init__(
            f"task {str(task_id)!r} not found: it expired (finished tasks are kept only for the retention "
            "period)"
        )
        self.task_id = task_id


class NoSuchVersionError(ApplicationError, LookupError):
    """A task was asked for its state at a version it does not have (versions run from 1 to ``last``)."""

    def __init__(self, task_id: UUID, version: int, last: int) -> None:
        super().__init__(f"task {task_id} has versions 1 to {last}; there is no version {version}")
        self.task_id, self.version, self.last = task_id, version, last


class RetentionNotReachedError(ApplicationError):
    """A task was asked to expire before its own retention (per tenant and skill) had passed."""


class TaskIdCollisionError(ApplicationError):
    """A first message's derived task id names a task that another message started."""

    def __init__(self, message_id: str) -> None:
        super().__init__(f"task id collision for message {message_id!r}")
        self.message_id = message_id


class ContextMismatchError(ApplicationError):
    """A message names a ``contextId`` other than the context of the task it belongs to."""


class NotWaitingForInputError(ApplicationError):
    """A follow-up message reached a task that is not paused for one (``state`` says where it is)."""

    def __init__(self, task_id: UUID, state: TaskState) -> None:
        super().__init__(f"task {task_id} is {state} and is not waiting for input")
        self.task_id, self.state = task_id, state


class AnswerTooLateError(ApplicationError):
    """A follow-up message came after the pause's deadline; the task no longer waits for it."""

    def __init__(self, task_id: UUID, deadline: datetime) -> None:
        super().__init__(
            f"task {task_id} no longer waits for input: its deadline {deadline.isoformat()} passed"
        )
        self.task_id, self.deadline = task_id, deadline


class PushUrlRefusedError(ApplicationError):
    """A push notification URL is not http(s) with a host, or points at a non-public address."""


class TooManyPushConfigsError(ApplicationError):
    """A task already has the most push notification configs a task may have."""

    def __init__(self, task_id: UUID, limit: int) -> None:
        super().__init__(
            f"task {task_id} already has {limit} push notification configs, the most a task may have; "
            "delete one or replace one (create with its id)"
        )
        self.task_id, self.limit = task_id, limit
