"""Domain errors. Each one is raised before any event is recorded."""

from __future__ import annotations

from uuid import UUID


class DomainError(Exception):
    """Base class: a command was refused and nothing was recorded."""


class IllegalTransitionError(DomainError):
    """The command would move the task along an edge the state machine does not have."""

    def __init__(self, task_id: UUID, source: str, target: str) -> None:
        super().__init__(f"task {task_id} cannot move from {source} to {target}")
        self.task_id, self.source, self.target = task_id, source, target


class TaskTerminalError(IllegalTransitionError):
    """The task is in a terminal state and is immutable."""


class LeaseLostError(DomainError):
    """The caller's lease was superseded (expired, re-granted, task paused or ended).

    A worker that sees this stops working on the task and never writes for it again.
    """

    def __init__(self, task_id: UUID, epoch: int, reason: str) -> None:
        super().__init__(f"lease epoch {epoch} on task {task_id} is lost: {reason}")
        self.task_id, self.epoch, self.reason = task_id, epoch, reason


class LeaseHeldError(DomainError):
    """A lease cannot be granted because another valid lease is held."""


class NotRunnableError(DomainError):
    """The task is not in a state a worker may claim."""


class StepOrderError(DomainError):
    """A step index was committed out of order (or twice)."""


class EffectAlreadyRecordedError(DomainError):
    """A run-once effect key already has a recorded result."""


class NotPausedError(DomainError):
    """Input was sent to a task that is not waiting for input."""


class PauseDeadlinePassedError(DomainError):
    """The answer came after the pause's deadline."""


class DeadlineNotReachedError(DomainError):
    """A pause was asked to expire before its deadline."""


class InvalidCommandError(DomainError):
    """A command's arguments are invalid (bad deadline, unknown config, ...)."""
