"""Step timeouts in real time on PostgreSQL: a commit is the step's heartbeat, silence times it out."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta

from domain.retry_policy import RetryPolicy
from domain.skill import Complete, Skill, SkillRegistry, StepContext, StepOutcome
from domain.states import TaskState
from domain.task import Task
from store.log.application import TaskApplication
from tests.support.tasks import new_task
from workers.task_runner import RunPolicy
from workers.worker import Worker, WorkerConfig

TIMEOUT = timedelta(seconds=0.6)
RUNS_FOR_S = 1.5
"""Longer than the timeout, at both steps."""


def _clock() -> datetime:
    return datetime.now(UTC)


async def beating(ctx: StepContext) -> StepOutcome:
    for tick in range(int(RUNS_FOR_S / 0.15)):
        await asyncio.sleep(0.15)
        await ctx.commit({"tick": tick})  # every commit starts the timeout again
    return Complete(message="beat all along")


async def silent(ctx: StepContext) -> StepOutcome:
    await asyncio.sleep(RUNS_FOR_S)
    return Complete(message="never")


async def test_a_step_that_commits_outlives_its_timeout_and_a_silent_one_times_out(
    postgres_store: TaskApplication,
) -> None:
    store = postgres_store
    worker = Worker(
        store=store,
        registry=SkillRegistry([Skill("beating", 1, [beating]), Skill("silent", 1, [silent])]),
        clock=_clock,
        config=WorkerConfig(worker_id="w", lease_seconds=10, concurrency=4, grace_seconds=1),
        policy=RunPolicy(
            max_pause=timedelta(days=1),
            step_retry=RetryPolicy(max_attempts=1, first_delay_s=0.01, max_delay_s=0.01),
            step_timeout=TIMEOUT,
        ),
    )
    tasks = [new_task(_clock(), skill=name, version=1, text="go") for name in ("beating", "silent")]
    store.save_tasks(*tasks)
    stop = asyncio.Event()
    running = asyncio.ensure_future(worker.run(stop))
    try:
        for _ in range(200):
            found = await asyncio.to_thread(store.get_many, [t.id for t in tasks])
            if all(t.is_terminal for t in found.values()):
                break
            await asyncio.sleep(0.05)
    finally:
        stop.set()
        await running

    beat, quiet = (store.get(t.id) for t in tasks)
    assert beat.state == TaskState.COMPLETED
    assert [e for e in store.history(beat.id) if isinstance(e, Task.StepAttemptFailed)] == []
    assert quiet.state == TaskState.FAILED
    (timed_out,) = [e for e in store.history(quiet.id) if isinstance(e, Task.StepAttemptFailed)]
    assert timed_out.cause == "timeout"
    assert timed_out.detail == "step 0 (silent) ran past its timeout of 0.6 seconds"


async def failing(ctx: StepContext) -> StepOutcome:
    raise ConnectionError("down")


async def test_a_drain_ends_the_pause_before_the_next_attempt_at_once(
    postgres_store: TaskApplication,
) -> None:
    store = postgres_store
    worker = Worker(
        store=store,
        registry=SkillRegistry([Skill("failing", 1, [failing])]),
        clock=_clock,
        config=WorkerConfig(worker_id="w", lease_seconds=30, concurrency=1, grace_seconds=5),
        policy=RunPolicy(
            max_pause=timedelta(days=1),
            step_retry=RetryPolicy(max_attempts=5, first_delay_s=60, max_delay_s=60),  # 30-60 s
        ),
    )
    task = new_task(_clock(), skill="failing", version=1, text="go")
    store.save_tasks(task)
    stop = asyncio.Event()
    running = asyncio.ensure_future(worker.run(stop))
    for _ in range(200):
        if await asyncio.to_thread(lambda: store.get(task.id).failed_attempts):
            break
        await asyncio.sleep(0.05)

    stop.set()
    await asyncio.wait_for(running, timeout=3)  # not the pause's 30 s, nor the grace's 5 s

    history = store.history(task.id)
    assert [type(e).__name__ for e in history][-2:] == ["StepAttemptFailed", "LeaseReleased"]
    assert store.get(task.id).state == TaskState.WORKING, "another worker takes it over at once"
