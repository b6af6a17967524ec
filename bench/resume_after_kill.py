"""Resume after SIGKILL: kill a worker mid-step, measure kill -> next commit by another worker.

A ``bench-slow`` task ticks: every 100 ms its long step commits a sub-step (``CheckpointSaved``),
and every commit extends the lease to commit time + lease length. Worker A runs it; after a few
ticks A gets SIGKILL at a random moment between two commits. Worker B then claims the task once
A's lease has passed (``LeaseGranted``) and goes on from the stored tick (its first
``CheckpointSaved``). All times come from the event timestamps and the moment of the kill.

Two ways to have worker B: ``standby`` (already running when A dies: the usual deployment) and
``cold`` (started just after the kill, so its start-up overlaps the lease wait). The reference
is the lease length: the target is kill -> next commit <= lease + 1 s.

Leases of 2 s and 5 s, three runs of each mode (``--quick``: 2 s, one run).
"""

from __future__ import annotations

import contextlib
import itertools
import random
import statistics
import tempfile
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bench.common import Options, fresh_schema, longhaul_env, new_task, running, table, utc_now
from store.log import StoreConfig, TaskApplication

SLACK_S = 1.0
MODES = ("standby", "cold")


def commits_by(store: TaskApplication, task_id: uuid.UUID, pid: int) -> list[Any]:
    """The task's events written under a lease held by the worker with process id ``pid``."""
    events: list[Any] = list(store.history(task_id))
    epochs = {e.epoch for e in events if type(e).__name__ == "LeaseGranted" and f":{pid}:" in e.worker}
    return [e for e in events if getattr(e, "epoch", None) in epochs]


def ticks(events: list[Any]) -> list[Any]:
    return [e for e in events if type(e).__name__ == "CheckpointSaved"]


def wait_for(predicate: Callable[[], list[Any]], timeout: float, what: str) -> list[Any]:
    deadline = time.monotonic() + timeout
    while not (value := predicate()):
        if time.monotonic() > deadline:
            raise TimeoutError(f"timed out waiting for {what}")
        time.sleep(0.01)
    return value


def cancel(store: TaskApplication, task_id: uuid.UUID) -> None:
    """Cancel the task unless it ended."""
    task = store.get(task_id)
    if not task.is_terminal:
        task.cancel(now=utc_now(), reason="benchmark run over")
        store.save_tasks(task)


def one_run(
    options: Options, store: TaskApplication, schema: str, workdir: Path, lease: float, mode: str, n: int
) -> dict[str, Any]:
    """Worker A runs a ticking task, is killed between two ticks; worker B (``standby``: already
    running; ``cold``: started after the kill) resumes it: the times from the kill."""
    env = longhaul_env(
        options.database_url, schema, worker_concurrency=4, lease_seconds=lease, worker_grace_seconds=2
    )
    task = new_task("bench-slow", {"ticks": 10_000, "tick_ms": 100})
    store.save_tasks(task)
    a_log, b_log = (workdir / f"{w}-{lease}-{mode}-{n}.log" for w in "ab")
    with contextlib.ExitStack() as stack:
        a = stack.enter_context(running("worker", env, a_log))
        wait_for(lambda: ticks(commits_by(store, task.id, a.pid))[2:], 60, "worker A to commit a few ticks")
        b_start = 0.0
        if mode == "standby":
            b = stack.enter_context(running("worker", env, b_log))
        time.sleep(random.uniform(0.0, 0.1))  # anywhere between two tick commits
        t_kill = time.time()
        a.kill()
        a.wait(10)
        if mode == "cold":
            began = time.monotonic()
            b = stack.enter_context(running("worker", env, b_log))
            b_start = time.monotonic() - began
        stack.callback(cancel, store, task.id)  # before B stops: it stops at once
        b_pid = b.pid

        def resumed() -> list[Any]:
            mine = commits_by(store, task.id, b_pid)
            return mine if ticks(mine) else []

        by_b = wait_for(resumed, lease + 60, "worker B to resume")
        by_a = commits_by(store, task.id, a.pid)
    a_lease_end = max(e.timestamp.timestamp() for e in by_a) + lease
    grant = next(e for e in by_b if type(e).__name__ == "LeaseGranted").timestamp.timestamp()
    first_commit = ticks(by_b)[0].timestamp.timestamp()
    return {
        "lease_s": lease,
        "mode": mode,
        "kill_to_grant_s": grant - t_kill,
        "kill_to_first_commit_s": first_commit - t_kill,
        "grant_after_lease_end_s": grant - a_lease_end,
        "worker_b_startup_s": b_start,
        "resumed_at_tick": ticks(by_b)[0].checkpoint.get("tick", 0),
        "last_tick_of_a": ticks(by_a)[-1].checkpoint.get("tick", 0),
    }


def run(options: Options) -> dict[str, Any]:
    """Every (lease, mode) run, printed: the results."""
    leases, runs_each = ([2.0], 1) if options.quick else ([2.0, 5.0], 3)
    runs: list[dict[str, Any]] = []
    with fresh_schema(options.database_url, "resume") as schema, tempfile.TemporaryDirectory() as tmp:
        store = TaskApplication(StoreConfig(options.database_url, schema=schema, pool_size=2))
        with contextlib.closing(store):
            for lease, mode, n in itertools.product(leases, MODES, range(runs_each)):
                runs.append(one_run(options, store, schema, Path(tmp), lease, mode, n))
    summary = []
    for lease, mode in itertools.product(leases, MODES):
        first = [r["kill_to_first_commit_s"] for r in runs if r["lease_s"] == lease and r["mode"] == mode]
        summary.append(
            {
                "lease_s": lease,
                "mode": mode,
                "runs": len(first),
                "kill_to_first_commit_median_s": round(statistics.median(first), 3),
                "kill_to_first_commit_max_s": round(max(first), 3),
                "reference_lease_plus_1s": lease + SLACK_S,
            }
        )
    headers = ["lease s", "mode", "runs", "kill -> commit median s", "max s", "lease + 1 s"]
    print(table(headers, [list(entry.values()) for entry in summary]))
    return {"runs": runs, "summary": summary}
