"""Claim latency with 100,000 paused tasks in the store against 1,000, and an idle worker's CPU.

A claim is what a worker does: the run-queue ``claimable`` query, loading the task, and
appending ``LeaseGranted`` at the version read (one transaction with its run-queue row). Each
timed claim takes a task submitted just before; afterwards the task is canceled, so the set of
runnable tasks stays the same. Two stores (schemas) of the same database hold 1,000 and 100,000
paused (INPUT_REQUIRED) tasks; claims alternate between them, so both see the same machine
noise; the ratio of the two p99s is the figure (target <= 2).

Then one worker process (``bench.instrumented_worker``: the CLI worker with counters) idles on
each store while every task is paused: its CPU time (`bench.process_cpu`) over ``--idle-seconds`` gives CPU
seconds per second, with the number of run-queue claim queries it made per second. A last
window repeats the 100,000 case while another schema of the same database appends
(``--foreign-rate``/s): the store's NOTIFY channel is named after the table, not the schema.

    uv run python -m bench.claim_latency            # 1,000 vs 100,000 paused, 300 claims each
    uv run python -m bench.claim_latency --quick    # 1,000 vs 10,000 paused, 100 claims, 3 s idle
"""

from __future__ import annotations

import json
import tempfile
import threading
import time
import uuid
from datetime import timedelta
from pathlib import Path
from typing import Any

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
from bench.process_cpu import tree_cpu_seconds
from bench.processes import WorkerProcess, worker_env
from domain.task import Task
from store.log import StoreConfig, TaskApplication

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


def add_paused(store: TaskApplication, count: int, batch: int) -> float:
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


PARTS = ("claim", "query", "load", "append", "due_pauses")


def one_claim(store: TaskApplication) -> dict[str, float]:
    """Submit a task, then claim it as a worker does; returns the seconds each part took."""
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
    return {"claim": t3 - t0, "query": t1 - t0, "load": t2 - t1, "append": t3 - t2, "due_pauses": t4 - t3}


def time_claims(stores: dict[str, TaskApplication], claims: int) -> dict[str, dict[str, list[float]]]:
    """``claims`` claims per store, alternating between the stores so both see the same noise."""
    parts: dict[str, dict[str, list[float]]] = {label: {p: [] for p in PARTS} for label in stores}
    for i in range(claims + 5):
        for label, store in stores.items():
            timing = one_claim(store)
            if i >= 5:  # the first few warm the connections and prepared statements
                for name, value in timing.items():
                    parts[label][name].append(value)
    return parts


def read_stats(path: Path) -> dict[str, Any]:
    for _ in range(50):
        try:
            return dict(json.loads(path.read_text()))
        except (OSError, ValueError):
            time.sleep(0.05)
    return {}


def foreign_appends(database_url: str, rate: float, stop: threading.Event, counter: list[int]) -> None:
    """Submit tasks in another schema of the same database at ``rate`` per second until ``stop``."""
    with fresh_schema(database_url, "claim_other") as other:
        store = TaskApplication(StoreConfig(database_url, schema=other, pool_size=1))
        try:
            while not stop.is_set():
                store.save_tasks(new_task(utc_now()))
                counter[0] += 1
                stop.wait(1.0 / rate)
        finally:
            store.close()


def idle_cpu(
    args: Any, schema: str, workdir: Path, label: str, foreign_rate: float = 0.0
) -> dict[str, float]:
    """CPU of an idle (instrumented) worker over the window, and how often it queried the run queue.

    With ``foreign_rate``, another store in another schema of the same database appends meanwhile.
    """
    stats_path = workdir / f"idle-{label}.stats.json"
    env = worker_env(args.database_url, schema, concurrency=8, lease_seconds=30)
    env.update({"BENCH_STATS_FILE": str(stats_path), "BENCH_STATS_EVERY": "0.5"})
    worker = WorkerProcess(env, workdir / f"idle-{label}.log", instrumented=True)
    stop = threading.Event()
    counter = [0]
    noise = threading.Thread(target=foreign_appends, args=(args.database_url, foreign_rate, stop, counter))
    try:
        worker.wait_started()
        if foreign_rate:
            noise.start()
        time.sleep(args.settle_seconds)
        s0, c0, t0, n0 = read_stats(stats_path), tree_cpu_seconds(worker.pid), time.monotonic(), counter[0]
        time.sleep(args.idle_seconds)
        time.sleep(0.6)  # one more stats dump covers the window
        s1, c1, t1, n1 = read_stats(stats_path), tree_cpu_seconds(worker.pid), time.monotonic(), counter[0]
    finally:
        stop.set()
        if noise.is_alive():
            noise.join(10)
        worker.stop()
    cpu = c1 - c0
    key = "run_queue.claimable.calls"
    return {
        "seconds": t1 - t0,
        "cpu_seconds": cpu,
        "cpu_s_per_s": cpu / (t1 - t0),
        "claim_queries_per_s": (s1.get(key, 0.0) - s0.get(key, 0.0)) / (t1 - t0),
        "foreign_appends_per_s": (n1 - n0) / (t1 - t0),
    }


def main() -> None:
    parser = base_parser(__doc__ or "")
    parser.add_argument("--small", type=int, default=1_000, help="paused tasks in the first phase")
    parser.add_argument("--large", type=int, help="paused tasks in the second phase (default 100,000)")
    parser.add_argument("--claims", type=int, help="timed claims per phase (default 300)")
    parser.add_argument("--batch", type=int, default=1_000, help="tasks per save_tasks call when filling")
    parser.add_argument("--idle-seconds", type=float, help="idle-worker CPU window (default 10)")
    parser.add_argument("--settle-seconds", type=float, default=2.0)
    parser.add_argument(
        "--foreign-rate",
        type=float,
        default=20.0,
        help="appends/s in another schema for the last idle window",
    )
    args = parser.parse_args()
    args.large = args.large or (10_000 if args.quick else 100_000)
    args.claims = args.claims or (100 if args.quick else 300)
    args.idle_seconds = args.idle_seconds or (3.0 if args.quick else 10.0)
    info = machine_info(args.database_url)

    phases: dict[str, Any] = {}
    with (
        fresh_schema(args.database_url, "claim_small") as small_schema,
        fresh_schema(args.database_url, "claim_large") as large_schema,
        tempfile.TemporaryDirectory() as tmp,
    ):
        schemas = {"small": small_schema, "large": large_schema}
        sizes = {"small": args.small, "large": args.large}
        stores = {
            k: TaskApplication(StoreConfig(args.database_url, schema=v, pool_size=2))
            for k, v in schemas.items()
        }
        try:
            for label, store in stores.items():
                fill = add_paused(store, sizes[label], args.batch)
                print(f"{sizes[label]:,} paused tasks in store '{label}' ({fill:.1f} s)")
                analyze(args.database_url, schemas[label])
                phases[label] = {"paused_tasks": sizes[label], "fill_seconds": round(fill, 2)}
            parts = time_claims(stores, args.claims)
            for label in stores:
                phases[label].update({name: summary_ms(values) for name, values in parts[label].items()})
                phases[label]["idle_worker"] = idle_cpu(args, schemas[label], Path(tmp), label)
            phases["large"]["idle_worker_foreign_appends"] = idle_cpu(
                args, schemas["large"], Path(tmp), "large-foreign", foreign_rate=args.foreign_rate
            )
        finally:
            for store in stores.values():
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
                "part (ms, interleaved)",
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
    idle_rows = [
        (f"{small['paused_tasks']:,} paused", small["idle_worker"]),
        (f"{large['paused_tasks']:,} paused", large["idle_worker"]),
        (
            f"{large['paused_tasks']:,} paused + appends in another schema",
            large["idle_worker_foreign_appends"],
        ),
    ]
    print(
        table(
            [
                "idle worker, every task paused",
                "window s",
                "CPU s",
                "CPU s/s",
                "claim queries/s",
                "foreign appends/s",
            ],
            [
                [
                    name,
                    w["seconds"],
                    w["cpu_seconds"],
                    w["cpu_s_per_s"],
                    w["claim_queries_per_s"],
                    w["foreign_appends_per_s"],
                ]
                for name, w in idle_rows
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
