"""Step-commit throughput: worker processes run many tasks of no-op steps; plain psycopg beside it.

longhaul: N tasks of the ``bench-noop-<K>`` skill (K no-op steps each) are submitted once W
``longhaul worker`` processes (``LONGHAUL_WORKER_CONCURRENCY`` C each) are up. The figure is
``StepCompleted`` events per second between the first and the last (event timestamps). Two runs:
two workers of 32 runners and one of 64. What the workers' PostgreSQL sessions wait on over the
run is sampled every 50 ms (``bench.pg_waits``).

Baseline, in the same run on the same PostgreSQL: plain psycopg 3, one transaction = INSERT one
event row + versioned UPDATE of one task row (``... WHERE version = %s``), by 1, 4 and 16 client
threads, measured before and after the longhaul runs (the mean of the two).
"""

from __future__ import annotations

import json
import statistics
import tempfile
import threading
import time
import uuid
from pathlib import Path
from typing import Any

import psycopg
from eventsourcing.utils import get_topic
from psycopg import sql

from bench.common import Options, fresh_schema, longhaul_env, new_task, table
from bench.noop_skills import noop_skill_name
from bench.pg_waits import WaitSampler, waits_table
from bench.process_cpu import tree_cpu_seconds
from bench.processes import WorkerProcess
from domain.task import Task
from store.log import StoreConfig, TaskApplication

STEPS = 5
RUNS = {"two_workers": (2, 32), "one_worker": (1, 64)}
"""Each run's worker processes and runners per process."""
PLAIN_CLIENTS = [1, 4, 16]
TIMEOUT_S = 300.0
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


def sizes(quick: bool) -> tuple[int, float]:
    """Tasks per run, and seconds per plain-psycopg client count."""
    return (400, 2.0) if quick else (2000, 5.0)


# ----------------------------------------------------------------------------- plain psycopg


def setup_plain(database_url: str, schema: str, tasks: int) -> None:
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


def plain_commits(database_url: str, schema: str, clients: int, seconds: float) -> float:
    """Commits per second of ``clients`` threads, each an INSERT event + versioned UPDATE per commit."""
    ident = sql.Identifier(schema)
    with psycopg.connect(database_url) as conn:
        rows = conn.execute(sql.SQL("SELECT task_id, version FROM {}.plain_tasks").format(ident)).fetchall()
    insert = sql.SQL(
        "INSERT INTO {}.plain_events (task_id, version, topic, state) VALUES (%s, %s, %s, %s)"
    ).format(ident)
    update = sql.SQL(
        "UPDATE {}.plain_tasks SET version = %s, next_step = next_step + 1, lease_until = now()"
        " WHERE task_id = %s AND version = %s"
    ).format(ident)
    counts = [0] * clients
    start = threading.Barrier(clients + 1)
    stop = threading.Event()
    errors: list[BaseException] = []

    def client(index: int) -> None:
        try:
            mine: dict[uuid.UUID, int] = dict(rows[index::clients])
            ids = list(mine)
            with psycopg.connect(database_url) as conn:
                start.wait()
                while not stop.is_set():
                    task_id = ids[counts[index] % len(ids)]
                    version = mine[task_id]
                    with conn.transaction(), conn.cursor() as cur:
                        cur.execute(
                            insert, (task_id, version + 1, "domain.task:Task.StepCompleted", EVENT_PAYLOAD)
                        )
                        cur.execute(update, (version + 1, task_id, version))
                        if cur.rowcount != 1:
                            raise RuntimeError("version conflict in the baseline")
                    mine[task_id] = version + 1
                    counts[index] += 1
        except BaseException as error:  # noqa: BLE001 - raised by the caller
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
    began = time.perf_counter()
    time.sleep(seconds)
    stop.set()
    for thread in threads:
        thread.join(30)
    if errors:
        raise errors[0]
    return sum(counts) / (time.perf_counter() - began)


# ----------------------------------------------------------------------------- longhaul


def submit_tasks(store: TaskApplication, count: int, skill: str, batch: int = 500) -> None:
    for start in range(0, count, batch):
        store.save_tasks(*(new_task(skill) for _ in range(min(batch, count - start))))


def completed_count(conn: psycopg.Connection[Any], schema: str) -> int:
    row = conn.execute(
        sql.SQL("SELECT count(*) FROM {}.longhaul_run_queue WHERE state = 'TASK_STATE_COMPLETED'").format(
            sql.Identifier(schema)
        )
    ).fetchone()
    return int(row[0]) if row else 0


def step_times(store: TaskApplication) -> list[float]:
    """The timestamps of every ``StepCompleted`` in the log, in order."""
    topics = [get_topic(Task.StepCompleted)]
    stamps: list[float] = []
    start = 1
    while notifications := store.recorder.select_notifications(start, 2000, topics=topics):
        stamps += [store.mapper.to_domain_event(n).timestamp.timestamp() for n in notifications]  # type: ignore[attr-defined]
        start = notifications[-1].id + 1
    return sorted(stamps)


def run_longhaul(
    options: Options, schema: str, workdir: Path, tasks: int, workers: int, concurrency: int
) -> dict[str, Any]:
    """Start the workers, submit the tasks, wait for all of them: steps/s and where time went."""
    store = TaskApplication(StoreConfig(options.database_url, schema=schema, pool_size=2))
    env = longhaul_env(
        options.database_url, schema, worker_concurrency=concurrency, lease_seconds=30, worker_grace_seconds=2
    )
    monitor = psycopg.connect(options.database_url, autocommit=True)  # before the workers take theirs
    processes = [WorkerProcess(env, workdir / f"worker{i}.log") for i in range(workers)]
    try:
        for worker in processes:
            worker.wait_started()
        cpu_before = [tree_cpu_seconds(w.pid) for w in processes]
        began = time.time()
        with WaitSampler(options.database_url, schema=schema, every_s=0.05) as sampler:
            submit_tasks(store, tasks, noop_skill_name(STEPS))
            deadline = time.monotonic() + TIMEOUT_S
            while (done := completed_count(monitor, schema)) < tasks and time.monotonic() < deadline:
                time.sleep(0.2)
        wall = time.time() - began
        cpu = [
            round((tree_cpu_seconds(w.pid) - c) / wall, 3) for w, c in zip(processes, cpu_before, strict=True)
        ]
        if done < tasks:
            raise RuntimeError(f"only {done}/{tasks} tasks completed in {TIMEOUT_S:.0f} s; see {workdir}")
    finally:
        for worker in processes:
            worker.stop()
        monitor.close()
    steps = step_times(store)
    store.close()
    span = steps[-1] - steps[0] if len(steps) > 1 else float("nan")
    return {
        "workers": workers,
        "concurrency_per_worker": concurrency,
        "tasks": tasks,
        "steps_per_task": STEPS,
        "steps_per_s_first_to_last": round((len(steps) - 1) / span, 1) if span > 0 else float("nan"),
        "tasks_per_s_wall": round(tasks / wall, 1),
        "worker_cpu_cores": cpu,
        "pg_waits": waits_table(sampler.counts, sampler.samples, 0.0, top=8),
    }


def run(options: Options) -> dict[str, Any]:
    """Plain psycopg before, both longhaul runs, plain psycopg after, printed: the results."""
    tasks, plain_seconds = sizes(options.quick)
    runs: dict[str, Any] = {}
    with fresh_schema(options.database_url, "steps") as schema, tempfile.TemporaryDirectory() as tmp:
        setup_plain(options.database_url, schema, tasks=max(PLAIN_CLIENTS) * 20)
        before = [plain_commits(options.database_url, schema, c, plain_seconds) for c in PLAIN_CLIENTS]
        for name, (workers, concurrency) in RUNS.items():
            with fresh_schema(options.database_url, "steps") as run_schema:
                runs[name] = run_longhaul(options, run_schema, Path(tmp), tasks, workers, concurrency)
            print(f"  {name}: {runs[name]['steps_per_s_first_to_last']:,.0f} steps/s", flush=True)
        after = [plain_commits(options.database_url, schema, c, plain_seconds) for c in PLAIN_CLIENTS]
    plain = [
        {
            "clients": c,
            "commits_per_s": round(statistics.fmean([b, a])),
            "before": round(b),
            "after": round(a),
        }
        for c, b, a in zip(PLAIN_CLIENTS, before, after, strict=True)
    ]
    rows = [
        [
            f"longhaul, {r['workers']} x {r['concurrency_per_worker']}",
            r["steps_per_s_first_to_last"],
            "steps/s",
        ]
        for r in runs.values()
    ]
    rows += [[f"plain psycopg, {p['clients']} clients", p["commits_per_s"], "commits/s"] for p in plain]
    print(table(["what", "figure", "unit"], rows))
    return {"runs": runs, "plain_psycopg": plain}
