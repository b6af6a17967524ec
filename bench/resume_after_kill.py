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

import os
import random
import signal
import statistics
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

from bench.common import Options, fresh_schema, longhaul_env, new_task, table, utc_now
from bench.processes import WorkerProcess
from store.application import TaskApplication
from store.config import StoreConfig

SLACK_S = 1.0
MODES = ("standby", "cold")


def submit_slow(store: TaskApplication) -> uuid.UUID:
    task = new_task("bench-slow", {"ticks": 10_000, "tick_ms": 100})
    store.save_tasks(task)
    return task.id


def events_of(store: TaskApplication, task_id: uuid.UUID) -> list[Any]:
    return list(store.history(task_id))


def commits_by(events: list[Any], pid: int) -> list[Any]:
    """Events written under a lease held by the worker with process id ``pid``."""
    owner_epochs = {e.epoch for e in events if type(e).__name__ == "LeaseGranted" and f":{pid}:" in e.worker}
    return [e for e in events if getattr(e, "epoch", None) in owner_epochs]


def wait_for(predicate: Any, timeout: float, what: str) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.01)
    raise TimeoutError(f"timed out waiting for {what}")


def one_run(
    options: Options, store: TaskApplication, schema: str, workdir: Path, lease: float, mode: str, n: int
) -> dict[str, Any]:
    env = longhaul_env(
        options.database_url, schema, worker_concurrency=4, lease_seconds=lease, worker_grace_seconds=2
    )
    task_id = submit_slow(store)
    a = WorkerProcess(env, workdir / f"a-{lease}-{mode}-{n}.log")
    b: WorkerProcess | None = None
    try:
        a.wait_started()
        wait_for(
            lambda: (
                len(
                    [
                        e
                        for e in commits_by(events_of(store, task_id), a.pid)
                        if type(e).__name__ == "CheckpointSaved"
                    ]
                )
                >= 3
            ),
            60,
            "worker A to commit a few ticks",
        )
        b_start = 0.0
        if mode == "standby":
            b = WorkerProcess(env, workdir / f"b-{lease}-{mode}-{n}.log")
            b.wait_started()
        time.sleep(random.uniform(0.0, 0.1))  # anywhere between two tick commits
        t_kill = time.time()
        os.kill(a.pid, signal.SIGKILL)
        a.popen.wait(10)
        if mode == "cold":
            b = WorkerProcess(env, workdir / f"b-{lease}-{mode}-{n}.log")
            b_start = b.wait_started()
        assert b is not None
        b_pid = b.pid

        def resumed() -> list[Any]:
            mine = commits_by(events_of(store, task_id), b_pid)
            return mine if any(type(e).__name__ == "CheckpointSaved" for e in mine) else []

        by_b = wait_for(resumed, lease + 60, "worker B to resume")
        history = events_of(store, task_id)
    finally:
        a.kill()
        if b is not None:
            task = store.get(task_id)
            if not task.is_terminal:
                task.cancel(now=utc_now(), reason="benchmark run over")
                store.save_tasks(task)
            b.stop()
    by_a = commits_by(history, a.pid)
    last_a = max(e.timestamp.timestamp() for e in by_a)
    a_lease_end = last_a + lease
    grant = next(e for e in by_b if type(e).__name__ == "LeaseGranted").timestamp.timestamp()
    first_commit = next(e for e in by_b if type(e).__name__ == "CheckpointSaved").timestamp.timestamp()
    ticks_a = max(e.checkpoint.get("tick", 0) for e in by_a if type(e).__name__ == "CheckpointSaved")
    ticks_b = min(e.checkpoint.get("tick", 0) for e in by_b if type(e).__name__ == "CheckpointSaved")
    return {
        "lease_s": lease,
        "mode": mode,
        "kill_to_grant_s": grant - t_kill,
        "kill_to_first_commit_s": first_commit - t_kill,
        "lease_left_at_kill_s": a_lease_end - t_kill,
        "grant_after_lease_end_s": grant - a_lease_end,
        "worker_b_startup_s": b_start,
        "resumed_at_tick": ticks_b,
        "last_tick_of_a": ticks_a,
        "within_lease_plus_1s": (first_commit - t_kill) <= lease + SLACK_S,
    }


def run(options: Options) -> dict[str, Any]:
    """Every (lease, mode) run, printed: the results."""
    leases, runs_each = ([2.0], 1) if options.quick else ([2.0, 5.0], 3)
    runs: list[dict[str, Any]] = []
    with fresh_schema(options.database_url, "resume") as schema, tempfile.TemporaryDirectory() as tmp:
        store = TaskApplication(StoreConfig(options.database_url, schema=schema, pool_size=2))
        try:
            for lease in leases:
                for mode in MODES:
                    runs += [
                        one_run(options, store, schema, Path(tmp), lease, mode, n) for n in range(runs_each)
                    ]
        finally:
            store.close()
    summary = []
    for lease in leases:
        for mode in MODES:
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
    print(
        table(
            ["lease s", "mode", "runs", "kill -> commit median s", "max s", "lease + 1 s"],
            [list(entry.values()) for entry in summary],
        )
    )
    return {"runs": runs, "summary": summary}
