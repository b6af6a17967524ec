"""An in-process worker, on PostgreSQL and in memory: retries, local failures, version filtering."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from datetime import UTC, datetime, timedelta
from uuid import UUID, uuid4

import pytest

from domain.retry_policy import RetryPolicy
from domain.skill import AskInput, Complete, Continue, Skill, SkillRegistry, StepContext, StepOutcome
from domain.task import Task
from store.log.application import TaskApplication
from tests.support.tasks import new_task
from workers.metrics import WorkerMetrics
from workers.task_runner import RunPolicy
from workers.worker import Worker, WorkerConfig


def _clock() -> datetime:
    return datetime.now(UTC)


def _submit(store: TaskApplication, skill: str, version: int = 1) -> UUID:
    task = new_task(_clock(), skill=skill, version=version, text="go")
    store.save_tasks(task)
    return task.id


async def _wait_for(store: TaskApplication, check: Callable[[], bool], seconds: float = 20) -> None:
    for _ in range(int(seconds / 0.05)):
        if await asyncio.to_thread(check):
            return
        await asyncio.sleep(0.05)
    raise AssertionError("timed out")


@pytest.fixture
def store(any_store: TaskApplication) -> TaskApplication:
    """Every test here runs on both recorders: the worker needs nothing but the store's contract."""
    return any_store


@pytest.fixture
def attempts() -> list[int]:
    return []


@pytest.fixture
def registry(attempts: list[int]) -> SkillRegistry:
    async def flaky(ctx: StepContext) -> StepOutcome:
        attempts.append(ctx.checkpoint.get("n", 0))
        await ctx.commit({"n": len(attempts)})  # committed progress survives the failure
        raise ConnectionError("downstream unavailable")

    async def unstorable(_: StepContext) -> StepOutcome:
        return Complete(artifacts=[{"artifactId": "a", "parts": [{"data": {1, 2}}]}])  # a set

    async def fine(_: StepContext) -> StepOutcome:
        return Complete(artifacts=[{"artifactId": "a", "parts": [{"text": "ok"}]}])

    async def first(_: StepContext) -> StepOutcome:
        return Continue({"step": 1})

    async def ask_until_ok(ctx: StepContext) -> StepOutcome:
        text = ctx.latest_input["parts"][0].get("text")
        if text != "ok":
            return AskInput(question=f"say ok (not {text!r})", checkpoint=ctx.checkpoint, repeat=True)
        return Complete(message="thanks")

    return SkillRegistry(
        [
            Skill("ask-until-ok", 1, [ask_until_ok]),
            Skill("flaky", 1, [flaky]),
            Skill("unstorable", 1, [unstorable]),
            Skill("fine", 1, [first, fine]),
        ]
    )


@pytest.fixture
async def worker(store: TaskApplication, registry: SkillRegistry) -> AsyncIterator[Worker]:
    process = Worker(
        store=store,
        registry=registry,
        clock=_clock,
        config=WorkerConfig(worker_id="test-worker", lease_seconds=10, concurrency=8, grace_seconds=1),
        policy=RunPolicy(max_pause=timedelta(days=1), step_retry=RetryPolicy(3, 0.01, 0.01)),
    )
    stop = asyncio.Event()
    running = asyncio.ensure_future(process.run(stop))
    # Past its release check before a test submits a task of a version it lacks (which the check
    # refuses at start): under load the check can otherwise run after the test's first submit.
    for _ in range(400):
        if process.running or running.done():
            break
        await asyncio.sleep(0.05)
    yield process
    stop.set()
    await running


async def test_a_failing_step_is_retried_from_its_checkpoint_then_fails_the_task(
    store: TaskApplication, worker: Worker, attempts: list[int]
) -> None:
    task_id = _submit(store, "flaky")
    await _wait_for(store, lambda: store.get(task_id).is_terminal)

    task = store.get(task_id)
    assert task.state == "TASK_STATE_FAILED"
    assert attempts == [0, 1, 2]  # each retry started from the checkpoint the last one committed
    reason = task.status_message["parts"][0]["text"] if task.status_message else ""
    assert "failed 3 times" in reason
    assert "downstream unavailable" in reason


async def test_an_outcome_the_store_cannot_hold_fails_only_its_own_task(
    store: TaskApplication, worker: Worker
) -> None:
    bad = _submit(store, "unstorable")
    good = [_submit(store, "fine") for _ in range(5)]
    await _wait_for(store, lambda: all(store.get(t).is_terminal for t in [bad, *good]))

    assert store.get(bad).state == "TASK_STATE_FAILED"
    assert {store.get(t).state for t in good} == {"TASK_STATE_COMPLETED"}


async def test_a_worker_claims_only_skill_versions_it_has(store: TaskApplication, worker: Worker) -> None:
    foreign = _submit(store, "fine", version=2)  # a newer release's task
    mine = _submit(store, "fine")
    await _wait_for(store, lambda: store.get(mine).is_terminal)
    await asyncio.sleep(0.5)

    untouched = store.get(foreign)
    assert untouched.state == "TASK_STATE_SUBMITTED"
    assert untouched.version == 1  # not even a lease was taken


async def test_a_repeated_question_resumes_the_step_that_asked(
    store: TaskApplication, worker: Worker
) -> None:
    task_id = _submit(store, "ask-until-ok")
    for answer in ("no", "maybe", "ok"):
        await _wait_for(store, lambda: store.get(task_id).state == "TASK_STATE_INPUT_REQUIRED")
        task = store.get(task_id)
        task.receive_input(
            now=_clock(),
            message={"messageId": str(uuid4()), "role": "ROLE_USER", "parts": [{"text": answer}]},
        )
        store.save_tasks(task)
    await _wait_for(store, lambda: store.get(task_id).is_terminal)

    done = store.get(task_id)
    assert done.state == "TASK_STATE_COMPLETED"
    asked = [e for e in store.history(task_id) if isinstance(e, Task.InputRequested)]
    assert [(e.step, e.resume_step) for e in asked] == [(0, 0), (0, 0), (0, 0)]


async def test_an_append_wakes_an_idle_worker_at_once(
    store: TaskApplication, registry: SkillRegistry
) -> None:
    """With polling all but off, only the store's append wake-up can start the task quickly."""
    process = Worker(
        store=store,
        registry=registry,
        clock=_clock,
        config=WorkerConfig(
            worker_id="idle", lease_seconds=10, concurrency=2, grace_seconds=1, poll_seconds=60
        ),
        policy=RunPolicy(max_pause=timedelta(days=1)),
    )
    stop = asyncio.Event()
    running = asyncio.ensure_future(process.run(stop))
    try:
        await asyncio.sleep(0.5)  # idle now, waiting up to the poll interval
        task_id = _submit(store, "fine")
        await _wait_for(store, lambda: store.get(task_id).is_terminal, seconds=5)
    finally:
        stop.set()
        await running


async def test_a_worker_counts_its_claims_and_times_its_steps(
    store: TaskApplication, registry: SkillRegistry
) -> None:
    metrics = WorkerMetrics()
    process = Worker(
        store=store,
        registry=registry,
        clock=_clock,
        config=WorkerConfig(worker_id="test-worker", lease_seconds=10, concurrency=8, grace_seconds=1),
        policy=RunPolicy(max_pause=timedelta(days=1), step_retry=RetryPolicy(2, 0.01, 0.01)),
        metrics=metrics,
    )
    stop = asyncio.Event()
    running = asyncio.ensure_future(process.run(stop))
    fine, flaky = _submit(store, "fine"), _submit(store, "flaky")
    await _wait_for(store, lambda: store.get(fine).is_terminal and store.get(flaky).is_terminal)
    stop.set()
    await running

    def sample(name: str, **labels: str) -> float | None:
        return metrics.registry.get_sample_value(name, labels)

    assert sample("longhaul_worker_claims_total", skill="fine") == 1
    assert sample("longhaul_worker_claims_total", skill="flaky") == 1
    assert sample("longhaul_worker_step_seconds_count", skill="fine", outcome="Continue") == 1
    assert sample("longhaul_worker_step_seconds_count", skill="fine", outcome="Complete") == 1
    assert sample("longhaul_worker_step_seconds_count", skill="flaky", outcome="error") == 2
    assert sample("longhaul_worker_step_attempts_failed_total", skill="flaky", cause="error") == 2
    assert sample("longhaul_worker_tasks_failed_by_policy_total", skill="flaky") == 1
    assert sample("longhaul_worker_step_attempts_failed_total", skill="fine", cause="error") is None
