"""The kit simulates the three ways a step fails to end, with the clock moved instead of waited.

A step that kills its worker (``crash_before_commit``), one that hangs (``skip_time``), one that
raises; each attempt is a ``StepAttemptFailed`` event and the policy decides when the task fails.
"""

from __future__ import annotations

import asyncio
import itertools
import threading
from datetime import timedelta
from typing import Any

from domain.errors import LeaseLostError
from domain.retry_policy import RetryPolicy
from domain.skill import Complete, Continue, Skill, StepContext, StepOutcome, step
from domain.states import TaskState
from domain.task import Task
from longhaul.testing import SkillKit, message_text


async def fetch(ctx: StepContext) -> StepOutcome:
    return Continue({"fetched": True})


async def call_downstream(ctx: StepContext) -> StepOutcome:
    await ctx.once("call", _ok)
    return Complete(message="called")


async def _ok(key: str) -> str:
    return key


async def hang(ctx: StepContext) -> StepOutcome:
    await asyncio.Event().wait()
    return Complete()


class PermissionDeniedError(Exception):
    """A downstream refused for good: retrying cannot help."""


async def denied(ctx: StepContext) -> StepOutcome:
    raise PermissionDeniedError("user u-7 may not be reviewed")


async def flaky(ctx: StepContext) -> StepOutcome:
    raise ConnectionError("downstream unavailable")


async def test_a_worker_killed_at_every_attempt_fails_the_task_after_the_attempts() -> None:
    kit = SkillKit(Skill("fragile", 1, [fetch, call_downstream]), max_step_attempts=3)
    task_id = kit.submit("fragile")

    # Each run dies after calling the downstream, before recording its result: the first at its
    # second commit (the first completed step 0), the next two at their first.
    for commit in (2, 1, 1):
        await kit.run(task_id, crash_before_commit=commit)
    task = await kit.run(task_id)

    assert task.state == TaskState.FAILED
    assert message_text(task.status_message) == "step 1 (call_downstream) lost its worker 3 times"
    attempts = kit.events(task_id, Task.StepAttemptFailed)
    grants = kit.events(task_id, Task.LeaseGranted)
    assert [(a.attempt, a.step, a.cause) for a in attempts] == [(n, 1, "lease_lost") for n in (1, 2, 3)]
    assert [(a.worker, a.epoch) for a in attempts] == [(g.worker, g.epoch) for g in grants[:3]]
    assert [g.worker for g in grants] == [f"kit-worker-{n}" for n in range(1, 5)]
    assert kit.commits(task_id)[-1] == ["Failed"], "the fourth worker failed the task, ran nothing"


async def test_one_lost_worker_is_one_attempt_and_the_next_one_completes() -> None:
    kit = SkillKit(Skill("fragile", 1, [fetch, call_downstream]))
    task_id = kit.submit("fragile")

    await kit.run(task_id, crash_before_commit=2)
    task = await kit.run(task_id)

    assert task.state == TaskState.COMPLETED
    assert [a.cause for a in kit.events(task_id, Task.StepAttemptFailed)] == ["lease_lost"]
    assert task.failed_attempts == [], "a completed step starts the count again"


async def test_a_hanging_step_times_out_with_the_clock_skipped() -> None:
    kit = SkillKit(Skill("stuck", 1, [hang]), max_step_attempts=2, step_timeout=timedelta(minutes=10))
    task_id = kit.submit("stuck")
    started = kit.clock.now

    task = await kit.run(task_id, skip_time=True)

    assert task.state == TaskState.FAILED
    assert message_text(task.status_message) == "step 0 (hang) timed out 2 times"
    attempts = kit.events(task_id, Task.StepAttemptFailed)
    assert [(a.cause, a.epoch) for a in attempts] == [("timeout", 1), ("timeout", 1)]
    assert attempts[0].detail == "step 0 (hang) ran past its timeout of 10 minutes"
    assert kit.clock.now - started >= timedelta(minutes=20), "two timeouts passed on the kit's clock"
    assert kit.events(task_id, Task.LeaseExtended), "the lease was renewed while the step hung"


async def test_a_steps_own_timeout_and_policy_win_over_the_skills_and_the_services() -> None:
    quick = step(
        hang, timeout=timedelta(seconds=30), retry=RetryPolicy(max_attempts=1, first_delay_s=1, max_delay_s=1)
    )
    skill = Skill("stuck", 1, [quick], timeout=timedelta(hours=5))
    kit = SkillKit(skill, max_step_attempts=4)
    task_id = kit.submit("stuck")
    started = kit.clock.now

    task = await kit.run(task_id, skip_time=True)

    assert message_text(task.status_message) == "step 0 (hang) timed out once"
    assert timedelta(seconds=30) <= kit.clock.now - started < timedelta(minutes=5)


async def test_an_error_the_policy_never_retries_fails_the_task_at_once() -> None:
    policy = RetryPolicy(
        max_attempts=5, first_delay_s=1, max_delay_s=60, never_retry=(PermissionDeniedError,)
    )
    kit = SkillKit(Skill("review", 1, [denied], retry=policy))
    task_id = kit.submit("review")

    task = await kit.run(task_id)

    assert task.state == TaskState.FAILED
    reason = "step 0 (denied) raised an error that is not retried: PermissionDeniedError: user u-7"
    assert message_text(task.status_message) == f"{reason} may not be reviewed"
    assert len(kit.events(task_id, Task.StepAttemptFailed)) == 1


async def test_a_retried_error_waits_the_policys_pause_on_the_kits_clock() -> None:
    policy = RetryPolicy(max_attempts=3, first_delay_s=60, max_delay_s=600)
    kit = SkillKit(Skill("flaky", 1, [step(flaky, retry=policy)]))
    task_id = kit.submit("flaky")
    started = kit.clock.now

    task = await kit.run(task_id)

    assert message_text(task.status_message) == (
        "step 0 (flaky) failed 3 times: ConnectionError: downstream unavailable"
    )
    attempts = kit.events(task_id, Task.StepAttemptFailed)
    gaps = [b.timestamp - a.timestamp for a, b in itertools.pairwise(attempts)]
    assert timedelta(seconds=30) <= gaps[0] <= timedelta(seconds=60), "pause 1: 30-60 s"
    assert timedelta(seconds=60) <= gaps[1] <= timedelta(seconds=120), "pause 2: 60-120 s"
    assert kit.clock.now - started >= timedelta(seconds=90)


async def test_a_step_that_ignores_its_cancellation_loses_its_lease_and_its_writes() -> None:
    let_go = asyncio.Event()
    writes: list[str] = []

    async def stubborn(ctx: StepContext) -> StepOutcome:
        while not let_go.is_set():
            try:
                await let_go.wait()
            except asyncio.CancelledError:
                continue  # swallows every cancellation and runs on
        try:
            await ctx.commit({"late": True})
            writes.append("committed")
        except LeaseLostError:
            writes.append("refused")
        return Complete()

    kit = SkillKit(Skill("stubborn", 1, [stubborn]), max_step_attempts=2, step_timeout=timedelta(minutes=1))
    task_id = kit.submit("stubborn")

    task = await kit.run(task_id, skip_time=True)
    let_go.set()
    await asyncio.sleep(0.05)

    assert task.state == TaskState.FAILED
    assert message_text(task.status_message) == "step 0 (stubborn) timed out 2 times"
    attempts = kit.events(task_id, Task.StepAttemptFailed)
    assert all("ignored its cancellation" in a.detail for a in attempts)
    assert [e.reason for e in kit.events(task_id, Task.LeaseReleased)] == [
        "step 0 (stubborn) ignores its cancellation"
    ]
    assert writes == ["refused", "refused"], "nothing the abandoned steps wrote reached the log"
    assert kit.events(task_id, Task.CheckpointSaved) == []


async def test_a_step_whose_lease_ran_out_under_it_never_calls_its_effect() -> None:
    calls: list[str] = []
    kit: SkillKit

    async def blocked(ctx: StepContext) -> StepOutcome:
        kit.advance(minutes=5)  # as if sync code held the event loop past the lease

        async def effect(key: str) -> str:
            calls.append(key)
            return "done"

        await ctx.once("revoke", effect)
        return Complete()

    kit = SkillKit(Skill("blocked", 1, [blocked]))
    task_id = kit.submit("blocked")

    task = await kit.run(task_id)

    # Each attempt found its lease over before the effect, gave the task up, and the next claim
    # counted the lost lease; none called the downstream.
    assert task.state == TaskState.FAILED
    assert message_text(task.status_message) == "step 0 (blocked) lost its worker 5 times"
    assert calls == []
    assert kit.events(task_id, Task.EffectRecorded) == []


async def test_run_sync_runs_blocking_code_in_another_thread() -> None:
    seen: list[Any] = []

    async def blocking(ctx: StepContext) -> StepOutcome:
        seen.append(await ctx.run_sync(threading.get_ident))
        seen.append(await ctx.run_sync(sorted, [3, 1, 2], reverse=True))
        return Complete()

    kit = SkillKit(Skill("blocking", 1, [blocking]))
    task = await kit.run(kit.submit("blocking"))

    assert task.state == TaskState.COMPLETED
    assert seen[0] != threading.get_ident()
    assert seen[1] == [3, 2, 1]


async def test_a_renewal_that_fails_is_tried_again_and_the_step_runs_on() -> None:
    async def slow(ctx: StepContext) -> StepOutcome:
        await asyncio.sleep(0.1)  # long enough, with skip_time, for several renewals
        return Complete(message="done")

    kit = SkillKit(Skill("slow", 1, [slow]))
    save_each = kit.app.save_each
    failed: list[str] = []

    def flaky_save(*tasks: Task) -> list[Exception | None]:
        renewals = [t for t in tasks if any(isinstance(e, Task.LeaseExtended) for e in t.pending_events)]
        if renewals and not failed:
            failed.append("renewal")
            raise OSError("the database went away")
        return save_each(*tasks)

    kit.app.save_each = flaky_save  # type: ignore[method-assign]
    task = await kit.run(kit.submit("slow"), skip_time=True)

    assert failed == ["renewal"]
    assert task.state == TaskState.COMPLETED
    assert kit.events(task.id, Task.StepAttemptFailed) == []
    assert kit.events(task.id, Task.LeaseExtended), "the next renewal went through"
