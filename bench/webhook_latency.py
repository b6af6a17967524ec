"""Commit -> webhook delivered, under sustained load, beside raw NATS latency in the same run.

Tasks with a push config pointing at a local receiver are committed at 200 a second, each in one
commit of its whole short life (``Submitted``, ``PushConfigSet``, ``LeaseGranted``,
``Completed``): two webhooks each (``statusUpdate`` WORKING and COMPLETED). A ``longhaul relay``
and a ``longhaul dispatcher`` process carry them to the receiver, ``bench.webhook_receiver``, a
bare HTTP/1.1 server in a process of its own (so that its time is not this process's GIL). The
commit time is taken right after the commit returns; every time is this machine's wall clock.
The first two seconds of the load are left out (warm-up). The baseline (``bench.nats_watch``):
raw NATS at the same rate in the same run.
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
import time
import urllib.request
import uuid
from datetime import timedelta
from pathlib import Path
from typing import Any

from bench.common import (
    REPO_ROOT,
    Options,
    fresh_schema,
    longhaul_env,
    new_task,
    paced,
    process_env,
    start,
    stop,
    stream_deleted,
    summary_ms,
    table,
    utc_now,
    wait_for,
)
from bench.nats_watch import JETSTREAM, RAW, Watcher
from bench.process_cpu import tree_cpu_seconds
from domain.task import Task
from store.application import TaskApplication
from store.config import StoreConfig
from workers.webhook_signing import new_secret

RATE = 200.0
WARMUP_S = 2.0
SUBMITTERS = 4
HEADLINE = "commit -> webhook delivered (COMPLETED)"
TO_NATS = "commit -> NATS (the relay's message)"
DISPATCHER = "NATS -> webhook delivered (the dispatcher's part)"
STATES = ("TASK_STATE_WORKING", "TASK_STATE_COMPLETED")


class Receiver:
    """``bench.webhook_receiver`` in a process of its own: what arrived, when."""

    def __init__(self) -> None:
        self.process = subprocess.Popen(
            [sys.executable, "-m", "bench.webhook_receiver"],
            cwd=REPO_ROOT,
            env=process_env(),
            stdout=subprocess.PIPE,
        )
        assert self.process.stdout is not None
        self.base = f"http://127.0.0.1:{int(self.process.stdout.readline())}"
        self.url = f"{self.base}/hook"

    def _get(self, path: str) -> Any:
        with urllib.request.urlopen(self.base + path, timeout=30) as response:
            return json.loads(response.read())

    def count(self) -> int:
        return int(self._get("/count"))

    def times(self) -> dict[tuple[str, str], float]:
        return {(task, state): float(at) for task, state, at in self._get("/arrivals")}


def completed_task(url: str) -> Task:
    """A task with a push config to ``url``, leased and completed: one commit, two webhooks."""
    task = new_task("bench-noop-1")
    now = utc_now()
    task.set_push_config(now=now, config={"id": "hook", "url": url, "token": "bench-token"})
    epoch = task.grant_lease(worker="bench", now=now, until=now + timedelta(minutes=5))
    task.complete(epoch=epoch, now=now, message=None)
    return task


def run(options: Options) -> dict[str, Any]:
    """Start the services, commit the load, print the table: the results."""
    seconds = 8.0 if options.quick else 30.0
    token = uuid.uuid4().hex[:8]
    stream, prefix = f"BENCH_WH_{token}", f"benchwh{token}"
    logs = Path(tempfile.mkdtemp(prefix="bench-webhook-"))
    receiver = Receiver()
    committed: dict[str, float] = {}
    with stream_deleted(options.nats_url, stream), fresh_schema(options.database_url, "webhook") as schema:
        store = TaskApplication(StoreConfig(options.database_url, schema=schema, pool_size=SUBMITTERS))
        env = longhaul_env(
            options.database_url,
            schema,
            nats_url=options.nats_url,
            nats_stream=stream,
            nats_subject_prefix=prefix,
            webhook_secret=new_secret(),
            allow_private_webhooks="true",
        )
        relay = start(["longhaul.cli", "relay"], env, logs / "relay.log")
        dispatcher = start(["longhaul.cli", "dispatcher"], env, logs / "dispatcher.log")

        def commit(_: int) -> None:
            task = completed_task(receiver.url)
            store.save_tasks(task)
            committed[str(task.id)] = time.time()

        try:
            wait_for(logs / "relay.log", "is the leader", relay)
            wait_for(logs / "dispatcher.log", "following stream", dispatcher)
            with Watcher(options.nats_url, prefix, RATE, lambda e: (e["taskId"], e["type"])) as watcher:
                cpu_before = tree_cpu_seconds(dispatcher.pid)
                watcher.pinging.set()
                load_s = paced(SUBMITTERS, RATE, seconds, commit)
                watcher.pinging.clear()
                deadline = time.monotonic() + 60
                while receiver.count() < 2 * len(committed) and time.monotonic() < deadline:
                    time.sleep(0.1)
                dispatcher_cpu = tree_cpu_seconds(dispatcher.pid) - cpu_before
            hooks = receiver.times()
        finally:
            stop(dispatcher)
            stop(relay)
            stop(receiver.process)
            store.close()
    start_at = min(committed.values()) + WARMUP_S
    warm = {t: at for t, at in committed.items() if at >= start_at}
    relayed = {t: watcher.times[(t, "Completed")] for t in warm if (t, "Completed") in watcher.times}
    done = {t: hooks[(t, STATES[1])] for t in warm if (t, STATES[1]) in hooks}
    latency = {
        TO_NATS: summary_ms([relayed[t] - warm[t] for t in relayed]),
        HEADLINE: summary_ms([done[t] - warm[t] for t in done]),
        DISPATCHER: summary_ms([done[t] - relayed[t] for t in done if t in relayed]),
        RAW: summary_ms(watcher.core),
        JETSTREAM: summary_ms(watcher.jetstream),
    }
    missing = sum(1 for t in committed for s in STATES if (t, s) not in hooks)
    print(f"{len(committed)} tasks in {load_s:.1f} s, {missing} webhooks missing")
    print(table(["path", "n", "p50 ms", "p99 ms", "max ms"], [[k, *v.values()] for k, v in latency.items()]))
    return {
        "rate_per_s": RATE,
        "tasks": len(committed),
        "load_seconds": round(load_s, 2),
        "webhooks_missing": missing,
        "dispatcher_cpu_ms_per_delivery": round(1000 * dispatcher_cpu / max(1, 2 * len(committed)), 3),
        "latency": latency,
        "logs": str(logs),
    }
