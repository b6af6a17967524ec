"""Fencing, at most one holder, and terminal immutability, as matrices over every command.

A worker whose lease was superseded (expired, re-granted, released, task paused, answered,
canceled or finished) gets ``LeaseLostError`` from *every* worker command: that is the one
error the worker treats as "stop and never write again" (``workers/lease.py``).
"""

from __future__ import annotations

import contextlib
from datetime import datetime, timedelta

import pytest

from domain.errors import DomainError, LeaseHeldError, LeaseLostError, TaskTerminalError
from domain.states import TaskState
from domain.task import Task
from tests.domain.support import (
    LATER,
    LEASE,
    Command,
    answer,
    artifact,
    ask,
    at,
    cancel,
    complete,
    effect,
    expire,
    expire_pause,
    extend,
    fail,
    given,
    grant,
    progress,
    refused,
    reject,
    release,
    remove_push,
    save,
    set_push,
    step,
    types,
    when,
)


def _at_next_step(factory: object) -> Command:
    """A step command for whatever step the task is at (so only the fence can refuse it)."""

    def command(task: Task, now: datetime) -> None:
        assert callable(factory)
        factory(task.next_step, 1)(task, now)

    return command


WORKER_COMMANDS: dict[str, Command] = {
    "extend_lease": extend(1),
    "release_lease": release(1),
    "complete_step": _at_next_step(step),
    "save_checkpoint": _at_next_step(save),
    "report_progress": progress(epoch=1),
    "request_input": _at_next_step(ask),
    "append_artifact": artifact(epoch=1),
    "record_effect": effect(epoch=1),
    "complete": complete(1),
    "fail": fail(1),
    "reject": reject(1),
}

SHORT = timedelta(seconds=1)

# name -> (given, time of the stale command). Epoch 1 is the stale holder in each.
SUPERSEDED: dict[str, tuple[tuple[Command, ...], datetime]] = {
    "expired": ((grant(),), at(seconds=1) + LEASE),
    "expired-long-ago": ((grant(),), at(days=3)),
    "re-granted": ((grant(lease=SHORT), grant("w2")), LATER),
    "released": ((grant(), release()), LATER),
    "paused": ((grant(), ask(0)), LATER),
    "auth-paused": ((grant(), ask(0, auth=True)), LATER),
    "answered": ((grant(), ask(0), answer()), LATER),
    "canceled": ((grant(), cancel()), LATER),
    "completed": ((grant(), complete()), LATER),
}

_FINISHING = {"complete", "reject", "request_input", "fail"}


@pytest.mark.parametrize(
    ("scenario", "command"),
    [pytest.param(s, c, id=f"{s}-{c}") for s in SUPERSEDED for c in WORKER_COMMANDS],
)
def test_a_superseded_holder_can_never_commit(scenario: str, command: str) -> None:
    history, now = SUPERSEDED[scenario]
    task = given(*history)

    refused(task, WORKER_COMMANDS[command], LeaseLostError, now=now)


@pytest.mark.parametrize("scenario", list(SUPERSEDED))
def test_a_superseded_holder_can_never_commit_whatever_the_error(scenario: str) -> None:
    """Every stale command is refused and records nothing."""
    history, now = SUPERSEDED[scenario]
    for name, command in WORKER_COMMANDS.items():
        task = given(*history)
        version = task.version
        with pytest.raises(DomainError):
            command(task, now)
        assert (list(task.collect_events()), task.version) == ([], version), name


@pytest.mark.parametrize("command", list(WORKER_COMMANDS))
def test_a_worker_command_on_a_never_leased_task_is_fenced(command: str) -> None:
    with pytest.raises(DomainError):
        WORKER_COMMANDS[command](given(), LATER)


def test_the_new_holder_commits_while_the_old_one_is_fenced() -> None:
    task = given(grant("w1", lease=SHORT), grant("w2"))

    refused(task, step(0, epoch=1), LeaseLostError)
    assert types(when(task, step(0, epoch=2))) == ["StepCompleted"]
    refused(task, step(1, epoch=1), LeaseLostError)
    assert (task.lease_owner, task.lease_epoch, task.next_step) == ("w2", 2, 1)


def test_a_lease_is_valid_up_to_but_not_at_its_end() -> None:
    task = given(grant())  # at T0+1s
    end = at(seconds=1) + LEASE

    assert types(when(task, progress(), now=end - timedelta(microseconds=1))) == ["ProgressReported"]
    refused(task, progress(), LeaseLostError, now=end)


def test_at_most_one_holder_at_every_moment() -> None:
    task = given(grant("w1"))  # valid during [T0+1s, T0+1s+LEASE)
    end = at(seconds=1) + LEASE

    for moment in (LATER, end - timedelta(microseconds=1)):
        refused(task, grant("w2"), LeaseHeldError, now=moment)
    events = when(task, grant("w2"), now=end)

    assert [(e.worker, e.epoch) for e in events if isinstance(e, Task.LeaseGranted)] == [("w2", 2)]
    refused(task, grant("w1"), LeaseHeldError, now=end)


def test_epochs_only_ever_grow() -> None:
    task = given()
    epochs = []
    now = LATER
    for _ in range(5):
        epochs.append(task.grant_lease(worker="w", now=now, until=now + SHORT))
        now += SHORT
    assert epochs == [1, 2, 3, 4, 5]


# ------------------------------------------------------------------------ terminal immutability

TERMINAL: dict[str, tuple[Command, ...]] = {
    "completed": (grant(), complete()),
    "failed": (grant(), fail()),
    "rejected": (grant(), reject()),
    "canceled": (grant(), cancel()),
    "pause-failed": (grant(), ask(0, wait=SHORT), expire_pause()),
    "pause-canceled": (grant(), ask(0, wait=SHORT, on_deadline="cancel"), expire_pause()),
    "expired": (grant(), set_push("p-0"), complete(), expire()),
}

EVERY_OTHER_COMMAND: dict[str, Command] = {
    "grant_lease": grant("w9"),
    **WORKER_COMMANDS,
    "receive_input": answer(),
    "cancel": cancel(),
    "expire_pause": expire_pause(),
    "set_push_config": set_push("p-9"),
    "remove_push_config": remove_push("p-1"),
    "remove_push_config(p-0)": remove_push("p-0"),
}


@pytest.mark.parametrize(
    ("terminal", "command"),
    [
        pytest.param(
            t,
            c,
            id=f"{t}-{c}",
        )
        for t in TERMINAL
        for c in EVERY_OTHER_COMMAND
    ],
)
def test_a_terminal_task_is_immutable(terminal: str, command: str) -> None:
    task = _terminal_with_push_config(terminal)
    version, state = task.version, task.state

    for moment in (LATER, at(days=400)):
        with contextlib.suppress(DomainError):
            EVERY_OTHER_COMMAND[command](task, moment)
        assert list(task.collect_events()) == [], f"{command} recorded an event on a {state} task"
        assert (task.version, task.state) == (version, state)


def _terminal_with_push_config(terminal: str) -> Task:
    """The terminal task, with push config ``p-0`` set while it was live."""
    history = TERMINAL[terminal]
    if terminal == "expired":
        return given(*history)
    return given(set_push("p-0"), *history)


@pytest.mark.parametrize("terminal", list(TERMINAL))
def test_commands_that_would_change_a_terminal_task_raise(terminal: str) -> None:
    task = _terminal_with_push_config(terminal)

    for name, command in EVERY_OTHER_COMMAND.items():
        if name.startswith("remove_push_config"):
            continue
        with pytest.raises(DomainError):
            command(task, at(days=400))
    refused(task, set_push("p-9"), TaskTerminalError)
    refused(task, grant("w9"), TaskTerminalError)
    refused(task, answer(), TaskTerminalError)


@pytest.mark.parametrize("terminal", [t for t in TERMINAL if t != "expired"])
def test_expire_is_the_only_event_after_terminal_and_only_once(terminal: str) -> None:
    task = _terminal_with_push_config(terminal)
    state = task.state

    assert types(when(task, expire(), now=at(days=60))) == ["Expired"]
    assert task.state == state
    assert task.state in {TaskState.COMPLETED, TaskState.FAILED, TaskState.CANCELED, TaskState.REJECTED}
    with pytest.raises(DomainError):
        when(task, expire(), now=at(days=61))
    assert list(task.collect_events()) == []
