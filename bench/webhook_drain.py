"""The dispatcher's CPU per delivery, draining a stream that already holds every event.

``bench.webhook_latency`` measures the dispatcher's CPU at a steady rate, where a batch holds a
task or two and the figure moves with the machine's load. Here the work is fixed: ``--tasks``
tasks (each ``Submitted``, ``PushConfigSet``, ``LeaseGranted``, ``Completed``: two webhooks) are
committed and carried to NATS by a ``longhaul relay`` of this checkout, which then stops; only
then does a ``longhaul dispatcher`` of the tree under test start, and it records and POSTs
every delivery to ``bench.webhook_receiver`` (aiohttp, a process of its own). Measured from its
intake's first pull (the log line "following stream") to the last POST at the receiver: the
dispatcher process's user + system CPU per delivery and its deliveries per second.

    uv run python -m bench.webhook_drain --tree /tmp/base [--tree DIR ...] [--rounds 3 --tasks 3000]

Each round runs every tree once, in turn (the order turned around every other round), each on
a fresh schema and stream; the medians over the rounds are printed per tree.
"""

from __future__ import annotations

import asyncio
import statistics
import tempfile
import threading
import time
import uuid
from pathlib import Path
from typing import Any

import nats
import psutil

from bench.common import (
    REPO_ROOT,
    base_parser,
    fresh_schema,
    machine_info,
    stream_deleted,
    table,
    write_results,
)
from bench.process_cpu import tree_cpu_seconds
from bench.webhook_latency import ProcessReceiver, _commit, new_task, service_env, start, stop, wait_for
from store.log import StoreConfig, TaskApplication

COMMITTERS = 4
EVENTS_PER_TASK = 4
DELIVERIES_PER_TASK = 2


def commit_all(store: TaskApplication, url: str, tasks: int) -> None:
    """Commit ``tasks`` tasks from ``COMMITTERS`` threads, as fast as they go."""

    def commit(count: int) -> None:
        for _ in range(count):
            store.save_tasks(new_task(url))

    threads = [threading.Thread(target=commit, args=(tasks // COMMITTERS,)) for _ in range(COMMITTERS)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()


async def stream_messages(nats_url: str, stream: str) -> int:
    client = await nats.connect(nats_url)
    try:
        info = await client.jetstream().stream_info(stream)
        return int(info.state.messages)
    finally:
        await client.close()


def drain(database_url: str, nats_url: str, tree: Path, tasks: int) -> dict[str, float]:
    """One run: fill a fresh stream, then let the dispatcher of ``tree`` deliver all of it."""
    token = uuid.uuid4().hex[:8]
    stream, prefix = f"BENCH_WD_{token}", f"benchwd{token}"
    logs = Path(tempfile.mkdtemp(prefix="bench-webhook-drain-"))
    tasks -= tasks % COMMITTERS
    with stream_deleted(nats_url, stream), fresh_schema(database_url, "whdrain") as schema:
        store = TaskApplication(StoreConfig(database_url=database_url, schema=schema, pool_size=COMMITTERS))
        receiver = ProcessReceiver()
        env = service_env(database_url, schema, nats_url, stream, prefix)
        relay = start("relay", env, logs / "relay.log", REPO_ROOT)
        try:
            wait_for(logs / "relay.log", "is the leader")
            commit_all(store, receiver.url, tasks)
            deadline = time.monotonic() + 120
            while asyncio.run(stream_messages(nats_url, stream)) < tasks * EVENTS_PER_TASK:
                if time.monotonic() > deadline:
                    raise TimeoutError("the relay did not publish every event in 120 s")
                time.sleep(0.2)
            stop(relay)
            dispatcher = start("dispatcher", env, logs / "dispatcher.log", tree)
            try:
                wait_for(logs / "dispatcher.log", "following stream")
                cpu_at, began = tree_cpu_seconds(dispatcher.pid), time.monotonic()
                want = tasks * DELIVERIES_PER_TASK
                deadline = time.monotonic() + 300
                while receiver.count() < want:
                    if time.monotonic() > deadline:
                        raise TimeoutError(f"{receiver.count()} of {want} webhooks arrived in 300 s")
                    time.sleep(0.05)
                wall = time.monotonic() - began
                cpu = tree_cpu_seconds(dispatcher.pid) - cpu_at
            finally:
                stop(dispatcher)
        finally:
            stop(relay)
            receiver.close()
            store.close()
    return {
        "deliveries": float(want),
        "cpu_s": round(cpu, 3),
        "wall_s": round(wall, 3),
        "cpu_ms_per_delivery": round(1000 * cpu / want, 4),
        "deliveries_per_s": round(want / wall, 1),
    }


def main() -> None:
    parser = base_parser(__doc__.splitlines()[0] if __doc__ else "webhook drain")
    parser.add_argument("--nats-url", default="nats://127.0.0.1:4222")
    parser.add_argument(
        "--tree", type=Path, action="append", default=[], help="a checkout whose dispatcher to run (repeat)"
    )
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--tasks", type=int, default=3000, help="tasks per run (two webhooks each)")
    args = parser.parse_args()
    if args.quick:
        args.rounds, args.tasks = 1, 400
    trees = [t.resolve() for t in args.tree] or [REPO_ROOT]
    info = machine_info(args.database_url)
    runs: dict[str, list[dict[str, float]]] = {str(t): [] for t in trees}
    for number in range(args.rounds):
        for tree in trees if number % 2 == 0 else list(reversed(trees)):
            run = drain(args.database_url, args.nats_url, tree, args.tasks)
            load = psutil.getloadavg()
            run["load_1m"] = round(load[0], 2)
            runs[str(tree)].append(run)
            print(f"round {number + 1}, {tree} ({_commit(tree)}): {run}", flush=True)
    rows: list[list[Any]] = []
    summary: dict[str, dict[str, Any]] = {}
    for tree in trees:
        done = runs[str(tree)]
        median = {
            k: statistics.median(r[k] for r in done) for k in ("cpu_ms_per_delivery", "deliveries_per_s")
        }
        summary[str(tree)] = {"commit": _commit(tree), **median, "runs": done}
        rows.append([f"{tree} ({_commit(tree)})", median["cpu_ms_per_delivery"], median["deliveries_per_s"]])
    print(table(["dispatcher of", "CPU ms / delivery (median)", "deliveries/s (median)"], rows))
    write_results("webhook_drain", {"machine": info, "tasks": args.tasks, "trees": summary}, args)


if __name__ == "__main__":
    main()
