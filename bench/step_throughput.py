"""Step-commit throughput: worker processes run many tasks of no-op steps; plain psycopg beside it.

longhaul: N tasks of the ``bench-noop-<K>`` skill (K no-op steps each) are submitted once W
``python -m longhaul.cli worker`` processes (LONGHAUL_WORKER_CONCURRENCY=C each) are up.
Throughput is the number of ``StepCompleted`` events per second between the first and the
last (event timestamps), and over the steady middle (10th to 90th percentile of commits).

Baseline (same run, same PostgreSQL): plain psycopg 3, one transaction = INSERT one event row +
versioned UPDATE of one task row (``... WHERE version = %s``), by 1/4/16 client threads (and
optionally as many clients as runners), measured before and after the longhaul run.

    uv run python -m bench.step_throughput                 # 2,000 tasks x 5 steps, 2 workers x 32
    uv run python -m bench.step_throughput --quick         # 400 tasks x 5 steps
    uv run python -m bench.step_throughput --py-spy DIR    # also profile worker 0 (py-spy on PATH)
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import subprocess
import tempfile
import threading
import time
import uuid
from pathlib import Path
from typing import Any

import psycopg
from eventsourcing.utils import get_topic
from psycopg import sql

from bench.common import (
    base_parser,
    fresh_schema,
    machine_info,
    percentile,
    table,
    utc_now,
    write_results,
)
from bench.noop_skills import noop_skill_name
from bench.pg_waits import WaitSampler, waits_table
from bench.process_cpu import tree_cpu_seconds
from bench.processes import WorkerProcess, worker_env
from domain.task import Task
from store.log import StoreConfig, TaskApplication

DBOS_STEPS_PER_S = 492  # BASELINE.md: DBOS Transact 3.4, 6-step workflow, sequential
TARGET_STEPS_PER_S = {1: 2_500, 2: 2_000}
"""Issue 10's targets by worker processes: one process 2,500 steps/s, two 2,000 (and >= half plain)."""

EVENT_PAYLOAD = json.dumps(
    {
        "epoch": 1,
        "step": 0,
        "checkpoint": {"done": 1},
        "lease_until": {"_type_": "datetime_iso", "_data_": "2026-12-01T10:00:30.000000+00:00"},
        "timestamp": {"_type_": "datetime_iso", "_data_": "2026-12-01T10:00:00.000000+00:00"},
        "originator_topic": "domain.task:Task",
    }
).encode()


# --------------------------------------------------------------------------- plain psycopg baseline


def setup_baseline(database_url: str, schema: str, tasks: int) -> None:
    ident = sql.Identifier(schema)
    with psycopg.connect(database_url, autocommit=True) as conn:
        conn.execute(
            sql.SQL(
                "CREATE TABLE {}.plain_events (id bigserial, task_id uuid NOT NULL, version int NOT NULL,"
                " topic text NOT NULL, state bytea NOT NULL, PRIMARY KEY (task_id, version))"
            ).format(ident)
        )
        conn.execute(
            sql.SQL(
                "CREATE TABLE {}.plain_tasks (task_id uuid PRIMARY KEY, version int NOT NULL,"
                " state text NOT NULL, next_step int NOT NULL, lease_until timestamptz)"
            ).format(ident)
        )
        with conn.cursor() as cur:
            cur.executemany(
                sql.SQL("INSERT INTO {}.plain_tasks VALUES (%s, 0, 'TASK_STATE_WORKING', 0, now())").format(
                    ident
                ),
                [(uuid.uuid4(),) for _ in range(tasks)],
            )


def plain_commits(database_url: str, schema: str, clients: int, seconds: float) -> dict[str, float]:
    """Commits per second of ``clients`` threads, each INSERT event + versioned UPDATE per commit."""
    ident = sql.Identifier(schema)
    with psycopg.connect(database_url) as conn:
        rows = conn.execute(sql.SQL("SELECT task_id, version FROM {}.plain_tasks").format(ident)).fetchall()
    per_client = [rows[i :: max(clients, 1)] for i in range(clients)]
    insert = sql.SQL(
        "INSERT INTO {}.plain_events (task_id, version, topic, state) VALUES (%s, %s, %s, %s)"
    ).format(ident)
    update = sql.SQL(
        "UPDATE {}.plain_tasks SET version = %s, next_step = next_step + 1, lease_until = now()"
        " WHERE task_id = %s AND version = %s"
    ).format(ident)
    counts = [0] * clients
    latencies: list[list[float]] = [[] for _ in range(clients)]
    start = threading.Barrier(clients + 1)
    stop = threading.Event()
    errors: list[BaseException] = []

    def client(index: int) -> None:
        try:
            mine: dict[uuid.UUID, int] = dict(per_client[index])
            ids = list(mine)
            with psycopg.connect(database_url) as conn:
                start.wait()
                i = 0
                while not stop.is_set():
                    task_id = ids[i % len(ids)]
                    version = mine[task_id]
                    t0 = time.perf_counter()
                    with conn.transaction(), conn.cursor() as cur:
                        cur.execute(
                            insert, (task_id, version + 1, "domain.task:Task.StepCompleted", EVENT_PAYLOAD)
                        )
                        cur.execute(update, (version + 1, task_id, version))
                        if cur.rowcount != 1:
                            raise RuntimeError("version conflict in the baseline")
                    latencies[index].append(time.perf_counter() - t0)
                    mine[task_id] = version + 1
                    counts[index] += 1
                    i += 1
        except BaseException as error:  # noqa: BLE001 - reported by the caller
            errors.append(error)
            stop.set()
            start.abort()  # a client that could not connect must not leave the others waiting

    threads = [threading.Thread(target=client, args=(i,), daemon=True) for i in range(clients)]
    for thread in threads:
        thread.start()
    try:
        start.wait()
    except threading.BrokenBarrierError:
        raise errors[0] if errors else RuntimeError("a baseline client failed") from None
    t0 = time.perf_counter()
    time.sleep(seconds)
    stop.set()
    for thread in threads:
        thread.join(30)
    elapsed = time.perf_counter() - t0
    if errors:
        raise errors[0]
    all_latencies = [x for lat in latencies for x in lat]
    return {
        "clients": clients,
        "commits_per_s": sum(counts) / elapsed,
        "p50_ms": percentile(all_latencies, 0.5) * 1000,
        "p99_ms": percentile(all_latencies, 0.99) * 1000,
    }


def run_baseline(args: argparse.Namespace, schema: str, label: str) -> list[dict[str, float]]:
    results = []
    for clients in args.baseline_clients:
        result = plain_commits(args.database_url, schema, clients, args.baseline_seconds)
        print(
            f"  plain psycopg ({label}), {clients:>3} clients: {result['commits_per_s']:8,.0f} commits/s"
            f"  (p50 {result['p50_ms']:.2f} ms)"
        )
        results.append(result)
    return results


# --------------------------------------------------------------------------- longhaul run


def submit_tasks(store: TaskApplication, count: int, skill: str, batch: int) -> list[uuid.UUID]:
    ids = []
    pending: list[Task] = []
    for _ in range(count):
        now = utc_now()
        task = Task.submit(
            task_id=uuid.uuid4(),
            now=now,
            tenant="bench",
            context_id=str(uuid.uuid4()),
            skill=skill,
            skill_version=1,
            message={"messageId": str(uuid.uuid4()), "role": "ROLE_USER", "parts": [{"text": "go"}]},
            params={},
        )
        pending.append(task)
        ids.append(task.id)
        if len(pending) >= batch:
            store.save_tasks(*pending)
            pending = []
    if pending:
        store.save_tasks(*pending)
    return ids


def completed_count(conn: psycopg.Connection[Any], schema: str) -> int:
    row = conn.execute(
        sql.SQL("SELECT count(*) FROM {}.longhaul_run_queue WHERE state = 'TASK_STATE_COMPLETED'").format(
            sql.Identifier(schema)
        )
    ).fetchone()
    return int(row[0]) if row else 0


def xact_counts(conn: psycopg.Connection[Any]) -> tuple[int, int]:
    """Database-wide ``(commits, rollbacks)`` so far (statistics lag by up to ~0.5 s)."""
    conn.execute("SELECT pg_stat_clear_snapshot()")
    row = conn.execute(
        "SELECT xact_commit, xact_rollback FROM pg_stat_database WHERE datname = current_database()"
    ).fetchone()
    return (int(row[0]), int(row[1])) if row else (0, 0)


def worker_events(store: TaskApplication) -> list[tuple[str, uuid.UUID, float]]:
    """``(event class, task id, timestamp)`` of every worker-side event, in log order."""
    topics = [
        get_topic(cls)
        for cls in (
            Task.LeaseGranted,
            Task.StepCompleted,
            Task.Completed,
            Task.LeaseReleased,
            Task.LeaseExtended,
        )
    ]
    events = []
    start = 1
    while True:
        notifications = store.recorder.select_notifications(start, 2000, topics=topics)
        if not notifications:
            break
        for notification in notifications:
            event = store.mapper.to_domain_event(notification)
            events.append((type(event).__name__, event.originator_id, event.timestamp.timestamp()))  # type: ignore[attr-defined]
        start = notifications[-1].id + 1
    return events


def where_time_goes(events: list[tuple[str, uuid.UUID, float]]) -> dict[str, float]:
    """How busy the runners were: tasks in flight, run time per task, time between a task's steps."""
    granted: dict[uuid.UUID, float] = {}
    last_commit: dict[uuid.UUID, float] = {}
    runs: list[float] = []
    gaps: list[float] = []
    claim_to_first: list[float] = []
    for name, task_id, ts in events:
        if name == "LeaseGranted":
            granted[task_id] = ts
            last_commit[task_id] = ts
        elif name == "StepCompleted":
            gap = ts - last_commit.get(task_id, ts)
            (claim_to_first if last_commit.get(task_id) == granted.get(task_id) else gaps).append(gap)
            last_commit[task_id] = ts
        elif name == "Completed" and task_id in granted:
            runs.append(ts - granted[task_id])
    stamps = [ts for _, _, ts in events]
    span = max(stamps) - min(stamps) if stamps else float("nan")
    return {
        "mean_tasks_in_flight": sum(runs) / span if span else float("nan"),
        "task_run_ms_median": percentile(runs, 0.5) * 1000,
        "claim_to_first_step_ms_median": percentile(claim_to_first, 0.5) * 1000,
        "step_to_step_ms_median": percentile(gaps, 0.5) * 1000,
        "step_to_step_ms_p90": percentile(gaps, 0.9) * 1000,
        "claims_per_s": sum(1 for n, _, _ in events if n == "LeaseGranted") / span if span else float("nan"),
    }


def rate(times: list[float], low: float = 0.0, high: float = 1.0) -> float:
    """Events per second between the ``low`` and ``high`` quantiles of ``times``."""
    if len(times) < 2:
        return float("nan")
    i, j = int(low * (len(times) - 1)), int(high * (len(times) - 1))
    span = times[j] - times[i]
    return (j - i) / span if span > 0 else float("nan")


def start_workers(args: argparse.Namespace, schema: str, workdir: Path) -> list[WorkerProcess]:
    env = worker_env(args.database_url, schema, concurrency=args.concurrency, lease_seconds=30)
    workers = []
    for i in range(args.workers):
        if args.instrument:
            env = {
                **env,
                "BENCH_STATS_FILE": str(workdir / f"worker{i}.stats.json"),
                "BENCH_WHATIF": args.what_if or "",
            }
        workers.append(WorkerProcess(env, workdir / f"worker{i}.log", instrumented=args.instrument))
    return workers


def run_longhaul(args: argparse.Namespace, schema: str, workdir: Path) -> dict[str, Any]:
    store = TaskApplication(StoreConfig(args.database_url, schema=schema, pool_size=2))
    skill = noop_skill_name(args.steps)
    monitor = psycopg.connect(args.database_url, autocommit=True)  # opened before the workers take theirs
    workers = start_workers(args, schema, workdir)
    spy: subprocess.Popen[bytes] | None = None
    try:
        for worker in workers:
            worker.wait_started()
        cpu0 = [tree_cpu_seconds(w.pid) for w in workers]
        xact0, rollback0 = xact_counts(monitor)
        if args.py_spy:
            spy = start_py_spy(args.py_spy, workers[0].pid)
        sampler = WaitSampler(args.database_url, schema=schema, every_s=0.01) if args.sample_pg else None
        if sampler is not None:
            sampler.start()
        t_submit = time.time()
        submit_tasks(store, args.tasks, skill, batch=500)
        t_submitted = time.time()
        deadline = time.monotonic() + args.timeout
        done = 0
        while done < args.tasks and time.monotonic() < deadline:
            time.sleep(0.2)
            done = completed_count(monitor, schema)
        t_done = time.time()
        if sampler is not None:
            sampler.stop()
        cpu1 = [tree_cpu_seconds(w.pid) for w in workers]
        xact1, rollback1 = xact_counts(monitor)
        if done < args.tasks:
            raise RuntimeError(f"only {done}/{args.tasks} tasks completed in {args.timeout} s; see {workdir}")
    finally:
        if spy is not None:
            stop_py_spy(spy)
        codes = [w.stop() for w in workers]
        monitor.close()
    events = worker_events(store)
    store.close()
    times: dict[str, list[float]] = {}
    for name, _, ts in events:
        times.setdefault(name, []).append(ts)
    times = {name: sorted(values) for name, values in times.items()}
    steps = times.get("StepCompleted", [])
    grants = times.get("LeaseGranted", [])
    wall = t_done - t_submit
    cpu = [(c1 - c0) / wall for c0, c1 in zip(cpu0, cpu1, strict=True)]
    n_worker_events = sum(len(v) for v in times.values())
    first, last = (steps[0], steps[-1]) if steps else (float("nan"), float("nan"))
    return {
        "tasks": args.tasks,
        "steps_per_task": args.steps,
        "workers": args.workers,
        "concurrency_per_worker": args.concurrency,
        "runners_total": args.workers * args.concurrency,
        "step_completed_events": len(steps),
        "lease_granted_events": len(grants),
        "worker_events": n_worker_events,
        "steps_per_s_first_to_last": rate(steps),
        "steps_per_s_p10_p90": rate(steps, 0.1, 0.9),
        "worker_events_per_s_first_to_last": n_worker_events / (last - first) if last > first else 0.0,
        "tasks_per_s_wall": args.tasks / wall,
        "submit_seconds": t_submitted - t_submit,
        "wall_seconds_submit_to_all_done": wall,
        "first_step_after_submit_s": first - t_submit,
        "worker_cpu_s_per_s": [round(c, 3) for c in cpu],
        "pg_xact_commits_per_s": (xact1 - xact0) / wall,
        "pg_xact_note": "database-wide transactions (reads, other sessions on the machine included)",
        "pg_rollbacks_per_s": (rollback1 - rollback0) / wall,
        "runners": where_time_goes(events),
        "pg_activity": waits_table(sampler.counts, sampler.samples, 0.0, top=20)
        if sampler is not None
        else [],
        "instrumented": [
            json.loads(path.read_text())
            for path in sorted(workdir.glob("worker*.stats.json"))
            if args.instrument
        ],
        "worker_exit_codes": codes,
    }


def start_py_spy(out_dir: str, pid: int) -> subprocess.Popen[bytes]:
    exe = shutil.which("py-spy")
    if exe is None:
        raise SystemExit("--py-spy needs py-spy on PATH (pip install py-spy into any venv)")
    Path(out_dir).mkdir(parents=True, exist_ok=True)
    out = Path(out_dir) / f"worker-{pid}"
    return subprocess.Popen(
        [
            exe,
            "record",
            "--pid",
            str(pid),
            "--rate",
            "200",
            "--format",
            "raw",
            "-o",
            f"{out}.txt",
            "--nonblocking",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )


def stop_py_spy(spy: subprocess.Popen[bytes]) -> None:
    spy.send_signal(2)  # SIGINT: py-spy writes its output and exits
    try:
        spy.wait(30)
    except subprocess.TimeoutExpired:
        spy.kill()


def instrumented_summary(index: int, stats: dict[str, Any], wall: float) -> str:
    """One line per instrumented worker: how busy its committer was and what each part cost."""

    def calls(name: str) -> float:
        return float(stats.get(f"{name}.calls", 0.0))

    def mean_ms(name: str) -> float:
        n = calls(name)
        return 1000 * float(stats.get(f"{name}.seconds", 0.0)) / n if n else float("nan")

    groups = calls("committer.save_each (group)")
    sizes = stats.get("group_sizes", {})
    tasks_saved = sum(int(k) * v for k, v in sizes.items())
    busy = float(stats.get("committer.save_each (group).seconds", 0.0)) / wall
    return (
        f"worker {index}: committer busy {busy:.0%} of the run; {groups:.0f} groups "
        f"(mean {tasks_saved / groups if groups else 0:.1f} tasks, "
        f"{mean_ms('committer.save_each (group)'):.1f} ms), "
        f"{calls('committer.group_had_conflict'):.0f} with a conflict ("
        f"{stats.get('committer.conflicting_tasks', 0):.0f} tasks lost) -> "
        f"{calls('store.save (one transaction)') + calls('store.append_each (one call)') - groups:.0f}"
        " extra single saves; "
        f"{calls('store.get'):.0f} loads ({mean_ms('store.get'):.1f} ms); "
        f"{calls('worker._claim'):.0f} claims, {calls('worker._claim.returned_none'):.0f} lost"
    )


def print_instrumented(longhaul: dict[str, Any]) -> None:
    if longhaul["pg_activity"]:
        print("PostgreSQL sessions of this run, mean count per sample (running or waiting on | statement):")
        for row in longhaul["pg_activity"]:
            print(f"  {row['share']:6.2f}  {row['wait']} | {row['statement']}")
    for i, stats in enumerate(longhaul["instrumented"]):
        print(instrumented_summary(i, stats, longhaul["wall_seconds_submit_to_all_done"]))


# --------------------------------------------------------------------------- main


def arguments(argv: list[str] | None = None) -> argparse.Namespace:
    """The command line's options (``argv``: these words instead of ``sys.argv``, for ``bench.targets``)."""
    parser = base_parser(__doc__ or "")
    parser.add_argument("--tasks", type=int, help="tasks to run (default 2,000; --quick 400)")
    parser.add_argument("--steps", type=int, default=5, help="no-op steps per task (1..20)")
    parser.add_argument("--workers", type=int, default=2, help="worker processes")
    parser.add_argument("--concurrency", type=int, default=32, help="LONGHAUL_WORKER_CONCURRENCY per worker")
    parser.add_argument("--baseline-clients", type=int, nargs="+", default=[1, 4, 16])
    parser.add_argument("--baseline-seconds", type=float, help="per client count (default 5; --quick 2)")
    parser.add_argument("--timeout", type=float, default=300.0, help="give up on the longhaul run after this")
    parser.add_argument("--py-spy", metavar="DIR", help="record worker 0 with py-spy (raw stacks) into DIR")
    parser.add_argument(
        "--instrument",
        action="store_true",
        help="run workers as bench.instrumented_worker (counters and timers; for analysis, not the figure)",
    )
    parser.add_argument(
        "--what-if",
        metavar="LIST",
        help="with --instrument: comma list of what-ifs (see bench/instrumented_worker.py)",
    )
    parser.add_argument(
        "--sample-pg",
        action="store_true",
        help="sample pg_stat_activity every 10 ms: lock waits, statements, idle-in-transaction",
    )
    parser.add_argument("--keep-logs", metavar="DIR", help="keep the worker logs in DIR")
    args = parser.parse_args(argv)
    if args.what_if and not args.instrument:
        parser.error("--what-if needs --instrument")
    if args.tasks is None:
        args.tasks = 400 if args.quick else 2_000
    if args.baseline_seconds is None:
        args.baseline_seconds = 2.0 if args.quick else 5.0
    return args


def run(args: argparse.Namespace) -> dict[str, Any]:
    """The baseline before, the longhaul run, the baseline after, printed: the results (the JSON's)."""
    info = machine_info(args.database_url)
    print(
        f"{args.tasks:,} tasks x {args.steps} no-op steps, {args.workers} workers x concurrency "
        f"{args.concurrency}; baseline clients {args.baseline_clients}, {args.baseline_seconds:.0f} s each"
    )

    with fresh_schema(args.database_url, "steps") as schema, tempfile.TemporaryDirectory() as tmp:
        workdir = Path(args.keep_logs) if args.keep_logs else Path(tmp)
        workdir.mkdir(parents=True, exist_ok=True)
        setup_baseline(args.database_url, schema, tasks=max(args.baseline_clients) * 20)
        before = run_baseline(args, schema, "before")
        print("  longhaul run ...")
        longhaul = run_longhaul(args, schema, workdir)
        after = run_baseline(args, schema, "after")

    return report(args, info, longhaul, before, after)


def main() -> None:
    args = arguments()
    write_results("step_throughput", run(args), args)


def report(
    args: argparse.Namespace,
    info: dict[str, Any],
    longhaul: dict[str, Any],
    before: list[dict[str, float]],
    after: list[dict[str, float]],
) -> dict[str, Any]:
    """Print the run's tables; its results."""
    baseline = []
    for b0, b1 in zip(before, after, strict=True):
        baseline.append(
            {
                "clients": b0["clients"],
                "commits_per_s_before": round(b0["commits_per_s"]),
                "commits_per_s_after": round(b1["commits_per_s"]),
                "commits_per_s": round(statistics.fmean([b0["commits_per_s"], b1["commits_per_s"]])),
                "p50_ms": round(statistics.fmean([b0["p50_ms"], b1["p50_ms"]]), 3),
            }
        )
    steps_per_s = longhaul["steps_per_s_first_to_last"]
    best = max(baseline, key=lambda b: b["commits_per_s"])
    ratio_best = steps_per_s / best["commits_per_s"]

    print()
    print(
        table(
            ["what", "figure", "unit"],
            [
                ["longhaul StepCompleted, first to last", steps_per_s, "steps/s"],
                ["longhaul StepCompleted, p10..p90 window", longhaul["steps_per_s_p10_p90"], "steps/s"],
                [
                    "longhaul worker events (grant+step+complete)",
                    longhaul["worker_events_per_s_first_to_last"],
                    "events/s",
                ],
                ["longhaul tasks, submit to all done", longhaul["tasks_per_s_wall"], "tasks/s"],
                *[
                    [
                        f"plain psycopg, {b['clients']} clients (mean of before/after)",
                        b["commits_per_s"],
                        "commits/s",
                    ]
                    for b in baseline
                ],
                ["DBOS (BASELINE.md, not this run)", DBOS_STEPS_PER_S, "steps/s"],
            ],
        )
    )
    print()
    rows = [
        [f"{b['clients']} clients", b["commits_per_s"], steps_per_s / b["commits_per_s"]] for b in baseline
    ]
    print(table(["ratio longhaul / plain psycopg", "plain commits/s", "ratio"], rows))
    print()
    print(f"worker CPU (s per s of wall time): {longhaul['worker_cpu_s_per_s']}")
    print(
        f"PostgreSQL commits/s during the run (whole database): {longhaul['pg_xact_commits_per_s']:,.0f}; "
        f"rollbacks/s (read-only transactions and conflicts): {longhaul['pg_rollbacks_per_s']:,.1f}"
    )
    r = longhaul["runners"]
    print(
        f"runners: {r['mean_tasks_in_flight']:.1f} in flight on average (of {longhaul['runners_total']}); "
        f"claims {r['claims_per_s']:,.0f}/s; medians per task: claim->first step "
        f"{r['claim_to_first_step_ms_median']:.1f} ms, step->step {r['step_to_step_ms_median']:.1f} ms "
        f"(p90 {r['step_to_step_ms_p90']:.1f}), whole run {r['task_run_ms_median']:.0f} ms"
    )
    print_instrumented(longhaul)
    print(f"ratio to DBOS's {DBOS_STEPS_PER_S} steps/s: {steps_per_s / DBOS_STEPS_PER_S:.2f}x")
    target = TARGET_STEPS_PER_S.get(args.workers, TARGET_STEPS_PER_S[2])
    met = steps_per_s >= target
    goal = ratio_best >= 0.5
    print(
        f"target >= {target:,} steps/s ({args.workers} workers): "
        f"{'MET' if met else 'MISSED'} ({steps_per_s:,.0f})"
    )
    print(
        f"goal >= half of the best plain-psycopg figure ({best['commits_per_s']:,} at "
        f"{best['clients']} clients): {'MET' if goal else 'MISSED'} (ratio {ratio_best:.2f})"
    )
    return {
        "benchmark": "step_throughput",
        "machine": info,
        "params": {k: v for k, v in vars(args).items() if k not in ("database_url",)},
        "longhaul": longhaul,
        "plain_psycopg": baseline,
        "ratio_to_best_plain": round(ratio_best, 3),
        "ratio_to_plain_by_clients": {
            str(b["clients"]): round(steps_per_s / b["commits_per_s"], 3) for b in baseline
        },
        "dbos_steps_per_s_reference": DBOS_STEPS_PER_S,
        "ratio_to_dbos": round(steps_per_s / DBOS_STEPS_PER_S, 2),
        "target_steps_per_s": target,
        "target_met": met,
        "goal_half_plain_met": goal,
    }


if __name__ == "__main__":
    main()
