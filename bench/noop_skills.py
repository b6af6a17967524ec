"""Skills for the benchmarks (``LONGHAUL_SKILL_MODULES='["bench.noop_skills"]'``).

- ``bench-noop-<k>`` for k in 1..20: ``k`` steps that only continue (a counter in the checkpoint);
  the last commit of the last step also completes the task. Measures the runtime, not the skill.
- ``bench-slow``: steps that tick: every ``tick_ms`` (param, default 100) a sub-step commit, for
  ``ticks`` ticks (param, default 50) per step, ``steps`` steps (3). Used by the SIGKILL benchmark,
  so that the first commit of a resumed step follows its claim within one tick.
"""

from __future__ import annotations

import asyncio

from domain.skill import Continue, Skill, StepContext, StepOutcome

MAX_NOOP_STEPS = 20
SLOW_STEPS = 3


async def _noop(ctx: StepContext) -> StepOutcome:
    return Continue({"done": int(ctx.checkpoint.get("done", 0)) + 1})


async def _slow(ctx: StepContext) -> StepOutcome:
    ticks = int(ctx.params.get("ticks", 50))
    delay = float(ctx.params.get("tick_ms", 100)) / 1000
    done = int(ctx.checkpoint.get("tick", 0))
    step = int(ctx.checkpoint.get("step", 0))
    while done < ticks:
        await asyncio.sleep(delay)
        done += 1
        if done < ticks:
            await ctx.commit({"step": step, "tick": done})
    return Continue({"step": step + 1, "tick": 0})


SKILLS = [
    *(
        Skill(name=f"bench-noop-{k}", version=1, steps=[_noop] * k, description=f"{k} no-op steps")
        for k in range(1, MAX_NOOP_STEPS + 1)
    ),
    Skill(name="bench-slow", version=1, steps=[_slow] * SLOW_STEPS, description="slow ticking steps"),
]
