"""A task with every kind of actor in its log: a client with an API key, three workers, a crash.

``paused_resumed_crashed`` drives the store's own use cases for the client's events (submit with
a push config, the answer, a second push config and its removal, each with the client's key id)
and the domain's commands for the workers' (as ``workers/`` appends them): worker ``w-1`` runs
step 0, records an effect and pauses; after the answer ``w-2`` claims it, reports progress often
enough that the log passes a snapshot (100 events), and dies without releasing its lease; once
that lease has expired ``w-3`` takes the task over, records a second effect and completes it.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any
from uuid import UUID

from domain.skill import Complete, Skill, StepContext, StepOutcome
from domain.task import Task
from store.log.application import SNAPSHOT_INTERVAL, TaskApplication

JSON = dict[str, Any]

START = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)
CLIENT_KEY = "3f2a9c1d"
OTHER_KEY = "9a8b7c6d"
LEASE = timedelta(seconds=30)
PROGRESS_REPORTS = SNAPSHOT_INTERVAL + 5


async def _step(context: StepContext) -> StepOutcome:
    return Complete()


SKILL = Skill("audited", 1, [_step, _step], "A skill the audit tests drive by hand", ())


@dataclass
class Clock:
    """A clock that moves one second at every read, so every event has its own time."""

    now: datetime = START

    def __call__(self) -> datetime:
        self.now += timedelta(seconds=1)
        return self.now


@dataclass(frozen=True)
class AuditedTask:
    """The task's id and the versions of its milestones."""

    task_id: UUID
    paused_at: int
    """The version of ``InputRequested``."""
    crashed_after: int
    """The last version ``w-2`` wrote before it died."""
    last: int


def paused_resumed_crashed(store: TaskApplication, *, tenant: str = "acme") -> AuditedTask:
    """Write the task described above to ``store``; returns its milestones."""
    clock = Clock()
    message = {"messageId": "m-1", "role": "ROLE_USER", "parts": [{"text": "review the grants"}]}
    hook = {"id": "hook-1", "url": "https://hooks.example/a2a", "token": "secret-token"}
    task = store.submit(
        tenant=tenant, message=message, skill=SKILL, clock=clock, push_config=hook, key_id=CLIENT_KEY
    )
    task_id = task.id

    task, epoch = _claim(store, task_id, "w-1", clock)
    task.complete_step(
        epoch=epoch, now=clock(), step=0, checkpoint={"done": [0]}, lease_until=clock.now + LEASE
    )
    task.record_effect(epoch=epoch, now=clock(), key="revoke:alice", result={"revoked": True, "id": 7})
    question = {"messageId": "q-1", "role": "ROLE_AGENT", "parts": [{"text": "Approve the revocations?"}]}
    task.request_input(
        epoch=epoch,
        now=clock(),
        step=1,
        checkpoint={"done": [0]},
        question=question,
        deadline=clock.now + timedelta(days=1),
        repeat=True,
    )
    store.save_tasks(task)
    paused_at = task.version

    answer = {
        "messageId": "a-1",
        "role": "ROLE_USER",
        "parts": [{"text": "approved"}],
        "taskId": str(task_id),
    }
    store.answer(task_id, tenant=tenant, message=answer, clock=clock, key_id=CLIENT_KEY)

    task, epoch = _claim(store, task_id, "w-2", clock)
    for n in range(PROGRESS_REPORTS):
        task.report_progress(epoch=epoch, now=clock.now, message=_agent(f"working {n}"))  # within its lease
        store.save_tasks(task)
    crashed_after = task.version  # w-2 dies here: no release, its lease runs out

    clock.now += LEASE * 2
    task, epoch = _claim(store, task_id, "w-3", clock)
    store.set_push_config(
        task_id,
        tenant=tenant,
        config={"id": "hook-2", "url": "https://hooks.example/b"},
        clock=clock,
        key_id=OTHER_KEY,
    )
    store.remove_push_config(task_id, tenant=tenant, config_id="hook-2", clock=clock, key_id=OTHER_KEY)
    task = store.get(task_id)
    task.record_effect(epoch=epoch, now=clock(), key="revoke:bob", result={"revoked": False, "why": "gone"})
    task.complete_step(
        epoch=epoch, now=clock(), step=1, checkpoint={"done": [0, 1]}, lease_until=clock.now + LEASE
    )
    task.complete(epoch=epoch, now=clock(), message=_agent("all done"))
    store.save_tasks(task)
    return AuditedTask(task_id=task_id, paused_at=paused_at, crashed_after=crashed_after, last=task.version)


def _claim(store: TaskApplication, task_id: UUID, worker: str, clock: Clock) -> tuple[Task, int]:
    task = store.get(task_id)
    now = clock()
    epoch = task.grant_lease(worker=worker, now=now, until=now + LEASE)
    store.save_tasks(task)
    return task, epoch


def _agent(text: str) -> JSON:
    return {"messageId": f"agent-{text}", "role": "ROLE_AGENT", "parts": [{"text": text}]}


def replayed(events: list[Any], version: int) -> Task:
    """The task after ``version``, folded from its first ``version`` events by hand (no library replay)."""
    task: Any = None
    for event in events:
        if event.originator_version > version:
            break
        task = event.mutate(task)
    assert isinstance(task, Task)
    return task
