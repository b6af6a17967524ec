"""Commit -> SSE frame received, under sustained load, beside raw NATS latency in the same run.

``--streams`` tasks are submitted and started, and one ``SubscribeToTask`` stream is opened on
each through a ``longhaul gateway`` process (a ``longhaul relay`` process publishes the log).
Then progress reports are committed at ``--rate`` per second, spread over the tasks, from a few
threads; each one becomes a ``statusUpdate`` frame on its task's stream, whose ``id:`` (the task
version) names the commit it shows. The commit time is taken right after the commit returns,
the arrival time when the client has parsed the frame; both are this machine's wall clock.

The streams are read by ``--client-processes`` processes (``bench.sse_clients``), each following
a share of them and reporting every frame's arrival time to this one, so that the client side is
not the bottleneck with 1,000 streams. Each phase has a gateway of its own: its memory (USS, and
RSS) is taken once it serves and before any stream opens, then again with every stream open and
idle; the difference divided by the streams is its memory per open stream. Its CPU is measured
over the load.

``--streams 50 1000`` runs one phase per count, and ``--rounds R`` repeats them, interleaved
(50, 1000, 50, 1000, ...); ``--tree DIR`` (repeat it) runs the gateway of each phase from each
checkout in turn (a ``git worktree`` of the code before a change), the relay always from this one.

The baseline, in the same run and at the same rate (``bench.webhook_latency.Watcher``): a core
NATS publish on a plain subject to a subscriber in this process, and a JetStream publish -> ack.
Targets: commit -> SSE frame p99 under 10 ms at 200 events/s (issue 8, 50 streams), under 50 ms
with 1,000 open streams on one gateway (issue 10).

    uv run python -m bench.sse_latency            # 200 events/s over 50 streams for 30 s
    uv run python -m bench.sse_latency --quick    # 8 s
    uv run python -m bench.sse_latency --streams 50 1000 --rounds 2 --client-processes 4
    uv run python -m bench.sse_latency --streams 1000 --tree ../base --tree .   # A/B of the gateway
"""

from __future__ import annotations

import argparse
import asyncio
import json
import subprocess
import sys
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
from bench.process_cpu import busy_cpu_seconds, tree_cpu_seconds
from bench.webhook_latency import Arrivals, Watcher, _commit, service_env, start, stop, wait_for
from domain.task import Task
from store.log import StoreConfig, TaskApplication

TARGET_P99_MS = 10.0
"""Issue 8: commit -> SSE frame p99 at 200 events/s (50 streams)."""
TARGET_P99_MANY_MS = 50.0
"""Issue 10: the same with 1,000 streams open on one gateway."""
MANY_STREAMS = 1000
WARMUP_S = 2.0
SUBMITTERS = 4
TENANT = "bench"
IDLE_S = 5.0
"""How long the open streams sit idle before the gateway's memory is taken the second time."""
KIB = 1024


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


class Relayed:
    """When the relay's message of each (task, version) arrived: a core subscription in a thread."""

    def __init__(self, nats_url: str, prefix: str) -> None:
        self.nats_url, self.prefix = nats_url, prefix
        self.times: dict[tuple[str, int], float] = {}
        self.stop = threading.Event()
        self.ready = threading.Event()
        self.thread = threading.Thread(target=lambda: asyncio.run(self._main()), daemon=True)
        self.thread.start()
        if not self.ready.wait(30):
            raise TimeoutError("the benchmark's NATS subscription is not ready after 30 s")

    async def _main(self) -> None:
        client = await nats.connect(self.nats_url)

        async def on_relayed(msg: Any) -> None:
            event = json.loads(msg.data)
            self.times.setdefault((event["taskId"], event["version"]), time.time())

        await client.subscribe(f"{self.prefix}.tasks.>", cb=on_relayed)
        await client.flush()
        self.ready.set()
        try:
            while not self.stop.is_set():  # noqa: ASYNC110 - a threading.Event, set from the main thread
                await asyncio.sleep(0.1)
        finally:
            await client.close()

    def close(self) -> None:
        self.stop.set()
        self.thread.join(10)


def memory(pid: int) -> dict[str, int]:
    """A process's memory: USS (what it alone holds, when the platform tells) and RSS, in bytes."""
    process = psutil.Process(pid)
    try:
        full = process.memory_full_info()
        return {"uss": int(full.uss), "rss": int(full.rss)}
    except (psutil.AccessDenied, AttributeError):
        rss = int(process.memory_info().rss)
        return {"uss": rss, "rss": rss}


def wait_serving(base: str, gateway: subprocess.Popen[bytes], log: Path) -> None:
    """Block until the gateway answers its agent card."""
    deadline = time.monotonic() + 60
    while True:
        try:
            httpx.get(f"{base}/.well-known/agent-card.json", timeout=2).raise_for_status()
            return
        except httpx.HTTPError:
            if gateway.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(
                    f"the gateway does not serve:\n{log.read_text(errors='replace')}"
                ) from None
            time.sleep(0.1)


class Clients:
    """``bench.sse_clients`` processes, each following a share of the tasks' streams."""

    def __init__(self, base: str, tasks: list[Task], processes: int, open_at_once: int) -> None:
        shares = [tasks[i::processes] for i in range(processes)]
        self.processes: list[subprocess.Popen[str]] = []
        for share in (s for s in shares if s):
            process = subprocess.Popen(
                [sys.executable, "-m", "bench.sse_clients"],
                cwd=REPO_ROOT,
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                text=True,
            )
            assert process.stdin is not None
            request: dict[str, Any] = {"base": base, "tenant": TENANT, "tasks": [str(t.id) for t in share]}
            results = Path(tempfile.mkdtemp(prefix="sse-client-")) / "received.json"
            request |= {"open_at_once": open_at_once, "results": str(results)}
            process.stdin.write(json.dumps(request) + "\n")
            process.stdin.flush()
            self.processes.append(process)

    def _line(self, process: subprocess.Popen[str]) -> dict[str, Any]:
        assert process.stdout is not None
        line = process.stdout.readline()
        if not line:
            raise RuntimeError(f"a client process ended with {process.wait()} before it answered")
        answer: dict[str, Any] = json.loads(line)
        return answer

    def wait_ready(self) -> None:
        """Block until every stream of every client has sent its first frame."""
        for process in self.processes:
            answer = self._line(process)
            if not answer.get("ready"):
                raise RuntimeError(f"a client process could not open its streams: {answer}")

    def results(self) -> tuple[dict[tuple[str, int], float], list[str], list[float]]:
        """Every frame's arrival, the clients' errors and CPU seconds, once every stream ended."""
        received: dict[tuple[str, int], float] = {}
        errors: list[str] = []
        cpu: list[float] = []
        for process in self.processes:
            done = Path(self._line(process)["done"])
            answer = json.loads(done.read_text())
            done.unlink()
            for task, version, at in answer["received"]:
                received.setdefault((task, version), at)
            errors.extend(answer["errors"])
            cpu.append(answer["cpu_s"])
            process.wait(30)
        return received, errors, cpu

    def kill(self) -> None:
        for process in self.processes:
            if process.poll() is None:
                process.kill()
                process.wait(10)


def record(directory: Path, pid: int, name: str, seconds: float) -> subprocess.Popen[bytes]:
    """py-spy recording ``pid`` for ``seconds`` (200 samples/s), raw stacks in ``directory``."""
    directory.mkdir(parents=True, exist_ok=True)
    command = ["py-spy", "record", "--pid", str(pid), "-r", "200", "--format", "raw"]
    command += ["--duration", str(max(1, int(seconds))), "-o", str(directory / f"gateway-{name}.txt")]
    return subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def arguments(argv: list[str] | None = None) -> argparse.Namespace:
    """The command line's options (``argv``: these words instead of ``sys.argv``, for ``bench.targets``)."""
    parser = base_parser(__doc__.splitlines()[0] if __doc__ else "SSE latency")
    parser.add_argument("--nats-url", default="nats://127.0.0.1:4222")
    parser.add_argument("--rate", type=float, default=200.0, help="progress reports committed per second")
    parser.add_argument(
        "--streams",
        type=int,
        nargs="+",
        default=[50],
        help="tasks, each with one stream (several: one phase each)",
    )
    parser.add_argument("--rounds", type=int, default=1, help="times every phase is run, interleaved")
    parser.add_argument("--seconds", type=float, default=30.0, help="how long the load of a phase lasts")
    parser.add_argument(
        "--client-processes",
        type=int,
        help="processes reading the streams (default: one per 250 streams, at least one)",
    )
    parser.add_argument("--open-at-once", type=int, default=50, help="streams a client process opens at once")
    parser.add_argument(
        "--tree",
        type=Path,
        action="append",
        help="run the gateway from this checkout (repeat: each phase with each tree, in turn)",
    )
    parser.add_argument(
        "--py-spy", type=Path, help="record each phase's gateway with py-spy over the load (raw files here)"
    )
    args = parser.parse_args(argv)
    if args.quick:
        args.seconds = min(args.seconds, 8.0)
    args.tree = [tree.resolve() for tree in (args.tree or [REPO_ROOT])]
    return args


def run_phase(
    args: argparse.Namespace,
    store: TaskApplication,
    env: dict[str, str],
    logs: Path,
    streams: int,
    tree: Path,
    name: str,
) -> dict[str, Any]:
    """One gateway from ``tree`` with ``streams`` open streams under the load: its figures."""
    committed: dict[tuple[str, int], float] = {}
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    tasks = [started_task() for _ in range(streams)]
    store.save_tasks(*tasks)
    gateway_log = logs / f"gateway-{name}.log"
    gateway = start("gateway", env | {"LONGHAUL_PORT": str(port)}, gateway_log, tree)
    processes = args.client_processes or max(1, streams // 250)
    clients: Clients | None = None
    relayed = Relayed(args.nats_url, args.prefix)
    watcher = Watcher(args.nats_url, args.prefix, args.stream, Arrivals(), args.rate)
    try:
        wait_serving(base, gateway, gateway_log)
        time.sleep(1.0)  # the gateway settles (its first requests' imports, pools)
        before = memory(gateway.pid)
        opening = time.monotonic()
        clients = Clients(base, tasks, processes, args.open_at_once)
        clients.wait_ready()
        open_s = time.monotonic() - opening
        cpu_at_idle = tree_cpu_seconds(gateway.pid)
        time.sleep(IDLE_S)
        idle_cpu = tree_cpu_seconds(gateway.pid) - cpu_at_idle
        idle = memory(gateway.pid)
        watcher.thread.start()
        watcher.ready.wait(30)
        cpu_at_start, busy_at_start = tree_cpu_seconds(gateway.pid), busy_cpu_seconds()
        spy = record(args.py_spy, gateway.pid, name, args.seconds) if args.py_spy else None
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
            thread.join()
        load_s = time.monotonic() - began
        gateway_cpu = tree_cpu_seconds(gateway.pid) - cpu_at_start
        machine_busy = busy_cpu_seconds() - busy_at_start
        if spy is not None:
            spy.wait(60)
        loaded = memory(gateway.pid)
        watcher.stop.set()
        watcher.thread.join(10)
        for task in tasks:
            task.complete(epoch=task.lease_epoch, now=utc_now(), message=None)
        store.save_tasks(*tasks)
        received, errors, client_cpu = clients.results()
    finally:
        if clients is not None:
            clients.kill()
        stop(gateway)
        relayed.close()
    return figures(
        args,
        {
            "name": name,
            "streams": streams,
            "tree": str(tree),
            "commit": _commit(tree),
            "client_processes": processes,
            "open_seconds": round(open_s, 2),
            "memory": {"before_streams": before, "streams_open_idle": idle, "after_load": loaded},
            "gateway_cpu_s_per_s": round(gateway_cpu / load_s, 3),
            "gateway_idle_cpu_s_per_s": round(idle_cpu / IDLE_S, 3),
            "machine_busy_cores": round(machine_busy / load_s, 2),
            "client_cpu_seconds": client_cpu,
            "client_errors": errors,
            "load_seconds": round(load_s, 2),
        },
        (committed, relayed.times, received),
        watcher,
    )


HEADLINE = "commit -> SSE frame received (statusUpdate, SubscribeToTask)"
RAW = "baseline: core NATS publish -> receive, plain subject"
TO_NATS = "commit -> NATS (the relay's message)"
GATEWAY = "NATS -> SSE frame received (the gateway's part)"


def figures(
    args: argparse.Namespace,
    phase: dict[str, Any],
    times: tuple[dict[tuple[str, int], float], dict[tuple[str, int], float], dict[tuple[str, int], float]],
    watcher: Watcher,
) -> dict[str, Any]:
    """A phase's latencies (the warm-up left out), frames missing, memory per stream."""
    committed, relayed, received = times
    start_at = min(committed.values())
    warm = {key: at for key, at in committed.items() if at - start_at >= WARMUP_S}
    rows = {
        TO_NATS: summary_ms([relayed[k] - at for k, at in warm.items() if k in relayed]),
        GATEWAY: summary_ms([received[k] - relayed[k] for k in warm if k in received and k in relayed]),
        HEADLINE: summary_ms([received[key] - at for key, at in warm.items() if key in received]),
        RAW: summary_ms(watcher.core),
        "baseline: JetStream publish -> ack": summary_ms(watcher.jetstream),
    }
    memory_of = phase["memory"]
    per_stream = {
        kind: round(
            (memory_of["streams_open_idle"][kind] - memory_of["before_streams"][kind]) / phase["streams"]
        )
        for kind in ("uss", "rss")
    }
    p99, raw_p99 = rows[HEADLINE]["p99_ms"], rows[RAW]["p99_ms"]
    return phase | {
        "commits": len(committed),
        "commits_per_s": round(len(committed) / phase["load_seconds"], 1),
        "frames_missing": sum(1 for key in committed if key not in received),
        "latency": rows,
        "memory_per_stream_bytes": per_stream,
        "sse_p99_over_raw_nats_p99": round(p99 / raw_p99, 1) if raw_p99 else None,
        "target_p99_ms": TARGET_P99_MANY_MS if phase["streams"] >= MANY_STREAMS else TARGET_P99_MS,
        "rate_per_s": args.rate,
    }


def print_phase(phase: dict[str, Any]) -> None:
    rows = phase["latency"]
    print(
        f"\n[{phase['name']}] {phase['streams']} streams, gateway from {phase['tree']} ({phase['commit']}), "
        f"{phase['client_processes']} client processes: "
        f"{phase['commits']} commits in {phase['load_seconds']} s "
        f"({phase['commits_per_s']}/s), {phase['frames_missing']} frames missing, "
        f"{len(phase['client_errors'])} client errors; opened in {phase['open_seconds']} s"
    )
    mem = phase["memory"]
    print(
        f"gateway USS {mem['before_streams']['uss'] / KIB**2:.1f} MiB before the streams, "
        f"{mem['streams_open_idle']['uss'] / KIB**2:.1f} MiB open and idle, "
        f"{mem['after_load']['uss'] / KIB**2:.1f} MiB after the load: "
        f"{phase['memory_per_stream_bytes']['uss'] / KIB:.1f} KiB per stream "
        f"(RSS {phase['memory_per_stream_bytes']['rss'] / KIB:.1f} KiB); "
        f"gateway CPU {phase['gateway_cpu_s_per_s']} s/s over the load, "
        f"{phase['gateway_idle_cpu_s_per_s']} s/s with the streams open and idle; "
        f"client CPU s {phase['client_cpu_seconds']}; the machine's cores busy over the load "
        f"{phase['machine_busy_cores']}"
    )
    print(
        table(
            ["path", "n", "p50 ms", "p99 ms", "max ms"],
            [[name, s["n"], s["median_ms"], s["p99_ms"], s["max_ms"]] for name, s in rows.items()],
        )
    )


def print_summary(phases: list[dict[str, Any]]) -> None:
    print("\nsummary, phases in the order run:")
    print(
        table(
            [
                "phase",
                "streams",
                "commit",
                "commits/s",
                "missing",
                "gw p50",
                "gw p99",
                "SSE p50",
                "SSE p99",
                "SSE max",
                "raw p99",
                "KiB/stream",
                "gw CPU s/s",
                "idle CPU s/s",
            ],
            [
                [
                    p["name"],
                    p["streams"],
                    p["commit"],
                    p["commits_per_s"],
                    p["frames_missing"],
                    p["latency"][GATEWAY]["median_ms"],
                    p["latency"][GATEWAY]["p99_ms"],
                    p["latency"][HEADLINE]["median_ms"],
                    p["latency"][HEADLINE]["p99_ms"],
                    p["latency"][HEADLINE]["max_ms"],
                    p["latency"][RAW]["p99_ms"],
                    round(p["memory_per_stream_bytes"]["uss"] / KIB, 1),
                    p["gateway_cpu_s_per_s"],
                    p["gateway_idle_cpu_s_per_s"],
                ]
                for p in phases
            ],
        )
    )


def run(args: argparse.Namespace) -> dict[str, Any]:
    """Every phase of the plan, printed: the results (what the JSON holds)."""
    info = machine_info(args.database_url)
    token = uuid.uuid4().hex[:8]
    stream, prefix = f"BENCH_SSE_{token}", f"benchsse{token}"
    logs = Path(tempfile.mkdtemp(prefix="bench-sse-"))
    args.prefix, args.stream = prefix, stream
    plan = [
        (streams, tree, f"r{round_no + 1}-{streams}-{i}")
        for round_no in range(args.rounds)
        for streams in args.streams
        for i, tree in enumerate(args.tree)
    ]
    phases: list[dict[str, Any]] = []
    with stream_deleted(args.nats_url, stream), fresh_schema(args.database_url, "sse") as schema:
        store = TaskApplication(
            StoreConfig(database_url=args.database_url, schema=schema, pool_size=SUBMITTERS)
        )
        env = service_env(args.database_url, schema, args.nats_url, stream, prefix)
        relay = start("relay", env, logs / "relay.log", REPO_ROOT)
        try:
            wait_for(logs / "relay.log", "is the leader")
            for streams, tree, name in plan:
                phase = run_phase(args, store, env, logs, streams, tree, name)
                print_phase(phase)
                phases.append(phase)
            relay_cpu = round(tree_cpu_seconds(relay.pid), 2)
        finally:
            stop(relay)
            store.close()
    print_summary(phases)
    print(f"\nrelay CPU seconds over the whole run: {relay_cpu}; logs in {logs}")
    return {
        "machine": info,
        "rate_per_s": args.rate,
        "streams": args.streams,
        "rounds": args.rounds,
        "warmup_excluded_s": WARMUP_S,
        "idle_before_memory_s": IDLE_S,
        "relay_cpu_seconds": relay_cpu,
        "phases": phases,
        "targets_p99_ms": {"50 streams": TARGET_P99_MS, f"{MANY_STREAMS} streams": TARGET_P99_MANY_MS},
        "loadavg_at_end": [round(x, 2) for x in psutil.getloadavg()],
        "logs": str(logs),
    }


def main() -> None:
    args = arguments()
    write_results("sse_latency", run(args), args)


if __name__ == "__main__":
    main()
