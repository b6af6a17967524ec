"""The A2A 1.0 state machine, as data."""

from __future__ import annotations

from collections import deque

import pytest

from domain.states import INTERRUPTED, RUNNABLE, TERMINAL, TRANSITIONS, TaskState, can_transition

S = TaskState


def reachable(source: TaskState) -> set[TaskState]:
    seen: set[TaskState] = set()
    queue = deque([source])
    while queue:
        for target in TRANSITIONS[queue.popleft()]:
            if target not in seen:
                seen.add(target)
                queue.append(target)
    return seen


def test_states_are_spelled_exactly_as_a2a_1_0_does() -> None:
    assert {s.value for s in TaskState} == {
        "TASK_STATE_SUBMITTED",
        "TASK_STATE_WORKING",
        "TASK_STATE_INPUT_REQUIRED",
        "TASK_STATE_AUTH_REQUIRED",
        "TASK_STATE_COMPLETED",
        "TASK_STATE_FAILED",
        "TASK_STATE_CANCELED",
        "TASK_STATE_REJECTED",
    }
    for state in TaskState:
        assert state.value == f"TASK_STATE_{state.name}"
        assert state == state.value, "a state compares equal to its wire string"
        assert TaskState(state.value) is state


def test_the_groups_partition_the_states() -> None:
    assert {S.COMPLETED, S.FAILED, S.CANCELED, S.REJECTED} == TERMINAL
    assert {S.INPUT_REQUIRED, S.AUTH_REQUIRED} == INTERRUPTED
    assert {S.SUBMITTED, S.WORKING} == RUNNABLE
    assert set(TaskState) == TERMINAL | INTERRUPTED | RUNNABLE
    assert len(TERMINAL) + len(INTERRUPTED) + len(RUNNABLE) == len(TaskState), "the groups are disjoint"


def test_every_state_has_a_row_of_known_targets() -> None:
    assert set(TRANSITIONS) == set(TaskState)
    for targets in TRANSITIONS.values():
        assert targets <= set(TaskState)


@pytest.mark.parametrize("state", sorted(TERMINAL))
def test_terminal_states_have_no_exits(state: TaskState) -> None:
    assert TRANSITIONS[state] == frozenset()
    assert not any(can_transition(state, target) for target in TaskState)


@pytest.mark.parametrize("state", sorted(set(TaskState) - TERMINAL))
def test_every_live_state_can_fail_or_be_canceled_directly(state: TaskState) -> None:
    assert can_transition(state, S.FAILED)
    assert can_transition(state, S.CANCELED)
    assert TERMINAL & reachable(state), "a live task can always end"
    assert S.COMPLETED in reachable(state)


def test_every_state_is_reachable_from_submitted() -> None:
    assert reachable(S.SUBMITTED) | {S.SUBMITTED} == set(TaskState)


def test_nothing_returns_to_submitted() -> None:
    assert all(S.SUBMITTED not in targets for targets in TRANSITIONS.values())


@pytest.mark.parametrize("state", sorted(INTERRUPTED))
def test_a_pause_ends_only_by_an_answer_a_deadline_or_a_cancel(state: TaskState) -> None:
    assert TRANSITIONS[state] == {S.WORKING, S.FAILED, S.CANCELED}


def test_only_a_working_task_completes_pauses_or_is_rejected_after_it_started() -> None:
    assert {source for source, targets in TRANSITIONS.items() if S.COMPLETED in targets} == {S.WORKING}
    for pause in INTERRUPTED:
        assert {source for source, targets in TRANSITIONS.items() if pause in targets} == {S.WORKING}
    assert {source for source, targets in TRANSITIONS.items() if S.REJECTED in targets} == {
        S.SUBMITTED,
        S.WORKING,
    }


@pytest.mark.parametrize("source", list(TaskState))
@pytest.mark.parametrize("target", list(TaskState))
def test_can_transition_reads_the_table(source: TaskState, target: TaskState) -> None:
    assert can_transition(source, target) == (target in TRANSITIONS[source])
