"""Fencing, at most one holder, and terminal immutability, as matrices over every command.

A terminal task is immutable to A2A clients: its status, artifacts and history never change;
only its push configs may (ADR 0025).

A worker whose lease was superseded (expired, re-granted, released, task paused, answered,
canceled or finished) gets ``LeaseLostError`` from *every* worker command: that is the one
error the worker treats as "stop and never write again" (``workers/lease.py``).
"""

from __future__ import annotations

import contextlib
import copy
from datetime import datetime, timedelta

import pytest

from domain.errors import DomainError, InvalidCommandError, LeaseHeldError, LeaseLostError, TaskTerminalError
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
# A terminal task's A2A-visible Task (status, artifacts, history) never changes again. Only its
# push configs may (PushConfigSet, PushConfigRemoved: ADR 0025), and one Expired; an expired
# task takes nothing at all.

TERMINAL: dict[str, tuple[Command, ...]] = {
    "completed": (grant(), complete()),
    "failed": (grant(), fail()),
    "rejected": (grant(), reject()),
    "canceled": (grant(), cancel()),
    "pause-failed": (grant(), ask(0, wait=SHORT), expire_pause()),
    "pause-canceled": (grant(), ask(0, wait=SHORT, on_deadline="cancel"), expire_pause()),
    "expired": (grant(), set_push("p-0"), complete(), expire()),
}

PUSH_CONFIG_COMMANDS: dict[str, Command] = {
    "set_push_config": set_push("p-9"),
    "set_push_config(p-0)": set_push("p-0", "https://other.example/hook"),
    "remove_push_config": remove_push("p-1"),
    "remove_push_config(p-0)": remove_push("p-0"),
}

STATE_COMMANDS: dict[str, Command] = {
    "grant_lease": grant("w9"),
    **WORKER_COMMANDS,
    "receive_input": answer(),
    "cancel": cancel(),
    "expire_pause": expire_pause(),
}

EVERY_OTHER_COMMAND: dict[str, Command] = {**STATE_COMMANDS, **PUSH_CONFIG_COMMANDS}

PUSH_CONFIG_EVENTS = (Task.PushConfigSet, Task.PushConfigRemoved)


def visible(task: Task) -> tuple[object, ...]:
    """What an A2A client sees of a task (the wire Task is built from these alone)."""
    return (
        task.state,
        task.status_message,
        task.status_timestamp,
        task.artifacts,
        task.history,
        task.context_id,
        task.ended_at,
    )


@pytest.mark.parametrize(
    ("terminal", "command"),
    [pytest.param(t, c, id=f"{t}-{c}") for t in TERMINAL for c in EVERY_OTHER_COMMAND],
)
def test_a_terminal_task_is_immutable_to_a2a_clients(terminal: str, command: str) -> None:
    """Whatever the command: the visible task stays; only a push config event may be recorded."""
    task = _terminal_with_push_config(terminal)
    seen, version = copy.deepcopy(visible(task)), task.version

    for moment in (LATER, at(days=400)):
        with contextlib.suppress(DomainError):
            EVERY_OTHER_COMMAND[command](task, moment)
        recorded = list(task.collect_events())
        allowed = () if terminal == "expired" or command in STATE_COMMANDS else PUSH_CONFIG_EVENTS
        assert all(isinstance(e, allowed) for e in recorded), f"{command} recorded {recorded}"
        version += len(recorded)
        assert task.version == version
        assert visible(task) == seen, f"{command} changed what a client sees of a {task.state} task"


def _terminal_with_push_config(terminal: str) -> Task:
    """The terminal task, with push config ``p-0`` set while it was live."""
    history = TERMINAL[terminal]
    if terminal == "expired":
        return given(*history)
    return given(set_push("p-0"), *history)


@pytest.mark.parametrize("terminal", list(TERMINAL))
def test_commands_that_would_change_a_terminal_task_raise(terminal: str) -> None:
    task = _terminal_with_push_config(terminal)

    for command in STATE_COMMANDS.values():
        with pytest.raises(DomainError):
            command(task, at(days=400))
    refused(task, grant("w9"), TaskTerminalError)
    refused(task, answer(), TaskTerminalError)
    refused(task, cancel(), TaskTerminalError)


@pytest.mark.parametrize("terminal", [t for t in TERMINAL if t != "expired"])
def test_a_terminal_task_takes_push_configs_without_their_secrets(terminal: str) -> None:
    """Nothing will be delivered to a config set after the end, so its secrets are not kept."""
    task = _terminal_with_push_config(terminal)
    config = {
        "id": "p-9",
        "url": "https://hooks.example/late",
        "token": "t0ken",
        "authentication": {"scheme": "Bearer", "credentials": "s3cret"},
    }

    (event,) = when(task, lambda t, now: t.set_push_config(now=now, config=config), now=at(days=2))

    assert isinstance(event, Task.PushConfigSet)
    kept = {"id": "p-9", "url": "https://hooks.example/late", "authentication": {"scheme": "Bearer"}}
    assert event.config == kept
    assert task.push_configs == {"p-0": {"id": "p-0", "url": "https://hooks.example/a2a"}, "p-9": kept}
    assert types(when(task, remove_push("p-0"), now=at(days=3))) == ["PushConfigRemoved"]
    assert when(task, remove_push("p-0"), now=at(days=3)) == []  # deleting again records nothing
    assert list(task.push_configs) == ["p-9"]


def test_a_live_task_keeps_a_configs_secrets_for_delivery() -> None:
    task = given(grant())
    config = {"id": "p-1", "url": "https://h.example", "token": "t", "authentication": {"credentials": "c"}}

    when(task, lambda t, now: t.set_push_config(now=now, config=config))

    assert task.push_configs["p-1"] == config


@pytest.mark.parametrize("terminal", [t for t in TERMINAL if t != "expired"])
def test_the_end_time_is_not_moved_by_later_push_configs(terminal: str) -> None:
    task = _terminal_with_push_config(terminal)
    ended_at = task.ended_at
    assert ended_at is not None
    assert ended_at == task.modified_on

    when(task, set_push("p-9"), now=at(days=20))
    when(task, remove_push("p-0"), now=at(days=21))

    assert task.ended_at == task.status_timestamp == ended_at
    assert task.modified_on == at(days=21)


def test_an_expired_task_takes_no_push_config() -> None:
    task = given(*TERMINAL["expired"])

    refused(task, set_push("p-9"), InvalidCommandError)
    refused(task, remove_push("p-0"), InvalidCommandError)
    assert list(task.push_configs) == ["p-0"]


def test_a_running_task_has_no_end_time() -> None:
    assert given(grant(), ask(0)).ended_at is None


@pytest.mark.parametrize("terminal", [t for t in TERMINAL if t != "expired"])
def test_a_terminal_task_expires_once_and_stays_in_its_state(terminal: str) -> None:
    task = _terminal_with_push_config(terminal)
    state = task.state

    assert types(when(task, expire(), now=at(days=60))) == ["Expired"]
    assert task.state == state
    assert task.state in {TaskState.COMPLETED, TaskState.FAILED, TaskState.CANCELED, TaskState.REJECTED}
    with pytest.raises(DomainError):
        when(task, expire(), now=at(days=61))
    assert list(task.collect_events()) == []
