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

import contextlib
import time
from datetime import timedelta
from typing import Any

import httpx

from bench.common import Options, new_task, paced, python, running, stop, utc_now
from bench.nats_watch import Watcher, latencies, relayed
from bench.process_cpu import tree_cpu_seconds
from domain.task import Task
from workers.webhook_signing import new_secret

RATE = 200.0
SUBMITTERS = 4
HEADLINE = "commit -> webhook delivered (COMPLETED)"
DISPATCHER = "NATS -> webhook delivered (the dispatcher's part)"
STATES = ("TASK_STATE_WORKING", "TASK_STATE_COMPLETED")


class Receiver:
    """``bench.webhook_receiver`` in a process of its own: what arrived, when."""

    def __init__(self) -> None:
        self.process = python("bench.webhook_receiver")
        assert self.process.stdout is not None
        self.base = f"http://127.0.0.1:{int(self.process.stdout.readline())}"
        self.url = f"{self.base}/hook"

    def count(self) -> int:
        return int(httpx.get(f"{self.base}/count", timeout=30).json())

    def times(self) -> dict[tuple[str, str], float]:
        arrivals = httpx.get(f"{self.base}/arrivals", timeout=30).json()
        return {(task, state): float(at) for task, state, at in arrivals}

    def close(self) -> None:
        stop(self.process)


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
    receiver = Receiver()
    committed: dict[str, float] = {}
    settings = {"webhook_secret": new_secret(), "allow_private_webhooks": "true"}
    with contextlib.closing(receiver), relayed(options, "webhook", SUBMITTERS, **settings) as deployment:
        store, logs = deployment.store, deployment.logs

        def commit(_: int) -> None:
            task = completed_task(receiver.url)
            store.save_tasks(task)
            committed[str(task.id)] = time.time()

        with (
            running("dispatcher", deployment.env, logs / "dispatcher.log") as dispatcher,
            Watcher(options.nats_url, deployment.prefix, RATE, lambda e: (e["taskId"], e["type"])) as watcher,
        ):
            cpu_before = tree_cpu_seconds(dispatcher.pid)
            watcher.pinging.set()
            load_s = paced(SUBMITTERS, RATE, seconds, commit)
            watcher.pinging.clear()
            deadline = time.monotonic() + 60
            while receiver.count() < 2 * len(committed) and time.monotonic() < deadline:
                time.sleep(0.1)
            dispatcher_cpu = tree_cpu_seconds(dispatcher.pid) - cpu_before
            hooks = receiver.times()
    published = {t: at for (t, kind), at in watcher.times.items() if kind == "Completed"}
    done = {t: at for (t, state), at in hooks.items() if state == STATES[1]}
    missing = sum(1 for t in committed for s in STATES if (t, s) not in hooks)
    print(f"{len(committed)} tasks in {load_s:.1f} s, {missing} webhooks missing")
    latency = latencies(committed, published, done, (HEADLINE, DISPATCHER), watcher)
    return {
        "rate_per_s": RATE,
        "tasks": len(committed),
        "load_seconds": round(load_s, 2),
        "webhooks_missing": missing,
        "dispatcher_cpu_ms_per_delivery": round(1000 * dispatcher_cpu / max(1, 2 * len(committed)), 3),
        "latency": latency,
        "logs": str(logs),
    }
