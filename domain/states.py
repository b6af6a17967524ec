"""The A2A 1.0 task state machine, as data."""

from __future__ import annotations

from enum import StrEnum


class TaskState(StrEnum):
    """Task states exactly as A2A 1.0 spells them on the wire."""

    SUBMITTED = "TASK_STATE_SUBMITTED"
    WORKING = "TASK_STATE_WORKING"
    INPUT_REQUIRED = "TASK_STATE_INPUT_REQUIRED"
    AUTH_REQUIRED = "TASK_STATE_AUTH_REQUIRED"
    COMPLETED = "TASK_STATE_COMPLETED"
    FAILED = "TASK_STATE_FAILED"
    CANCELED = "TASK_STATE_CANCELED"
    REJECTED = "TASK_STATE_REJECTED"


TERMINAL: frozenset[TaskState] = frozenset(
    {TaskState.COMPLETED, TaskState.FAILED, TaskState.CANCELED, TaskState.REJECTED}
)
"""States a task never leaves. A task in one of them is immutable."""

INTERRUPTED: frozenset[TaskState] = frozenset({TaskState.INPUT_REQUIRED, TaskState.AUTH_REQUIRED})
"""Paused states: the task waits for a person and holds no lease."""

RUNNABLE: frozenset[TaskState] = frozenset({TaskState.SUBMITTED, TaskState.WORKING})
"""States in which a worker may claim the task (when no valid lease is held)."""

TRANSITIONS: dict[TaskState, frozenset[TaskState]] = {
    TaskState.SUBMITTED: frozenset(
        {TaskState.WORKING, TaskState.FAILED, TaskState.CANCELED, TaskState.REJECTED}
    ),
    TaskState.WORKING: frozenset(
        {
            TaskState.WORKING,
            TaskState.INPUT_REQUIRED,
            TaskState.AUTH_REQUIRED,
            TaskState.COMPLETED,
            TaskState.FAILED,
            TaskState.CANCELED,
            TaskState.REJECTED,
        }
    ),
    TaskState.INPUT_REQUIRED: frozenset({TaskState.WORKING, TaskState.FAILED, TaskState.CANCELED}),
    TaskState.AUTH_REQUIRED: frozenset({TaskState.WORKING, TaskState.FAILED, TaskState.CANCELED}),
    TaskState.COMPLETED: frozenset(),
    TaskState.FAILED: frozenset(),
    TaskState.CANCELED: frozenset(),
    TaskState.REJECTED: frozenset(),
}
"""Allowed transitions. A state absent from a set is an illegal target."""


def can_transition(source: TaskState, target: TaskState) -> bool:
    """Whether the state machine allows moving from ``source`` to ``target``."""
    return target in TRANSITIONS[source]
