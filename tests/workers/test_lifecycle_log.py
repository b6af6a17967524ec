"""One INFO line per step of a task's life, with its id: what an operator reads to follow a task."""

from __future__ import annotations

import logging
from datetime import timedelta

import pytest

from domain.skill import AskInput, Complete, Skill, StepContext, StepOutcome
from longhaul.testing import SkillKit


async def _ask(ctx: StepContext) -> AskInput:
    return AskInput("Go ahead?", {}, deadline=timedelta(hours=1))


async def _finish(ctx: StepContext) -> StepOutcome:
    await ctx.commit({"half": True})
    return Complete(message="done")


ASKING = Skill("asking", 1, [_ask, _finish])


def _lines(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == "store.log.application"]


async def test_every_lifecycle_step_is_one_line(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO)
    with SkillKit(ASKING) as kit:
        task_id = kit.submit("asking", text="hi")
        await kit.run(task_id)
        kit.answer(task_id, text="yes")
        await kit.run(task_id, crash_after_commit=1)  # killed after its checkpoint: the lease stays
        kit.advance(seconds=1)
        await kit.run(task_id)

    lines = _lines(caplog)
    assert lines[0] == f"task {task_id} submitted: skill asking v1, tenant default"
    assert lines[1] == f"task {task_id} claimed by kit-worker-1 at epoch 1"
    assert lines[2].startswith(f"task {task_id} paused: TASK_STATE_INPUT_REQUIRED until 20")
    assert lines[3] == f"task {task_id} resumed: answer received, runnable again at step 1"
    assert lines[4] == f"task {task_id} claimed by kit-worker-2 at epoch 2"
    assert lines[5].startswith(
        f"task {task_id} claimed by kit-worker-3 at epoch 3: take-over after an expired lease of "
        "kit-worker-2 (epoch 2, ended 20"
    )
    assert lines[6] == f"task {task_id} finished: TASK_STATE_COMPLETED"
    assert len(lines) == 7
    records = [r for r in caplog.records if r.name == "store.log.application"]
    assert all(r.task_id == str(task_id) for r in records)  # type: ignore[attr-defined]
    assert records[5].worker == "kit-worker-3"  # type: ignore[attr-defined]
    assert records[5].epoch == 3  # type: ignore[attr-defined]


async def test_a_cancel_and_an_unanswered_pause_finish_the_task(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO)
    with SkillKit(ASKING) as kit:
        canceled = kit.submit("asking", text="one")
        kit.cancel(canceled)
        waiting = kit.submit("asking", text="two")
        await kit.run(waiting)
        kit.advance(hours=2)
        kit.sweep()

    lines = _lines(caplog)
    assert f"task {canceled} finished: TASK_STATE_CANCELED (canceled by the client)" in lines
    assert f"task {waiting} finished: TASK_STATE_FAILED (no answer before the pause's deadline)" in lines
