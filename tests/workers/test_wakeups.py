"""The worker's wake-ups (ADR 0036): its own commits' NOTIFYs wake nobody and cost no read of the
run queue, and a task anyone else submits meanwhile is still claimed at once (polling all but off),
on PostgreSQL and in memory; the matching of NOTIFYs to own appends, under every interleaving."""

from __future__ import annotations

import asyncio
import functools
import random
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any
from uuid import UUID

import pytest
from hypothesis import given
from hypothesis import strategies as st

from domain.skill import Complete, Continue, Skill, SkillRegistry, StepContext, StepOutcome
from store.log.application import TaskApplication
from store.log.config import MemoryConfig
from store.log.run_queue import RunQueue
from tests.support.tasks import new_task
from workers.task_runner import RunPolicy
from workers.wakeup import Expectation, Wakeup, _Announcements
from workers.worker import Worker, WorkerConfig


def _clock() -> datetime:
    return datetime.now(UTC)


@pytest.fixture
def store(any_store: TaskApplication) -> TaskApplication:
    return any_store


@pytest.fixture
def registry() -> SkillRegistry:
    async def first(_: StepContext) -> StepOutcome:
        return Continue({"step": 1})

    async def last(_: StepContext) -> StepOutcome:
        return Complete(message="done")

    async def busy(ctx: StepContext) -> StepOutcome:
        for n in range(30):  # commit after commit, each an own append of the worker
            await ctx.commit({"n": n})
            await asyncio.sleep(0.005)
        return Complete(message="busy done")

    return SkillRegistry([Skill("fine", 1, [first, last]), Skill("busy", 1, [busy])])


def _worker(store: TaskApplication, registry: SkillRegistry) -> Worker:
    return Worker(
        store=store,
        registry=registry,
        clock=_clock,
        # Polling all but off: only a wake-up can start a task quickly.
        config=WorkerConfig(worker_id="w", lease_seconds=10, concurrency=4, grace_seconds=1, poll_seconds=60),
        policy=RunPolicy(max_pause=timedelta(days=1)),
    )


def _submit(store: TaskApplication, skill: str) -> UUID:
    task = new_task(_clock(), skill=skill)
    store.save_tasks(task)
    return task.id


async def _wait_for(check: Callable[[], bool], seconds: float) -> None:
    for _ in range(int(seconds / 0.02)):
        if await asyncio.to_thread(check):
            return
        await asyncio.sleep(0.02)
    raise AssertionError("timed out")


def _count_reads(store: TaskApplication, monkeypatch: pytest.MonkeyPatch) -> dict[str, int]:
    """Count the worker's reads of the run queue (each still runs on the real store)."""
    reads = {"claimable": 0, "next_lease_end": 0}
    queue = store.run_queue
    for name in reads:
        real = getattr(queue, name)

        def counted(*args: Any, _real: Any = real, _name: str = name, **kwargs: Any) -> Any:
            reads[_name] += 1
            return _real(*args, **kwargs)

        monkeypatch.setattr(queue, name, counted)
    return reads


async def test_own_commits_wake_nobody_and_cost_no_queue_read(
    store: TaskApplication, registry: SkillRegistry, monkeypatch: pytest.MonkeyPatch
) -> None:
    reads = _count_reads(store, monkeypatch)
    worker = _worker(store, registry)
    stop = asyncio.Event()
    running = asyncio.ensure_future(worker.run(stop))
    try:
        await asyncio.sleep(0.3)  # idle: the start's wake-up read
        before = dict(reads)
        task_id = _submit(store, "fine")  # another's append: one wake-up
        await _wait_for(lambda: store.get(task_id).is_terminal, seconds=10)
        await asyncio.sleep(0.3)
        # Claim, step, last step: three own commits, each NOTIFYing; none read the queue.
        assert worker._wakeup.matched >= 3
        assert reads["claimable"] - before["claimable"] == 1
        assert reads["next_lease_end"] - before["next_lease_end"] <= 1
    finally:
        stop.set()
        await running


async def test_a_task_submitted_during_own_commits_is_claimed_at_once(
    store: TaskApplication, registry: SkillRegistry
) -> None:
    worker = _worker(store, registry)
    stop = asyncio.Event()
    running = asyncio.ensure_future(worker.run(stop))
    try:
        await asyncio.sleep(0.2)
        for _ in range(3):
            busy = _submit(store, "busy")
            await _wait_for(lambda b=busy: store.get(b).version > 3, seconds=5)  # type: ignore[misc]
            await asyncio.sleep(random.uniform(0, 0.02))  # somewhere among its commits
            other = _submit(store, "fine")
            # Far before the 60 s poll: the NOTIFY of another's append was not taken for an own one.
            await _wait_for(lambda o=other: store.get(o).is_terminal, seconds=5)  # type: ignore[misc]
            await _wait_for(lambda b=busy: store.get(b).is_terminal, seconds=10)  # type: ignore[misc]
    finally:
        stop.set()
        await running


# ---------------------------------------------------------------------- matching, every interleaving

OwnAppend = tuple[bool, bool]
"""(it wrote, its NOTIFY came before its return)."""


@given(
    own=st.lists(st.tuples(st.booleans(), st.booleans()), max_size=6),
    foreign=st.integers(min_value=0, max_value=3),
    order=st.randoms(use_true_random=False),
)
def test_another_appends_notify_always_wakes_and_own_never_do(
    own: list[OwnAppend], foreign: int, order: random.Random
) -> None:
    """Own appends announced, settled (wrote or not) and NOTIFYing (if they wrote) before or after
    their return, others' NOTIFYs anywhere among them: once every own append returned and NOTIFYed,
    the wake-up is set exactly when another's NOTIFY came."""
    wakeup = Wakeup(_queue())
    announcements = _Announcements(wakeup)
    steps: list[tuple[str, int]] = [("foreign", i) for i in range(foreign)]
    for i, (wrote, notify_first) in enumerate(own):
        steps.append(("expect", i))
        if wrote:
            steps += [("notify", i), ("settle", i)] if notify_first else [("settle", i), ("notify", i)]
        else:
            steps.append(("settle", i))
    # Shuffle, keeping each own append's steps in its order (expect, then notify/settle as drawn).
    queues: dict[object, list[tuple[str, int]]] = {}
    for step in steps:
        queues.setdefault(step[1] if step[0] != "foreign" else ("f", step[1]), []).append(step)
    expectations: dict[int, Expectation] = {}
    while queues:
        key = order.choice(sorted(queues, key=str))
        kind, i = queues[key].pop(0)
        if not queues[key]:
            del queues[key]
        if kind == "expect":
            expectations[i] = wakeup.expect()
        elif kind == "settle":
            expectations[i].settle(appended=own[i][0])
        else:  # a NOTIFY, own or another's: the recorder sets the event it was given
            announcements.set()
    assert wakeup.event.is_set() == (foreign > 0)
    assert not wakeup._expected  # nothing left to mistake another's NOTIFY for


def test_an_own_notify_that_never_comes_stops_being_waited_for() -> None:
    now = [0.0]
    wakeup = Wakeup(_queue(), match_within_s=1.0, clock=lambda: now[0])
    wakeup.expect().settle(appended=True)  # its NOTIFY is lost (the listener reconnected, say)
    now[0] = 2.0
    _Announcements(wakeup).set()  # another's: not matched to the overdue one
    assert wakeup.event.is_set()


@functools.cache
def _queue() -> RunQueue:
    """A run queue for the matching tests' wake-ups, which are never started."""
    return TaskApplication(MemoryConfig()).run_queue
