"""Given / when / then helpers for the Task aggregate.

A *command* here is a function ``(task, now) -> None``. ``given`` builds a task from a list of
them (the first submission is implicit), each one second after the last, and drops the events
they recorded; ``when`` runs one more command and returns the new events; ``refused`` runs a
command that must fail and checks that it recorded nothing.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any
from uuid import UUID

import pytest
from eventsourcing.application import Application
from eventsourcing.persistence import JSONTranscoder
from typing_extensions import override

from domain.errors import DomainError
from domain.task import JSON, AttemptCause, Task
from store.log.transcodings import register_domain_transcodings

Command = Callable[[Task, datetime], object]

T0 = datetime(2026, 1, 5, 9, 0, tzinfo=UTC)
TASK_ID = UUID("00000000-0000-4000-8000-000000000001")
LEASE = timedelta(minutes=5)
PAUSE = timedelta(days=2)
LATER = T0 + timedelta(minutes=1)
"""Default time of the 'when' command: after every 'given' command, inside the first lease."""

FIRST_MESSAGE: JSON = {
    "messageId": "m-1",
    "role": "ROLE_USER",
    "parts": [{"text": "review access"}],
}


class MemoryStore(Application[UUID]):
    """An in-memory (POPO) event store with snapshots, storing state as ``TaskApplication`` does."""

    def __init__(self) -> None:
        super().__init__(env={"PERSISTENCE_MODULE": "eventsourcing.popo", "IS_SNAPSHOTTING_ENABLED": "y"})

    @override
    def register_transcodings(self, transcoder: JSONTranscoder) -> None:
        super().register_transcodings(transcoder)
        register_domain_transcodings(transcoder)


def at(*, seconds: float = 0, minutes: float = 0, hours: float = 0, days: float = 0) -> datetime:
    """A time relative to ``T0``."""
    return T0 + timedelta(seconds=seconds, minutes=minutes, hours=hours, days=days)


def text_message(text: str, message_id: str = "m-x", role: str = "ROLE_AGENT") -> JSON:
    """A minimal A2A message."""
    return {"messageId": message_id, "role": role, "parts": [{"text": text}]}


def submit(now: datetime = T0, **overrides: Any) -> Task:
    """A freshly submitted task (its ``Submitted`` event still pending)."""
    fields: dict[str, Any] = {
        "task_id": TASK_ID,
        "now": now,
        "tenant": "acme",
        "context_id": "ctx-1",
        "skill": "access-review",
        "skill_version": 1,
        "message": FIRST_MESSAGE,
        "params": {"systems": ["github"]},
    }
    fields.update(overrides)
    return Task.submit(**fields)


def given(*commands: Command) -> Task:
    """A submitted task after ``commands`` (at T0+1s, T0+2s, ...), with no pending events."""
    task = submit()
    for offset, command in enumerate(commands, start=1):
        command(task, T0 + timedelta(seconds=offset))
    task.collect_events()
    return task


def when(task: Task, command: Command, now: datetime = LATER) -> list[Any]:
    """Run ``command`` at ``now`` and return the events it recorded."""
    command(task, now)
    return list(task.collect_events())


def types(events: Sequence[object]) -> list[str]:
    """The event class names, in order."""
    return [type(event).__name__ for event in events]


def state_of(task: Task) -> dict[str, Any]:
    """A deep copy of everything the aggregate holds except its pending events."""
    return copy.deepcopy({k: v for k, v in vars(task).items() if k != "_pending_events"})


def refused(task: Task, command: Command, error: type[DomainError], now: datetime = LATER) -> DomainError:
    """Run ``command``; it must raise exactly ``error`` and change nothing at all."""
    before, version = state_of(task), task.version
    with pytest.raises(DomainError) as info:
        command(task, now)
    got = type(info.value)
    assert got is error, f"expected {error.__name__}, got {got.__name__}: {info.value}"
    assert list(task.collect_events()) == []
    assert task.version == version
    assert state_of(task) == before
    return info.value


# ---------------------------------------------------------------------------------- commands


def grant(worker: str = "w1", lease: timedelta = LEASE) -> Command:
    return lambda task, now: task.grant_lease(worker=worker, now=now, until=now + lease)


def extend(epoch: int = 1, lease: timedelta = LEASE) -> Command:
    return lambda task, now: task.extend_lease(epoch=epoch, now=now, until=now + lease)


def release(epoch: int = 1, reason: str = "shutdown") -> Command:
    return lambda task, now: task.release_lease(epoch=epoch, now=now, reason=reason)


def step(index: int, epoch: int = 1, checkpoint: JSON | None = None) -> Command:
    return lambda task, now: task.complete_step(
        epoch=epoch, now=now, step=index, checkpoint=checkpoint or {"done": index}, lease_until=now + LEASE
    )


def save(index: int, epoch: int = 1, checkpoint: JSON | None = None) -> Command:
    return lambda task, now: task.save_checkpoint(
        epoch=epoch, now=now, step=index, checkpoint=checkpoint or {"sub": index}, lease_until=now + LEASE
    )


def progress(text: str = "working on it", epoch: int = 1) -> Command:
    return lambda task, now: task.report_progress(epoch=epoch, now=now, message=text_message(text))


def ask(
    index: int = 0,
    epoch: int = 1,
    *,
    wait: timedelta = PAUSE,
    on_deadline: str = "fail",
    auth: bool = False,
    deadline: datetime | None = None,
    repeat: bool = False,
) -> Command:
    return lambda task, now: task.request_input(
        epoch=epoch,
        now=now,
        step=index,
        checkpoint={"asked": index},
        question=text_message("approve?", "q-1"),
        deadline=deadline if deadline is not None else now + wait,
        on_deadline=on_deadline,
        auth=auth,
        repeat=repeat,
    )


def answer(text: str = "yes") -> Command:
    return lambda task, now: task.receive_input(now=now, message=text_message(text, "m-2", "ROLE_USER"))


def artifact(
    artifact_id: str = "a-1", *parts: str, epoch: int = 1, append: bool = False, last_chunk: bool = True
) -> Command:
    body = {"artifactId": artifact_id, "parts": [{"text": p} for p in parts or ("chunk",)]}
    return lambda task, now: task.append_artifact(
        epoch=epoch, now=now, artifact=body, append=append, last_chunk=last_chunk
    )


def effect(key: str = "revoke:1", result: Any = None, epoch: int = 1) -> Command:
    return lambda task, now: task.record_effect(
        epoch=epoch, now=now, key=key, result={"status": 204} if result is None else result
    )


def start_effect(key: str = "revoke:1", epoch: int = 1) -> Command:
    return lambda task, now: task.start_effect(epoch=epoch, now=now, key=key)


def fail_attempt(
    step: int = 0, cause: AttemptCause = "error", detail: str = "ValueError: boom", epoch: int = 1
) -> Command:
    return lambda task, now: task.fail_attempt(epoch=epoch, now=now, step=step, cause=cause, detail=detail)


def complete(epoch: int = 1) -> Command:
    return lambda task, now: task.complete(epoch=epoch, now=now, message=text_message("done"))


def fail(epoch: int = 1, reason: str = "step broke") -> Command:
    return lambda task, now: task.fail(epoch=epoch, now=now, reason=reason, message=text_message(reason))


def reject(epoch: int = 1, reason: str = "not allowed") -> Command:
    return lambda task, now: task.reject(epoch=epoch, now=now, reason=reason, message=text_message(reason))


def cancel(reason: str = "client canceled") -> Command:
    return lambda task, now: task.cancel(now=now, reason=reason, message=text_message(reason))


def expire_pause(text: str = "no answer in time") -> Command:
    return lambda task, now: task.expire_pause(now=now, message=text_message(text))


def set_push(config_id: str = "p-1", url: str = "https://hooks.example/a2a") -> Command:
    return lambda task, now: task.set_push_config(now=now, config={"id": config_id, "url": url})


def remove_push(config_id: str = "p-1") -> Command:
    return lambda task, now: task.remove_push_config(now=now, config_id=config_id)


def expire(reason: str = "retention passed") -> Command:
    return lambda task, now: task.expire(now=now, reason=reason)
