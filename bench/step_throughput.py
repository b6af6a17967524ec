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
import tempfile
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import psycopg
from eventsourcing.utils import get_topic
from psycopg import sql

from bench.common import Options, fresh_schema, longhaul_env, new_task, running, table
from bench.pg_waits import WaitSampler, waits_table
from bench.process_cpu import tree_cpu_seconds
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


# ----------------------------------------------------------------------------- plain psycopg


def setup_plain(database_url: str, schema: str, tasks: int) -> None:
    """The baseline's two tables in ``schema``, ``tasks`` task rows in one."""
    with psycopg.connect(database_url, autocommit=True) as conn:
        conn.execute(
            sql.SQL(
                "CREATE TABLE {schema}.plain_events (id bigserial, task_id uuid NOT NULL,"
                " version int NOT NULL, topic text NOT NULL, state bytea NOT NULL,"
                " PRIMARY KEY (task_id, version));"
                " CREATE TABLE {schema}.plain_tasks (task_id uuid PRIMARY KEY, version int NOT NULL,"
                " state text NOT NULL, next_step int NOT NULL, lease_until timestamptz);"
                " INSERT INTO {schema}.plain_tasks"
                " SELECT gen_random_uuid(), 0, 'TASK_STATE_WORKING', 0, now() FROM generate_series(1, {n})"
            ).format(schema=sql.Identifier(schema), n=tasks)
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
    with ExitStack() as stack:  # every client's connection open before the clock starts
        connections = [stack.enter_context(psycopg.connect(database_url)) for _ in range(clients)]
        began = time.perf_counter()

        def client(index: int) -> int:
            """The commits of one client until ``seconds`` have passed (a version conflict: an error)."""
            mine: dict[uuid.UUID, int] = dict(rows[index::clients])
            ids = list(mine)
            conn = connections[index]
            commits = 0
            while time.perf_counter() - began < seconds:
                task_id = ids[commits % len(ids)]
                version = mine[task_id]
                with conn.transaction(), conn.cursor() as cur:
                    cur.execute(
                        insert, (task_id, version + 1, "domain.task:Task.StepCompleted", EVENT_PAYLOAD)
                    )
                    cur.execute(update, (version + 1, task_id, version))
                    if cur.rowcount != 1:
                        raise RuntimeError("version conflict in the baseline")
                mine[task_id] = version + 1
                commits += 1
            return commits

        with ThreadPoolExecutor(clients) as pool:
            commits = sum(pool.map(client, range(clients)))  # a client's error is raised here
        return commits / (time.perf_counter() - began)


# ----------------------------------------------------------------------------- longhaul


def completed(store: TaskApplication) -> int:
    return store.run_queue.state_counts().get("TASK_STATE_COMPLETED", 0)


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
    with ExitStack() as stack:
        processes = [
            stack.enter_context(running("worker", env, workdir / f"worker{i}.log")) for i in range(workers)
        ]
        cpu_before = [tree_cpu_seconds(p.pid) for p in processes]
        began = time.time()
        with WaitSampler(options.database_url, schema=schema, every_s=0.05) as sampler:
            for start in range(0, tasks, 500):  # 500 a commit
                store.save_tasks(*(new_task(f"bench-noop-{STEPS}") for _ in range(min(500, tasks - start))))
            deadline = time.monotonic() + TIMEOUT_S
            while (done := completed(store)) < tasks and time.monotonic() < deadline:
                time.sleep(0.2)
        wall = time.time() - began
        cpu = [
            round((tree_cpu_seconds(p.pid) - c) / wall, 3) for p, c in zip(processes, cpu_before, strict=True)
        ]
        if done < tasks:
            raise RuntimeError(f"only {done}/{tasks} tasks completed in {TIMEOUT_S:.0f} s; see {workdir}")
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
        "pg_waits": waits_table(sampler.counts, sampler.samples, top=8),
    }


def run(options: Options) -> dict[str, Any]:
    """Plain psycopg before, both longhaul runs, plain psycopg after, printed: the results."""
    # tasks per run, and seconds per plain-psycopg client count
    tasks, plain_seconds = (400, 2.0) if options.quick else (2000, 5.0)
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
        {"clients": c, "commits_per_s": round((b + a) / 2), "before": round(b), "after": round(a)}
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
