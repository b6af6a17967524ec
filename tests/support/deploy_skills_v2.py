"""``deploy-demo`` v2, for the redeploy test: ``start, work, finish`` (no question any more).

Step 2 of v2 is ``finish``, where step 2 of v1 is ``slow``: a v1 task run on v2 would skip its
work, which the marks (``v2:<step>``) would show.
"""

from __future__ import annotations

from domain.skill import JSON, Complete, Continue, Skill, StepContext, StepOutcome

VERSION = "v2"


def _marked(checkpoint: JSON, mark: str) -> JSON:
    return {**checkpoint, "marks": [*checkpoint.get("marks", []), f"{VERSION}:{mark}"]}


async def start(ctx: StepContext) -> StepOutcome:
    """Mark the start."""
    return Continue(_marked({}, "start"))


async def work(ctx: StepContext) -> StepOutcome:
    """Do the (instant) work."""
    return Continue(_marked(ctx.checkpoint, "work"))


async def finish(ctx: StepContext) -> StepOutcome:
    """Complete with the marks as the artifact."""
    marks = [*ctx.checkpoint.get("marks", []), f"{VERSION}:finish"]
    artifact = {"artifactId": "marks", "name": "marks", "parts": [{"text": " ".join(marks)}]}
    return Complete(artifacts=[artifact], message=f"finished on {VERSION}")


SKILLS = [Skill(name="deploy-demo", version=2, steps=[start, work, finish])]
