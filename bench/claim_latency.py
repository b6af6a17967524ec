"""Claim latency with 100,000 paused tasks in the store against 1,000, and an idle worker's CPU.

A claim is what a worker does: the run-queue ``claimable`` query, loading the task, and
appending ``LeaseGranted`` at the version read (one transaction with its run-queue row). Each
timed claim takes a task submitted just before; afterwards the task is canceled, so the set of
runnable tasks stays the same. The store first holds 1,000 paused (INPUT_REQUIRED) tasks, then
is filled to 100,000 in the same run; the ratio of the two p99s is the figure (target <= 2).

Then one ``python -m longhaul.cli worker`` process idles while every task is paused; its CPU
time (psutil) over ``--idle-seconds`` gives CPU seconds per second, at 1,000 and 100,000 paused.

    uv run python -m bench.claim_latency            # 1,000 vs 100,000 paused, 300 claims each
    uv run python -m bench.claim_latency --quick    # 1,000 vs 10,000 paused, 100 claims, 3 s idle
"""

from __future__ import annotations

import tempfile
import time
import uuid
from datetime import timedelta
from pathlib import Path
from typing import Any

import psutil
import psycopg
from psycopg import sql

from bench.common import (
    Stopwatch,
    base_parser,
    fresh_schema,
    machine_info,
    summary_ms,
    table,
    utc_now,
    write_results,
)
from bench.processes import WorkerProcess, worker_env
from domain.task import Task
from projections.eventstore import StoreConfig, TaskStore

TARGET_RATIO = 2.0


def new_task(now: Any) -> Task:
    return Task.submit(
        task_id=uuid.uuid4(),
        now=now,
        tenant="bench",
        context_id=str(uuid.uuid4()),
        skill="bench-noop-1",
        skill_version=1,
        message={"messageId": str(uuid.uuid4()), "role": "ROLE_USER", "parts": [{"text": "approve?"}]},
        params={},
    )


def add_paused(store: TaskStore, count: int, batch: int) -> float:
    """Save ``count`` tasks paused in INPUT_REQUIRED (submitted, leased, asked), ``batch`` per call."""
    with Stopwatch() as sw:
        done = 0
        while done < count:
            now = utc_now()
            tasks = []
            for _ in range(min(batch, count - done)):
                task = new_task(now)
                epoch = task.grant_lease(worker="bench", now=now, until=now + timedelta(minutes=5))
                task.request_input(
                    epoch=epoch,
                    now=now,
                    step=0,
                    checkpoint={},
                    question={
                        "messageId": str(uuid.uuid4()),
                        "role": "ROLE_AGENT",
                        "parts": [{"text": "ok?"}],
                    },
                    deadline=now + timedelta(days=7),
                )
                tasks.append(task)
            store.save_tasks(*tasks)
            done += len(tasks)
    return sw.seconds


def analyze(database_url: str, schema: str) -> None:
    """What autovacuum would do after a bulk load: fresh planner statistics."""
    with psycopg.connect(database_url, autocommit=True) as conn:
        for table_name in ("longhaul_run_queue", "longhaul_events"):
            conn.execute(sql.SQL("ANALYZE {}.{}").format(sql.Identifier(schema), sql.Identifier(table_name)))


def time_claims(store: TaskStore, claims: int) -> dict[str, list[float]]:
    parts: dict[str, list[float]] = {"claim": [], "query": [], "load": [], "append": [], "due_pauses": []}
    for i in range(claims + 5):
        fresh = new_task(utc_now())
        store.save_tasks(fresh)
        t0 = time.perf_counter()
        now = utc_now()
        candidates = store.run_queue.claimable(now, 4, [("bench-noop-1", 1)])
        t1 = time.perf_counter()
        if candidates[:1] != [fresh.id]:
            raise RuntimeError(f"the fresh task should head the queue, got {candidates}")
        task = store.get(candidates[0])
        t2 = time.perf_counter()
        task.grant_lease(worker="bench", now=now, until=now + timedelta(seconds=30))
        store.save_tasks(task)
        t3 = time.perf_counter()
        store.run_queue.due_pauses(utc_now(), 100)
        t4 = time.perf_counter()
        task.cancel(now=utc_now(), reason="benchmark claim done")
        store.save_tasks(task)
        if i >= 5:  # the first few warm the connections and prepared statements
            for name, value in (
                ("claim", t3 - t0),
                ("query", t1 - t0),
                ("load", t2 - t1),
                ("append", t3 - t2),
                ("due_pauses", t4 - t3),
            ):
                parts[name].append(value)
    return parts


def idle_cpu(args: Any, schema: str, workdir: Path, label: str) -> dict[str, float]:
    env = worker_env(args.database_url, schema, concurrency=8, lease_seconds=30)
    worker = WorkerProcess(env, workdir / f"idle-{label}.log")
    try:
        worker.wait_started()
        time.sleep(args.settle_seconds)
        proc = psutil.Process(worker.pid)
        c0, t0 = proc.cpu_times(), time.monotonic()
        time.sleep(args.idle_seconds)
        c1, t1 = proc.cpu_times(), time.monotonic()
    finally:
        worker.stop()
    cpu = (c1.user + c1.system) - (c0.user + c0.system)
    return {"seconds": t1 - t0, "cpu_seconds": cpu, "cpu_s_per_s": cpu / (t1 - t0)}


def main() -> None:
    parser = base_parser(__doc__ or "")
    parser.add_argument("--small", type=int, default=1_000, help="paused tasks in the first phase")
    parser.add_argument("--large", type=int, help="paused tasks in the second phase (default 100,000)")
    parser.add_argument("--claims", type=int, help="timed claims per phase (default 300)")
    parser.add_argument("--batch", type=int, default=1_000, help="tasks per save_tasks call when filling")
    parser.add_argument("--idle-seconds", type=float, help="idle-worker CPU window (default 10)")
    parser.add_argument("--settle-seconds", type=float, default=2.0)
    args = parser.parse_args()
    args.large = args.large or (10_000 if args.quick else 100_000)
    args.claims = args.claims or (100 if args.quick else 300)
    args.idle_seconds = args.idle_seconds or (3.0 if args.quick else 10.0)
    info = machine_info(args.database_url)

    phases: dict[str, Any] = {}
    with fresh_schema(args.database_url, "claim") as schema, tempfile.TemporaryDirectory() as tmp:
        store = TaskStore(StoreConfig(args.database_url, schema=schema, pool_size=2))
        try:
            paused = 0
            for label, size in (("small", args.small), ("large", args.large)):
                fill = add_paused(store, size - paused, args.batch)
                print(f"{size:,} paused tasks in the store (added {size - paused:,} in {fill:.1f} s)")
                paused = size
                analyze(args.database_url, schema)
                parts = time_claims(store, args.claims)
                idle = idle_cpu(args, schema, Path(tmp), label)
                phases[label] = {
                    "paused_tasks": size,
                    "fill_seconds": round(fill, 2),
                    **{name: summary_ms(values) for name, values in parts.items()},
                    "idle_worker": idle,
                }
        finally:
            store.close()

    small, large = phases["small"], phases["large"]
    ratio_p99 = large["claim"]["p99_ms"] / small["claim"]["p99_ms"]
    ratio_p50 = large["claim"]["median_ms"] / small["claim"]["median_ms"]
    rows = []
    for name in ("claim", "query", "load", "append", "due_pauses"):
        s, g = small[name], large[name]
        rows.append(
            [name, s["median_ms"], s["p99_ms"], g["median_ms"], g["p99_ms"], g["p99_ms"] / s["p99_ms"]]
        )
    print()
    print(
        table(
            [
                "part (ms)",
                f"p50 @{args.small:,}",
                f"p99 @{args.small:,}",
                f"p50 @{args.large:,}",
                f"p99 @{args.large:,}",
                "p99 ratio",
            ],
            rows,
        )
    )
    print()
    print(
        table(
            ["idle worker, every task paused", "window s", "CPU s", "CPU s per s"],
            [
                [
                    f"{p['paused_tasks']:,} paused",
                    p["idle_worker"]["seconds"],
                    p["idle_worker"]["cpu_seconds"],
                    p["idle_worker"]["cpu_s_per_s"],
                ]
                for p in (small, large)
            ],
        )
    )
    met = ratio_p99 <= TARGET_RATIO
    print()
    print(
        f"claim p99 ratio {args.large:,} / {args.small:,} paused: {ratio_p99:.2f} "
        f"(p50 ratio {ratio_p50:.2f}); target <= {TARGET_RATIO:.0f}: {'MET' if met else 'MISSED'}"
    )
    write_results(
        "claim_latency",
        {
            "benchmark": "claim_latency",
            "machine": info,
            "params": {k: v for k, v in vars(args).items() if k != "database_url"},
            "phases": phases,
            "claim_p99_ratio": round(ratio_p99, 3),
            "claim_p50_ratio": round(ratio_p50, 3),
            "target_ratio": TARGET_RATIO,
            "target_met": met,
        },
        args,
    )


if __name__ == "__main__":
    main()
