"""Test skills for the crash, race and pause tests (``LONGHAUL_SKILL_MODULES='["tests.crash.skills"]'``).

- ``crash-noop``: three steps that only continue (the race test).
- ``crash-ticker``: one long step that commits a sub-step every ``tick_ms`` until ``ticks`` ticks
  (``{"ticks": n}`` in the checkpoint), then a step that completes. A resumed step goes on from the
  stored tick, so the log shows exactly which worker (epoch) committed which tick. With
  ``shield``, a sub-step commit in flight goes on to the store even when the step is cancelled,
  so only the store's fence can refuse it.
- ``crash-sleeper``: commits ``{"started": true}``, then sleeps ``sleep_s``; if its coroutine is
  cancelled it writes ``cancelled`` to the file ``marker`` (a parameter) before re-raising.
- ``crash-asker``: asks a question with the deadline ``deadline_s`` (none: the service's maximum
  pause) and ``on_deadline``, then completes with the answer's text.
- ``crash-chunker``: emits one artifact in ``chunks`` chunks (default 20), one every ``chunk_ms``
  (default 100), each with its count in the same commit, then completes (the stream tests).
- ``crash-suicide``: a step that SIGKILLs its own worker process, every time it runs.
- ``crash-hang``: a step that awaits for ever (only its timeout ends it).
- ``crash-blocker``: the first run (no file at ``marker`` yet) blocks its worker's event loop with
  ``time.sleep(block_s)``; every run then revokes one grant at the fake IAM (``iam``) through
  ``ctx.once``, so the IAM's call log shows which workers called.
"""

from __future__ import annotations

import asyncio
import os
import signal
import time
from datetime import timedelta
from pathlib import Path
from typing import Any

import httpx

from domain.skill import AskInput, Complete, Continue, Skill, StepContext, StepOutcome
from longhaul.demo.fake_iam import IDEMPOTENCY_HEADER, TASK_HEADER, grants_for


async def _noop(ctx: StepContext) -> StepOutcome:
    done = int(ctx.checkpoint.get("done", 0))
    return Continue({"done": done + 1})


async def _tick(ctx: StepContext) -> StepOutcome:
    total = int(ctx.params.get("ticks", 20))
    delay = float(ctx.params.get("tick_ms", 200)) / 1000
    shield = bool(ctx.params.get("shield", False))
    ticks = int(ctx.checkpoint.get("ticks", 0))
    while ticks < total:
        await asyncio.sleep(delay)
        ticks += 1
        if ticks < total:  # the last tick's commit is the step's own
            commit = ctx.commit({"ticks": ticks})
            await (asyncio.shield(commit) if shield else commit)
    return Continue({"ticks": ticks})


async def _done(ctx: StepContext) -> StepOutcome:
    return Complete(message=f"done after {ctx.checkpoint.get('ticks', 0)} ticks")


async def _sleep(ctx: StepContext) -> StepOutcome:
    await ctx.commit({"started": True})
    try:
        await asyncio.sleep(float(ctx.params.get("sleep_s", 600)))
    except asyncio.CancelledError:
        Path(str(ctx.params["marker"])).write_text("cancelled")  # noqa: ASYNC240 - tiny, and must not await
        raise
    return Continue({"started": True, "slept": True})


async def _ask(ctx: StepContext) -> StepOutcome:
    seconds = ctx.params.get("deadline_s")
    deadline = None if seconds is None else timedelta(seconds=float(seconds))
    on_deadline = str(ctx.params.get("on_deadline", "fail"))
    return AskInput("Anything to add?", {"asked": True}, deadline=deadline, on_deadline=on_deadline)


async def _answered(ctx: StepContext) -> StepOutcome:
    parts = ctx.latest_input.get("parts", [])
    text = " ".join(str(p["text"]) for p in parts if isinstance(p, dict) and "text" in p)
    return Complete(message=f"answered: {text}")


async def _chunks(ctx: StepContext) -> StepOutcome:
    total = int(ctx.params.get("chunks", 20))
    delay = float(ctx.params.get("chunk_ms", 100)) / 1000
    emitted = int(ctx.checkpoint.get("emitted", 0))
    while emitted < total:
        await asyncio.sleep(delay)
        artifact = {"artifactId": "chunks", "name": "chunks", "parts": [{"text": f"chunk {emitted} "}]}
        emitted += 1
        await ctx.emit_artifact(
            artifact, append=emitted > 1, last_chunk=emitted == total, checkpoint={"emitted": emitted}
        )
    return Complete(message=f"{total} chunks")


async def kill_own_worker(ctx: StepContext) -> StepOutcome:
    os.kill(os.getpid(), signal.SIGKILL)
    await asyncio.sleep(60)  # never reached: the process is gone
    return Complete(message="survived")


async def hang(ctx: StepContext) -> StepOutcome:
    await asyncio.Event().wait()
    return Complete(message="never")


async def block_then_revoke(ctx: StepContext) -> StepOutcome:
    marker = Path(str(ctx.params["marker"]))
    if not marker.exists():  # noqa: ASYNC240 - the blocking is the point of this skill
        marker.write_text(str(os.getpid()))  # noqa: ASYNC240
        time.sleep(float(ctx.params.get("block_s", 6)))  # noqa: ASYNC251 - blocks the loop on purpose
    grant = grants_for(1)[0]

    async def revoke(key: str) -> Any:
        async with httpx.AsyncClient(timeout=10) as client:
            answer = await client.post(
                f"{ctx.params['iam']}/revocations",
                json={"system": 1, "grant_id": grant["grant_id"], "user": grant["user"]},
                headers={IDEMPOTENCY_HEADER: key, TASK_HEADER: ctx.task_id},
            )
            answer.raise_for_status()
            return answer.json()

    revoked = await ctx.once("revoke", revoke)
    return Complete(message=f"revoked {revoked['revocation_id']} in {os.getpid()}")


SKILLS = [
    Skill(name="crash-noop", version=1, steps=[_noop, _noop, _noop], description="three no-op steps"),
    Skill(name="crash-ticker", version=1, steps=[_tick, _done], description="a long step of sub-commits"),
    Skill(name="crash-sleeper", version=1, steps=[_sleep, _done], description="a step that sleeps long"),
    Skill(name="crash-asker", version=1, steps=[_ask, _answered], description="asks, then completes"),
    Skill(name="crash-chunker", version=1, steps=[_chunks], description="an artifact in timed chunks"),
    Skill(name="crash-suicide", version=1, steps=[kill_own_worker], description="kills its own worker"),
    Skill(name="crash-hang", version=1, steps=[hang], description="a step that never returns"),
    Skill(name="crash-blocker", version=1, steps=[block_then_revoke], description="blocks the loop once"),
]
