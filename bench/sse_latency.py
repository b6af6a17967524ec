"""Commit -> SSE frame received, under sustained load, beside raw NATS latency in the same run.

``--streams`` tasks are submitted and started, and one ``SubscribeToTask`` stream is opened on
each through a ``longhaul gateway`` process (a ``longhaul relay`` process publishes the log).
Then progress reports are committed at ``--rate`` per second, spread over the tasks, from a few
threads; each one becomes a ``statusUpdate`` frame on its task's stream, whose ``id:`` (the task
version) names the commit it shows. The commit time is taken right after the commit returns,
the arrival time when the client has parsed the frame; both are this machine's wall clock.

The baseline, in the same run and at the same rate (``bench.webhook_latency.Watcher``): a core
NATS publish on a plain subject to a subscriber in this process, and a JetStream publish -> ack.
Target (issue 8): commit -> SSE frame p99 under 10 ms at 200 events/s.

    uv run python -m bench.sse_latency            # 200 events/s over 50 streams for 30 s
    uv run python -m bench.sse_latency --quick    # 8 s
"""

from __future__ import annotations

import argparse
import asyncio
import json
import tempfile
import threading
import time
import uuid
from datetime import timedelta
from pathlib import Path
from typing import Any

import httpx
import nats
import psutil

from api.sse import read_events
from bench.common import (
    REPO_ROOT,
    base_parser,
    free_port,
    fresh_schema,
    machine_info,
    stream_deleted,
    summary_ms,
    table,
    utc_now,
    write_results,
)
from bench.webhook_latency import Arrivals, Watcher, service_env, start, stop, wait_for
from domain.task import Task
from store.application import TaskApplication
from store.config import StoreConfig

TARGET_P99_MS = 10.0
WARMUP_S = 2.0
SUBMITTERS = 4
TENANT = "bench"


def started_task() -> Task:
    """A task submitted and leased, not saved yet."""
    now = utc_now()
    task = Task.submit(
        task_id=uuid.uuid4(),
        now=now,
        tenant=TENANT,
        context_id=str(uuid.uuid4()),
        skill="bench-noop-1",
        skill_version=1,
        message={"messageId": str(uuid.uuid4()), "role": "ROLE_USER", "parts": [{"text": "go"}]},
        params={},
    )
    task.grant_lease(worker="bench", now=now, until=now + timedelta(hours=1))
    return task


def commit_progress(
    store: TaskApplication,
    tasks: list[Task],
    rate: float,
    seconds: float,
    committed: dict[tuple[str, int], float],
) -> None:
    """Commit one progress report at a time, round robin over ``tasks``, at ``rate`` per second."""
    began = time.monotonic()
    next_at = began
    turn = 0
    while time.monotonic() - began < seconds:
        task = tasks[turn % len(tasks)]
        turn += 1
        task.report_progress(epoch=task.lease_epoch, now=utc_now(), message={"parts": [{"text": f"p{turn}"}]})
        store.save_tasks(task)
        committed[(str(task.id), task.version)] = time.time()
        next_at += 1 / rate
        time.sleep(max(0.0, next_at - time.monotonic()))


async def read_stream(client: httpx.AsyncClient, task: Task, received: dict[tuple[str, int], float]) -> None:
    """Follow one task's stream until it ends, noting when each frame arrived."""
    body = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "SubscribeToTask",
        "params": {"id": str(task.id), "tenant": TENANT},
    }
    async with client.stream("POST", "/a2a/jsonrpc", json=body, headers={"A2A-Version": "1.0"}) as response:
        response.raise_for_status()
        async for event in read_events(response.aiter_lines()):
            if event.id is not None:
                received[(str(task.id), event.id)] = time.time()


def arguments() -> argparse.Namespace:
    parser = base_parser(__doc__.splitlines()[0] if __doc__ else "SSE latency")
    parser.add_argument("--nats-url", default="nats://127.0.0.1:4222")
    parser.add_argument("--rate", type=float, default=200.0, help="progress reports committed per second")
    parser.add_argument("--streams", type=int, default=50, help="tasks, each with one stream")
    parser.add_argument("--seconds", type=float, default=30.0, help="how long the load lasts")
    args = parser.parse_args()
    if args.quick:
        args.seconds = min(args.seconds, 8.0)
    return args


def main() -> None:  # noqa: PLR0915 - one run, start to end, as the other benchmarks
    args = arguments()
    info = machine_info(args.database_url)
    token = uuid.uuid4().hex[:8]
    stream, prefix = f"BENCH_SSE_{token}", f"benchsse{token}"
    logs = Path(tempfile.mkdtemp(prefix="bench-sse-"))
    port = free_port()
    committed: dict[tuple[str, int], float] = {}
    received: dict[tuple[str, int], float] = {}
    relayed: dict[tuple[str, int], float] = {}
    args.prefix = prefix
    with stream_deleted(args.nats_url, stream), fresh_schema(args.database_url, "sse") as schema:
        store = TaskApplication(
            StoreConfig(database_url=args.database_url, schema=schema, pool_size=SUBMITTERS)
        )
        env = service_env(args.database_url, schema, args.nats_url, stream, prefix) | {
            "LONGHAUL_PORT": str(port)
        }
        relay = start("relay", env, logs / "relay.log", REPO_ROOT)
        gateway = start("gateway", env, logs / "gateway.log", REPO_ROOT)
        watcher = Watcher(args.nats_url, prefix, stream, Arrivals(), args.rate)
        try:
            wait_for(logs / "relay.log", "is the leader")
            base = f"http://127.0.0.1:{port}"
            deadline = time.monotonic() + 60
            while True:
                try:
                    httpx.get(f"{base}/.well-known/agent-card.json", timeout=2).raise_for_status()
                    break
                except httpx.HTTPError:
                    if time.monotonic() > deadline:
                        raise
                    time.sleep(0.1)
            tasks = [started_task() for _ in range(args.streams)]
            store.save_tasks(*tasks)
            load_s = asyncio.run(load(base, store, tasks, args, committed, received, watcher, relayed))
            watcher.stop.set()
            watcher.thread.join(10)
            cpu = {
                name: round(sum(psutil.Process(p.pid).cpu_times()[:2]), 2)
                for name, p in (("relay", relay), ("gateway", gateway))
            }
        finally:
            stop(gateway)
            stop(relay)
            store.close()
    start_at = min(committed.values())
    warm = {key: at for key, at in committed.items() if at - start_at >= WARMUP_S}
    headline = "commit -> SSE frame received (statusUpdate, SubscribeToTask)"
    raw = "baseline: core NATS publish -> receive, plain subject"
    rows = {
        "commit -> NATS (the relay's message)": summary_ms(
            [relayed[k] - at for k, at in warm.items() if k in relayed]
        ),
        "NATS -> SSE frame received (the gateway's part)": summary_ms(
            [received[k] - relayed[k] for k in warm if k in received and k in relayed]
        ),
        headline: summary_ms([received[key] - at for key, at in warm.items() if key in received]),
        raw: summary_ms(watcher.core),
        "baseline: JetStream publish -> ack": summary_ms(watcher.jetstream),
    }
    missing = sum(1 for key in committed if key not in received)
    rate = len(committed) / load_s
    print(f"\nCPU seconds of the processes over the whole run: {cpu}")
    print(
        f"{len(committed)} commits in {load_s:.1f} s ({rate:.0f}/s) over {args.streams} streams, "
        f"{missing} frames missing"
    )
    print(
        table(
            ["path", "n", "p50 ms", "p99 ms", "max ms"],
            [[name, s["n"], s["median_ms"], s["p99_ms"], s["max_ms"]] for name, s in rows.items()],
        )
    )
    p99 = rows[headline]["p99_ms"]
    ratio = p99 / rows[raw]["p99_ms"] if rows[raw]["p99_ms"] else float("nan")
    print(f"\ncommit -> SSE frame p99 {p99:.1f} ms (target < {TARGET_P99_MS:.0f} ms), {ratio:.0f}x raw NATS")
    write_results(
        "sse_latency",
        {
            "machine": info,
            "rate_per_s": args.rate,
            "streams": args.streams,
            "load_seconds": round(load_s, 2),
            "commits": len(committed),
            "warmup_excluded_s": WARMUP_S,
            "frames_missing": missing,
            "process_cpu_seconds": cpu,
            "latency": rows,
            "target_p99_ms": TARGET_P99_MS,
            "sse_p99_over_raw_nats_p99": round(ratio, 1),
            "logs": str(logs),
        },
        args,
    )


async def load(
    base: str,
    store: TaskApplication,
    tasks: list[Task],
    args: argparse.Namespace,
    committed: dict[tuple[str, int], float],
    received: dict[tuple[str, int], float],
    watcher: Watcher,
    relayed: dict[tuple[str, int], float],
) -> float:
    """Open the streams, commit the load from threads, end the tasks, wait for the streams to end."""
    nats_client = await nats.connect(args.nats_url)

    async def on_relayed(msg: Any) -> None:
        event = json.loads(msg.data)
        relayed.setdefault((event["taskId"], event["version"]), time.time())

    await nats_client.subscribe(f"{args.prefix}.tasks.>", cb=on_relayed)
    limits = httpx.Limits(max_connections=len(tasks) + 4, max_keepalive_connections=len(tasks) + 4)
    async with httpx.AsyncClient(base_url=base, limits=limits, timeout=60) as client:
        readers = [asyncio.ensure_future(read_stream(client, task, received)) for task in tasks]
        async with asyncio.timeout(30):  # every stream sent its snapshot
            while sum(1 for t in tasks if (str(t.id), t.version) in received) < len(tasks):  # noqa: ASYNC110
                await asyncio.sleep(0.05)
        watcher.thread.start()
        await asyncio.to_thread(watcher.ready.wait, 30)
        shares = [tasks[i::SUBMITTERS] for i in range(SUBMITTERS)]
        began = time.monotonic()
        submitters = [
            threading.Thread(
                target=commit_progress, args=(store, share, args.rate / SUBMITTERS, args.seconds, committed)
            )
            for share in shares
            if share
        ]
        for thread in submitters:
            thread.start()
        for thread in submitters:
            await asyncio.to_thread(thread.join)
        load_s = time.monotonic() - began
        for task in tasks:
            task.complete(epoch=task.lease_epoch, now=utc_now(), message=None)
        await asyncio.to_thread(store.save_tasks, *tasks)
        async with asyncio.timeout(60):
            await asyncio.gather(*readers)
    await nats_client.close()
    return load_s


if __name__ == "__main__":
    main()
