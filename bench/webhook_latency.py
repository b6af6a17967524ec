"""Commit -> NATS and commit -> webhook delivered, under sustained load, beside raw NATS latency.

Tasks with a push config pointing at a local receiver are committed at ``--rate`` per second,
each in one commit of its whole short life (``Submitted``, ``PushConfigSet``, ``LeaseGranted``,
``Completed``): two webhooks each (``statusUpdate`` WORKING and COMPLETED). A ``longhaul relay``
and a ``longhaul dispatcher`` process carry them; this process commits, listens on the
deployment's subjects (core NATS subscription: when the relay's message arrives) and runs the
receiver (a threaded HTTP server: when the POST arrives). The commit time is taken right after
the commit returns; every time is the wall clock of this one machine.

The baseline, in the same run and at the same rate: a core NATS publish on a plain subject to a
subscriber in this process (publish -> receive), and a JetStream publish (publish -> ack).
Target: commit -> webhook p99 under 50 ms at 200 tasks/s.

    uv run python -m bench.webhook_latency            # 200 tasks/s for 30 s
    uv run python -m bench.webhook_latency --quick    # 200 tasks/s for 8 s
    uv run python -m bench.webhook_latency --hops     # and where the time goes (bench.webhook_hops)
    uv run python -m bench.webhook_latency --tree DIR --tag before   # the services of another tree

``--tree DIR`` runs the relay and dispatcher from another checkout (a ``git worktree`` of the
code before a change) with this benchmark and this environment: before/after pairs are runs of
this script alternating ``--tree`` (see docs/benchmarks.md §8).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
import uuid
from datetime import timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import nats
import psycopg
from psycopg import sql

from bench import webhook_hops
from bench.common import (
    REPO_ROOT,
    base_parser,
    fresh_schema,
    machine_info,
    stream_deleted,
    summary_ms,
    table,
    utc_now,
    write_results,
)
from bench.process_cpu import busy_cpu_seconds, tree_cpu_seconds
from domain.task import Task
from store.log import StoreConfig, TaskApplication
from workers.webhook_signing import new_secret

TARGET_P99_MS = 50.0
WARMUP_S = 2.0
SUBMITTERS = 4
"""Threads committing at once (a commit takes a few ms; one thread alone falls behind the rate)."""


class Arrivals:
    """Arrival times (wall clock) keyed by what arrived, from several threads."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.times: dict[tuple[str, str], float] = {}

    def add(self, key: tuple[str, str], at: float) -> None:
        with self.lock:
            self.times.setdefault(key, at)

    def count(self) -> int:
        with self.lock:
            return len(self.times)


def receiver(arrivals: Arrivals) -> ThreadingHTTPServer:
    """The webhook receiver: records when each task's WORKING / COMPLETED update arrived."""

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"  # keep-alive, as a real receiver would

        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
            at = time.time()
            update = json.loads(body).get("statusUpdate")
            if update is not None:
                arrivals.add((update["taskId"], update["status"]["state"]), at)
            self.send_response(200)
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, format: str, *args: Any) -> None:
            """Quiet."""

    class Server(ThreadingHTTPServer):
        # socketserver listens with a backlog of 5: a burst of new connections from the
        # dispatcher then loses SYNs, each retried by the kernel after 1 s (the 1.1 s maxima).
        request_queue_size = 1024

    server = Server(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


class ThreadReceiver:
    """The threaded receiver (``receiver``) in this process."""

    def __init__(self) -> None:
        self.arrivals = Arrivals()
        self.server = receiver(self.arrivals)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/hook"

    def count(self) -> int:
        return self.arrivals.count()

    def times(self) -> dict[tuple[str, str], float]:
        with self.arrivals.lock:
            return dict(self.arrivals.times)

    def close(self) -> None:
        self.server.shutdown()


class ProcessReceiver:
    """The aiohttp receiver of ``bench.webhook_receiver``, in a process of its own."""

    def __init__(self) -> None:
        self.process = subprocess.Popen(
            [sys.executable, "-m", "bench.webhook_receiver"], cwd=REPO_ROOT, stdout=subprocess.PIPE
        )
        assert self.process.stdout is not None
        port = int(self.process.stdout.readline())
        self.base = f"http://127.0.0.1:{port}"
        self.url = f"{self.base}/hook"

    def _get(self, path: str) -> Any:
        with urllib.request.urlopen(self.base + path, timeout=30) as response:
            return json.loads(response.read())

    def count(self) -> int:
        return int(self._get("/count"))

    def times(self) -> dict[tuple[str, str], float]:
        return {(task, state): float(at) for task, state, at in self._get("/arrivals")}

    def close(self) -> None:
        stop(self.process)


def new_task(url: str) -> Task:
    now = utc_now()
    task = Task.submit(
        task_id=uuid.uuid4(),
        now=now,
        tenant="bench",
        context_id=str(uuid.uuid4()),
        skill="bench-noop-1",
        skill_version=1,
        message={"messageId": str(uuid.uuid4()), "role": "ROLE_USER", "parts": [{"text": "go"}]},
        params={},
    )
    task.set_push_config(now=now, config={"id": "hook", "url": url, "token": "bench-token"})
    epoch = task.grant_lease(worker="bench", now=now, until=now + timedelta(minutes=5))
    task.complete(epoch=epoch, now=now, message=None)
    return task


def submit(
    store: TaskApplication, url: str, rate: float, seconds: float, committed: dict[str, float]
) -> None:
    """Commit tasks at ``rate`` per second for ``seconds``, noting each commit's time."""
    began = time.monotonic()
    next_at = began
    while time.monotonic() - began < seconds:
        task = new_task(url)
        store.save_tasks(task)
        committed[str(task.id)] = time.time()
        next_at += 1 / rate
        time.sleep(max(0.0, next_at - time.monotonic()))


class Watcher:
    """An asyncio loop in a thread: the deployment's subjects, and the raw NATS baseline."""

    def __init__(self, nats_url: str, prefix: str, stream: str, arrivals: Arrivals, rate: float) -> None:
        self.nats_url, self.prefix, self.stream, self.arrivals, self.rate = (
            nats_url,
            prefix,
            stream,
            arrivals,
            rate,
        )
        self.core: list[float] = []
        self.jetstream: list[float] = []
        self.stop = threading.Event()
        self.ready = threading.Event()
        self.thread = threading.Thread(target=lambda: asyncio.run(self._main()), daemon=True)

    async def _main(self) -> None:
        client = await nats.connect(self.nats_url)

        async def relayed(msg: Any) -> None:
            event = json.loads(msg.data)
            self.arrivals.add((event["taskId"], event["type"]), time.time())

        await client.subscribe(f"{self.prefix}.tasks.>", cb=relayed)
        ping = f"bench.{uuid.uuid4().hex[:8]}.ping"

        async def pinged(msg: Any) -> None:
            self.core.append(time.time() - float(msg.data))

        await client.subscribe(ping, cb=pinged)
        js = client.jetstream()
        baseline_stream = f"BENCH_{uuid.uuid4().hex[:8]}"
        await js.add_stream(name=baseline_stream, subjects=[f"{ping}.js"])
        await client.flush()
        self.ready.set()
        try:
            next_at = time.monotonic()
            while not self.stop.is_set():
                sent = time.time()
                await client.publish(ping, str(sent).encode())
                await client.flush()
                t0 = time.perf_counter()
                await js.publish(f"{ping}.js", b"x")
                self.jetstream.append(time.perf_counter() - t0)
                next_at += 1 / self.rate
                await asyncio.sleep(max(0.0, next_at - time.monotonic()))
        finally:
            await js.delete_stream(baseline_stream)
            await client.close()


def start(command: str, env: dict[str, str], log: Path, tree: Path) -> subprocess.Popen[bytes]:
    with log.open("ab") as out:
        return subprocess.Popen(
            [sys.executable, "-m", "longhaul.cli", command],
            env=env | {"PYTHONPATH": str(tree)},
            cwd=tree,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )


def wait_for_any(logs: list[Path], text: str, timeout: float = 60.0) -> None:
    """Wait until one of ``logs`` holds ``text`` (the dispatcher that became the intake leader)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if any(log.exists() and text in log.read_text(errors="replace") for log in logs):
            return
        time.sleep(0.1)
    raise TimeoutError(f"none of {[log.name for log in logs]} says {text!r} after {timeout:.0f} s")


def wait_for(log: Path, text: str, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while text not in log.read_text(errors="replace"):
        if time.monotonic() > deadline:
            raise TimeoutError(f"{text!r} not in {log}:\n{log.read_text(errors='replace')}")
        time.sleep(0.05)


def stop(process: subprocess.Popen[bytes]) -> None:
    if process.poll() is None:
        os.kill(process.pid, signal.SIGTERM)
    try:
        process.wait(20)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait(10)


HEADLINE = "commit -> webhook delivered (last of the commit, COMPLETED)"
RAW = "baseline: core NATS publish -> receive, plain subject"
TO_NATS = "commit -> NATS (relay's message of the commit's last event)"
DISPATCHER = "NATS -> webhook delivered (the dispatcher's part, COMPLETED)"


def latencies(
    committed: dict[str, float], times: dict[tuple[str, str], float], watcher: Watcher
) -> dict[str, dict[str, float]]:
    """Each path's latency summary, tasks of the warm-up left out."""
    start = min(committed.values())
    warm = {t: at for t, at in committed.items() if at - start >= WARMUP_S}

    def since_commit(key: str) -> list[float]:
        return [times[(t, key)] - at for t, at in warm.items() if (t, key) in times]

    from_nats = [
        times[(t, "TASK_STATE_COMPLETED")] - times[(t, "Completed")]
        for t in warm
        if (t, "TASK_STATE_COMPLETED") in times and (t, "Completed") in times
    ]
    return {
        TO_NATS: summary_ms(since_commit("Completed")),
        "commit -> webhook delivered (first of the commit, WORKING)": summary_ms(
            since_commit("TASK_STATE_WORKING")
        ),
        HEADLINE: summary_ms(since_commit("TASK_STATE_COMPLETED")),
        DISPATCHER: summary_ms(from_nats),
        RAW: summary_ms(watcher.core),
        "baseline: JetStream publish -> ack": summary_ms(watcher.jetstream),
    }


def service_env(database_url: str, schema: str, nats_url: str, stream: str, prefix: str) -> dict[str, str]:
    """The environment of the relay and dispatcher processes."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("LONGHAUL_")}
    return env | {
        "LONGHAUL_DATABASE_URL": database_url,
        "LONGHAUL_DATABASE_SCHEMA": schema,
        "LONGHAUL_NATS_URL": nats_url,
        "LONGHAUL_NATS_STREAM": stream,
        "LONGHAUL_NATS_SUBJECT_PREFIX": prefix,
        "LONGHAUL_WEBHOOK_SECRET": new_secret(),
        "LONGHAUL_ALLOW_PRIVATE_WEBHOOKS": "true",
        "PYTHONUNBUFFERED": "1",
        "PYTHONPATH": str(REPO_ROOT),
    }


def load(store: TaskApplication, url: str, rate: float, seconds: float) -> tuple[dict[str, float], float]:
    """Commit tasks at ``rate`` per second for ``seconds`` from ``SUBMITTERS`` threads: commit times."""
    committed: dict[str, float] = {}
    began = time.monotonic()
    submitters = [
        threading.Thread(target=submit, args=(store, url, rate / SUBMITTERS, seconds, committed))
        for _ in range(SUBMITTERS)
    ]
    for thread in submitters:
        thread.start()
    for thread in submitters:
        thread.join()
    return committed, time.monotonic() - began


def _commit(tree: Path) -> str:
    """The checked-out commit of ``tree`` (``+dirty`` with uncommitted changes)."""
    head = subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"], cwd=tree, capture_output=True, text=True, check=False
    )
    dirty = subprocess.run(
        ["git", "status", "--porcelain", "--untracked-files=no"],
        cwd=tree,
        capture_output=True,
        text=True,
        check=False,
    )
    return head.stdout.strip() + ("+dirty" if dirty.stdout.strip() else "")


def arguments(argv: list[str] | None = None) -> argparse.Namespace:
    """The command line's options (``argv``: these words instead of ``sys.argv``, for ``bench.targets``)."""
    parser = base_parser(__doc__.splitlines()[0] if __doc__ else "webhook latency")
    parser.add_argument("--nats-url", default="nats://127.0.0.1:4222")
    parser.add_argument("--rate", type=float, default=200.0, help="tasks committed per second")
    parser.add_argument("--seconds", type=float, default=30.0, help="how long the load lasts")
    parser.add_argument("--concurrency", type=int, help="LONGHAUL_WEBHOOK_CONCURRENCY (default: its default)")
    parser.add_argument(
        "--tree", type=Path, default=REPO_ROOT, help="run the relay and dispatcher from this checkout"
    )
    parser.add_argument(
        "--receiver",
        choices=("thread", "process"),
        default="thread",
        help="the threaded receiver in this process, or bench.webhook_receiver in its own",
    )
    parser.add_argument("--hops", action="store_true", help="time each hop (bench.webhook_hops)")
    parser.add_argument(
        "--dispatchers", type=int, default=1, help="longhaul dispatcher processes (they share the lanes)"
    )
    args = parser.parse_args(argv)
    if args.quick:
        args.seconds = min(args.seconds, 8.0)
    return args


def cpu_seconds(processes: list[tuple[str, subprocess.Popen[bytes]]]) -> dict[str, float]:
    """User + system CPU seconds each process (and its children) has used so far."""
    return {name: round(tree_cpu_seconds(p.pid), 2) for name, p in processes}


def print_hops(hops: dict[str, Any]) -> None:
    """The hop-by-hop table of ``webhook_hops.breakdown`` (nothing without ``--hops``)."""
    if not hops:
        return
    print(f"\nhop by hop, COMPLETED ({hops['slowest']} slowest tasks of {hops['tasks']}):")
    print(
        table(
            ["hop", "p50 ms", "p99 ms", "slowest 1 % mean ms"],
            [[name, h["p50_ms"], h["p99_ms"], h["slowest_1pct_mean_ms"]] for name, h in hops["hops"].items()],
        )
    )


def run(args: argparse.Namespace) -> dict[str, Any]:
    """Start the services, commit the load, print the tables: the results (what the JSON holds)."""
    info = machine_info(args.database_url)
    arrivals = Arrivals()
    hooks: ThreadReceiver | ProcessReceiver = (
        ThreadReceiver() if args.receiver == "thread" else ProcessReceiver()
    )
    token = uuid.uuid4().hex[:8]
    stream, prefix = f"BENCH_WH_{token}", f"benchwh{token}"
    logs = Path(tempfile.mkdtemp(prefix="bench-webhook-"))
    tree = args.tree.resolve()
    with stream_deleted(args.nats_url, stream), fresh_schema(args.database_url, "webhook") as schema:
        store = TaskApplication(
            StoreConfig(database_url=args.database_url, schema=schema, pool_size=SUBMITTERS)
        )
        env = service_env(args.database_url, schema, args.nats_url, stream, prefix)
        if args.concurrency:
            env["LONGHAUL_WEBHOOK_CONCURRENCY"] = str(args.concurrency)
        if args.hops:
            webhook_hops.install(args.database_url, schema)
        relay = start("relay", env, logs / "relay.log", tree)
        dispatchers = [
            start("dispatcher", env, logs / f"dispatcher-{n}.log", tree) for n in range(args.dispatchers)
        ]
        watcher = Watcher(args.nats_url, prefix, stream, arrivals, args.rate)
        try:
            wait_for(logs / "relay.log", "is the leader")
            wait_for_any([logs / f"dispatcher-{n}.log" for n in range(args.dispatchers)], "following stream")
            time.sleep(2.0 if args.dispatchers > 1 else 0.0)  # the others (not the intake leader) start
            watcher.thread.start()
            watcher.ready.wait(30)
            services = [("relay", relay), *((f"dispatcher-{n}", d) for n, d in enumerate(dispatchers))]
            at_start = cpu_seconds(services)  # start-up (imports, connections) is not the load's
            busy_at_start = busy_cpu_seconds()
            committed, load_s = load(store, hooks.url, args.rate, args.seconds)
            machine_busy = (busy_cpu_seconds() - busy_at_start) / load_s
            deadline = time.monotonic() + 60
            # 4 events on NATS, 2 webhooks per task
            while arrivals.count() + hooks.count() < len(committed) * 6 and time.monotonic() < deadline:
                time.sleep(0.1)
            watcher.stop.set()
            watcher.thread.join(10)
            cpu = cpu_seconds(services)
            cpu_load = {name: round(cpu[name] - at_start[name], 2) for name in cpu}
            times = arrivals.times | hooks.times()
            hop_rows = webhook_hops.read(args.database_url, schema) if args.hops else {}
            attempts = attempt_outcomes(args.database_url, schema)
        finally:
            for dispatcher in dispatchers:
                stop(dispatcher)
            stop(relay)
            store.close()
            hooks.close()
    hops = (
        webhook_hops.breakdown(committed, times, hop_rows, min(committed.values()) + WARMUP_S)
        if args.hops
        else {}
    )
    return report(
        args,
        info,
        committed,
        load_s,
        times,
        watcher,
        (cpu, cpu_load, machine_busy),
        hops,
        tree,
        logs,
        attempts,
    )


def main() -> None:
    args = arguments()
    write_results("webhook_latency", run(args), args)


def attempt_outcomes(database_url: str, schema: str) -> list[dict[str, Any]]:
    """The run's attempts by outcome and error (its first 60 characters): how many, the longest."""
    with psycopg.connect(database_url, autocommit=True) as conn:
        rows = conn.execute(
            sql.SQL(
                "SELECT outcome, left(coalesce(error, ''), 60), count(*), round(max(duration_ms)::numeric, 1)"
                " FROM {} GROUP BY 1, 2 ORDER BY 3 DESC"
            ).format(sql.Identifier(schema, "longhaul_delivery_attempts"))
        ).fetchall()
    return [{"outcome": o, "error": e, "n": n, "max_ms": float(m)} for o, e, n, m in rows]


def report(  # noqa: PLR0917 - the run's parts, printed and written once
    args: argparse.Namespace,
    info: dict[str, Any],
    committed: dict[str, float],
    load_s: float,
    times: dict[tuple[str, str], float],
    watcher: Watcher,
    cpus: tuple[dict[str, float], dict[str, float], float],
    hops: dict[str, Any],
    tree: Path,
    logs: Path,
    attempts: list[dict[str, Any]],
) -> dict[str, Any]:
    """Print the run's tables; its results."""
    rows = latencies(committed, times, watcher)
    core = rows[RAW]
    missing = sum(
        1 for t in committed for s in ("TASK_STATE_WORKING", "TASK_STATE_COMPLETED") if (t, s) not in times
    )
    cpu, cpu_load, machine_busy = cpus
    print(f"\nCPU seconds of the processes over the whole run: {cpu}; from the load's start: {cpu_load}")
    print(f"the machine's cores busy over the load: {machine_busy:.2f} of {info.get('nproc')}")
    dispatcher_cpu = sum(v for name, v in cpu_load.items() if name.startswith("dispatcher"))
    per_delivery_ms = 1000 * dispatcher_cpu / max(1, 2 * len(committed))
    print(f"dispatcher CPU per delivery from the load's start: {per_delivery_ms:.3f} ms")
    rate = len(committed) / load_s
    print(f"{len(committed)} tasks in {load_s:.1f} s ({rate:.0f}/s), {missing} webhooks missing")
    print(
        table(
            ["path", "n", "p50 ms", "p99 ms", "max ms"],
            [[name, s["n"], s["median_ms"], s["p99_ms"], s["max_ms"]] for name, s in rows.items()],
        )
    )
    print_hops(hops)
    p99 = rows[HEADLINE]["p99_ms"]
    ratio = p99 / core["p99_ms"] if core["p99_ms"] else float("nan")
    print(
        "attempts by outcome:",
        ", ".join(f"{a['outcome']} {a['error']!r} {a['n']} (max {a['max_ms']} ms)" for a in attempts),
    )
    print(f"\ncommit -> webhook p99 {p99:.1f} ms (target < {TARGET_P99_MS:.0f} ms), {ratio:.0f}x raw NATS")
    return {
        "machine": info,
        "rate_per_s": args.rate,
        "webhook_concurrency": args.concurrency or "default",
        "receiver": args.receiver,
        "load_seconds": round(load_s, 2),
        "tasks": len(committed),
        "warmup_excluded_s": WARMUP_S,
        "webhooks_missing": missing,
        "process_cpu_seconds": cpu,
        "process_cpu_seconds_from_load_start": cpu_load,
        "dispatcher_cpu_ms_per_delivery": round(per_delivery_ms, 3),
        "machine_busy_cores": round(machine_busy, 2),
        "latency": rows,
        "tree": str(tree),
        "commit": _commit(tree),
        "hops": hops,
        "target_p99_ms": TARGET_P99_MS,
        "webhook_p99_over_raw_nats_p99": round(ratio, 1),
        "logs": str(logs),
        "attempts": attempts,
    }


if __name__ == "__main__":
    main()
