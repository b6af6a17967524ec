"""Commit -> SSE frame received, under sustained load, beside raw NATS latency in the same run.

Phases of 50 and of 1,000 streams: that many tasks are submitted and leased, and one
``SubscribeToTask`` stream is opened on each through a ``longhaul gateway`` process of the phase
(a ``longhaul relay`` process publishes the log for all phases). Then progress reports are
committed at 200 a second, spread over the tasks, from a few threads; each becomes a
``statusUpdate`` frame on its task's stream, whose ``id:`` (the task version) names the commit
it shows. The commit time is taken right after the commit returns, the arrival time when the
client has parsed the frame; the first two seconds are left out (warm-up).

The streams are read by client processes (``bench.sse_clients``, one per 250 streams), so that
the client side is not the bottleneck. The gateway's memory (USS) is taken once it serves and
before any stream opens, then again with every stream open and idle: the difference over the
streams is its memory per open stream. The baseline (``bench.nats_watch``): raw NATS at the same
rate in the same run.
"""

from __future__ import annotations

import json
import subprocess
import time
from collections.abc import Iterator
from typing import Any

import psutil

from bench.common import TENANT, Options, free_port, leased_task, paced, python, serving, utc_now
from bench.nats_watch import Deployment, Watcher, latencies, relayed
from bench.process_cpu import tree_cpu_seconds
from domain.task import Task

RATE = 200.0
STREAMS = (50, 1000)
SUBMITTERS = 4
IDLE_S = 5.0
"""How long the open streams sit idle before the gateway's memory is taken the second time."""
OPEN_AT_ONCE = 50
HEADLINE = "commit -> SSE frame received"
GATEWAY = "NATS -> SSE frame received (the gateway's part)"


def memory(pid: int) -> dict[str, int]:
    """A process's memory: USS (what it alone holds) and RSS, in bytes."""
    full = psutil.Process(pid).memory_full_info()
    return {"uss": int(full.uss), "rss": int(full.rss)}


class Clients:
    """``bench.sse_clients`` processes, each following a share of the tasks' streams."""

    def __init__(self, base: str, tasks: list[Task], processes: int) -> None:
        self.processes: list[subprocess.Popen[str]] = []
        for i in range(processes):
            share = [str(t.id) for t in tasks[i::processes]]
            request = {"base": base, "tenant": TENANT, "tasks": share, "open_at_once": OPEN_AT_ONCE}
            self.processes.append(python("bench.sse_clients", json.dumps(request)))

    def answers(self) -> Iterator[dict[str, Any]]:
        """The next line of every process, in turn."""
        for process in self.processes:
            assert process.stdout is not None
            line = process.stdout.readline()
            if not line:
                raise RuntimeError(f"a client process ended with {process.wait()} before it answered")
            yield json.loads(line)

    def wait_ready(self) -> None:
        """Block until every stream of every client has sent its first frame."""
        for answer in self.answers():
            if not answer.get("ready"):
                raise RuntimeError(f"a client process could not open its streams: {answer}")

    def results(self) -> tuple[dict[tuple[str, int], float], list[str]]:
        """Every frame's arrival and the clients' errors, once every stream ended."""
        received: dict[tuple[str, int], float] = {}
        errors: list[str] = []
        for answer in self.answers():
            for task, version, at in answer["received"]:
                received.setdefault((task, version), at)
            errors.extend(answer["errors"])
        for process in self.processes:
            process.wait(30)
        return received, errors

    def __enter__(self) -> Clients:
        return self

    def __exit__(self, *exc: object) -> None:
        for process in self.processes:
            process.kill()
            process.wait(10)


def run_phase(options: Options, deployment: Deployment, streams: int) -> dict[str, Any]:
    """One gateway with ``streams`` open streams under the load: its figures."""
    store, env, logs, prefix = deployment.store, deployment.env, deployment.logs, deployment.prefix
    seconds = 8.0 if options.quick else 30.0
    committed: dict[tuple[str, int], float] = {}
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    tasks = [leased_task() for _ in range(streams)]
    store.save_tasks(*tasks)
    shares = [tasks[i::SUBMITTERS] for i in range(SUBMITTERS)]
    turns = [0] * SUBMITTERS

    def report(index: int) -> None:
        task = shares[index][turns[index] % len(shares[index])]
        turns[index] += 1
        task.report_progress(epoch=task.lease_epoch, now=utc_now(), message={"parts": [{"text": "p"}]})
        store.save_tasks(task)
        committed[(str(task.id), task.version)] = time.time()

    log = logs / f"gateway-{streams}.log"
    with serving(["longhaul.cli", "gateway"], env | {"LONGHAUL_PORT": str(port)}, log, port) as gateway:
        time.sleep(1.0)  # the gateway settles (its first requests' imports, pools)
        before = memory(gateway.pid)
        with Clients(base, tasks, max(1, streams // 250)) as clients:
            clients.wait_ready()
            time.sleep(IDLE_S)
            idle = memory(gateway.pid)
            with Watcher(options.nats_url, prefix, RATE, lambda e: (e["taskId"], e["version"])) as watcher:
                cpu_before = tree_cpu_seconds(gateway.pid)
                watcher.pinging.set()
                load_s = paced(SUBMITTERS, RATE, seconds, report)
                watcher.pinging.clear()
                gateway_cpu = tree_cpu_seconds(gateway.pid) - cpu_before
                for task in tasks:
                    task.complete(epoch=task.lease_epoch, now=utc_now(), message=None)
                store.save_tasks(*tasks)
                received, errors = clients.results()
    missing = sum(1 for key in committed if key not in received)
    print(f"\n{streams} streams: {len(committed)} commits in {load_s:.1f} s, {missing} frames missing")
    latency = latencies(committed, watcher.times, received, (HEADLINE, GATEWAY), watcher)
    return {
        "streams": streams,
        "rate_per_s": RATE,
        "commits_per_s": round(len(committed) / load_s, 1),
        "frames_missing": missing,
        "client_errors": errors,
        "latency": latency,
        "memory_per_stream_bytes": {kind: round((idle[kind] - before[kind]) / streams) for kind in before},
        "gateway_cpu_cores": round(gateway_cpu / load_s, 3),
    }


def run(options: Options) -> dict[str, Any]:
    """Every phase, printed: the results."""
    with relayed(options, "sse", SUBMITTERS) as deployment:
        return {
            "phases": [run_phase(options, deployment, streams) for streams in STREAMS],
            "logs": str(deployment.logs),
        }
