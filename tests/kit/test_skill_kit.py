"""The skill test kit (``longhaul.testing``): the real runtime in memory, crashes where asked."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from domain.skill import AskInput, Complete, Continue, Skill, StepContext, StepOutcome
from domain.states import TaskState
from domain.task import Task
from longhaul.testing import CrashNotReachedError, MovableClock, SkillKit, message_text


async def count(ctx: StepContext) -> StepOutcome:
    for n in range(ctx.checkpoint.get("n", 0), 3):
        await ctx.commit({"n": n + 1})
    return Continue(ctx.checkpoint | {"n": 3})


async def finish(ctx: StepContext) -> StepOutcome:
    return Complete(message=f"counted to {ctx.checkpoint['n']}")


COUNTER = Skill(name="counter", version=1, steps=[count, finish])
FLAKY_CALLS: list[int] = []


async def flaky(ctx: StepContext) -> StepOutcome:
    FLAKY_CALLS.append(1)
    if len(FLAKY_CALLS) < 3:
        raise ConnectionError(f"attempt {len(FLAKY_CALLS)}")
    return Complete(message="made it")


async def broken(ctx: StepContext) -> StepOutcome:
    raise ValueError("always")


async def wait(ctx: StepContext) -> StepOutcome:
    return AskInput("anyone?", checkpoint={}, deadline=timedelta(hours=1), on_deadline="cancel")


async def test_a_crash_after_a_commit_keeps_it_and_the_next_worker_resumes_there() -> None:
    kit = SkillKit(COUNTER)
    task_id = kit.submit("counter")

    crashed = await kit.run(task_id, crash_after_commit=2)

    assert crashed.checkpoint == {"n": 2}
    assert crashed.state == TaskState.WORKING
    assert crashed.lease_owner == "kit-worker-1"  # a dead worker releases nothing
    task = await kit.run(task_id)
    assert task.state == TaskState.COMPLETED
    assert message_text(task.status_message) == "counted to 3"
    saved = [e.checkpoint for e in kit.events(task_id, Task.CheckpointSaved)]
    assert saved == [{"n": 1}, {"n": 2}, {"n": 3}]  # nothing counted twice
    grants = kit.events(task_id, Task.LeaseGranted)
    assert [(g.worker, g.epoch) for g in grants] == [("kit-worker-1", 1), ("kit-worker-2", 2)]
    assert crashed.lease_until is not None
    assert grants[1].timestamp >= crashed.lease_until  # the dead worker's lease was waited out


async def test_a_crash_before_a_commit_loses_exactly_that_commit() -> None:
    kit = SkillKit(COUNTER)
    task_id = kit.submit("counter")

    crashed = await kit.run(task_id, crash_before_commit=2)

    assert crashed.checkpoint == {"n": 1}
    assert kit.commits(task_id) == [["CheckpointSaved"]]


async def test_a_crash_that_never_comes_is_an_error() -> None:
    kit = SkillKit(COUNTER)
    task_id = kit.submit("counter")

    with pytest.raises(CrashNotReachedError, match="commit 9 never came"):
        await kit.run(task_id, crash_after_commit=9)
    assert kit.task(task_id).state == TaskState.COMPLETED


async def test_a_raising_step_is_retried_and_its_errors_are_kept() -> None:
    FLAKY_CALLS.clear()
    kit = SkillKit(Skill(name="flaky", version=1, steps=[flaky]))
    task_id = kit.submit("flaky")

    task = await kit.run(task_id)

    assert task.state == TaskState.COMPLETED
    assert [str(e) for e in kit.step_errors(task_id)] == ["attempt 1", "attempt 2"]


async def test_a_step_that_always_raises_fails_the_task_after_the_attempts() -> None:
    kit = SkillKit(Skill(name="broken", version=1, steps=[broken]), max_step_attempts=3)
    task_id = kit.submit("broken")

    task = await kit.run(task_id)

    assert task.state == TaskState.FAILED
    assert len(kit.step_errors(task_id)) == 3
    (failed,) = kit.events(task_id, Task.Failed)
    assert failed.epoch == 1
    assert failed.reason == "step 0 (broken) failed 3 times: ValueError: always"
    assert [e.cause for e in kit.events(task_id, Task.StepAttemptFailed)] == ["error"] * 3


async def test_the_clock_moves_only_when_told_and_the_sweeper_ends_pauses() -> None:
    kit = SkillKit(Skill(name="wait", version=1, steps=[wait]))
    task_id = kit.submit("wait")
    task = await kit.run(task_id)
    assert task.state == TaskState.INPUT_REQUIRED

    kit.advance(minutes=59)
    assert kit.sweep() == (0, 0)
    kit.advance(minutes=1)
    assert kit.sweep() == (1, 0)

    assert kit.task(task_id).state == TaskState.CANCELED


async def test_a_paused_task_can_be_canceled() -> None:
    kit = SkillKit(Skill(name="wait", version=1, steps=[wait]))
    task_id = kit.submit("wait")
    await kit.run(task_id)

    assert kit.cancel(task_id).state == TaskState.CANCELED


def test_the_clock_refuses_naive_starts_and_going_back() -> None:
    with pytest.raises(ValueError, match="timezone-aware"):
        MovableClock(datetime(2026, 1, 1))
    clock = MovableClock(datetime(2026, 1, 1, tzinfo=UTC))
    with pytest.raises(ValueError, match="does not go back"):
        clock.advance(timedelta(seconds=-1))
