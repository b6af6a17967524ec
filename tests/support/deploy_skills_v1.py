"""``deploy-demo`` v1, for the redeploy test: ``start, wait_for_go, slow, finish``.

Every step adds a mark ``v1:<step>`` to the checkpoint's ``marks`` and the final artifact lists
them, so the log shows which version ran each step. ``slow`` commits a sub-step per tick
(``ticks`` of ``tick_ms``, parameters) and goes on from the stored tick after a restart.
"""

from __future__ import annotations

import asyncio
from datetime import timedelta

from domain.skill import JSON, AskInput, Complete, Continue, Skill, StepContext, StepOutcome

VERSION = "v1"


def _marked(checkpoint: JSON, mark: str) -> JSON:
    return {**checkpoint, "marks": [*checkpoint.get("marks", []), f"{VERSION}:{mark}"]}


async def start(ctx: StepContext) -> StepOutcome:
    """Mark the start."""
    return Continue(_marked({}, "start"))


async def wait_for_go(ctx: StepContext) -> StepOutcome:
    """Pause until someone says go (a deadline of an hour)."""
    return AskInput("go?", _marked(ctx.checkpoint, "wait_for_go"), deadline=timedelta(hours=1))


async def slow(ctx: StepContext) -> StepOutcome:
    """Tick ``ticks`` times, one sub-step commit each, from the stored tick."""
    total = int(ctx.params.get("ticks", 12))
    delay = float(ctx.params.get("tick_ms", 500)) / 1000
    checkpoint = ctx.checkpoint
    ticks = int(checkpoint.get("ticks", 0))
    while ticks < total:
        await asyncio.sleep(delay)
        ticks += 1
        checkpoint = {**checkpoint, "ticks": ticks}
        await ctx.commit(checkpoint)
    return Continue(_marked(checkpoint, "slow"))


async def finish(ctx: StepContext) -> StepOutcome:
    """Complete with the marks as the artifact."""
    marks = [*ctx.checkpoint.get("marks", []), f"{VERSION}:finish"]
    artifact = {"artifactId": "marks", "name": "marks", "parts": [{"text": " ".join(marks)}]}
    return Complete(artifacts=[artifact], message=f"finished on {VERSION}")


SKILLS = [Skill(name="deploy-demo", version=1, steps=[start, wait_for_go, slow, finish])]
