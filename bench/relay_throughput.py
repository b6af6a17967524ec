"""Relay throughput from a backlog, and commit -> NATS latency at a steady rate.

Throughput: N events (tasks of two events, 100 tasks per transaction) are committed first; then
a relay starts on a fresh stream and the time from its start to its ``published`` counter
reaching N gives events/s. Latency: a relay runs while one writer commits one task (one
``Submitted`` event) every ``1/rate`` seconds; a core NATS subscription on the stream's subjects
records when each message arrives, and the latency is arrival minus the moment ``save_tasks``
returned (the commit).

Baseline (same run, same PostgreSQL and NATS): the relay of ``--baseline-ref`` (default
``main``), loaded from git (``git show REF:workers/relay.py``) and run with the same store,
phases interleaved (baseline, current, then current, baseline, ...). Once this relay is merged,
``main`` holds it too: pass ``--baseline-ref c04ffa9`` (the hand-written loop, ADR 0004) to
compare against the old relay again. Throughput is reported as
the median and the best of the rounds; latency percentiles pool every round's events.

    uv run python -m bench.relay_throughput              # 20,000 events, 200 events/s for 10 s, 2 rounds
    uv run python -m bench.relay_throughput --rounds 4   # more rounds on a busy machine (medians)
    uv run python -m bench.relay_throughput --quick      # 4,000 events, 200 events/s for 4 s, 1 round
"""

from __future__ import annotations

import asyncio
import importlib.util
import os
import statistics
import subprocess
import sys
import threading
import time
import uuid
from datetime import UTC, datetime, timedelta
from types import ModuleType
from typing import Any

import nats

from bench.common import (
    REPO_ROOT,
    base_parser,
    delete_stream,
    fresh_schema,
    machine_info,
    percentile,
    table,
    write_results,
)
from domain.task import Task
from store.log import StoreConfig, TaskApplication
from store.public_form import NatsNames

DEFAULT_NATS_URL = "nats://127.0.0.1:4222"
TASKS_PER_COMMIT = 100


def baseline_module(ref: str) -> ModuleType:
    """``workers/relay.py`` as it is at git ``ref``, imported as ``bench_baseline_relay``."""
    source = subprocess.run(
        ["git", "show", f"{ref}:workers/relay.py"], cwd=REPO_ROOT, capture_output=True, text=True, check=True
    ).stdout
    spec = importlib.util.spec_from_loader("bench_baseline_relay", loader=None)
    assert spec is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    exec(compile(source, f"{ref}:workers/relay.py", "exec"), module.__dict__)
    return module


def current_module() -> ModuleType:
    import workers.relay

    return workers.relay


def _task(now: datetime, *, lease: bool) -> Task:
    task = Task.submit(
        task_id=uuid.uuid4(),
        now=now,
        tenant="acme",
        context_id="c",
        skill="echo",
        skill_version=1,
        message={"messageId": str(uuid.uuid4()), "role": "ROLE_USER", "parts": [{"text": "hi"}]},
        params={},
    )
    if lease:
        task.grant_lease(worker="w", now=now, until=now + timedelta(seconds=30))
    return task


def _names(nats_url: str) -> NatsNames:
    tag = uuid.uuid4().hex[:8]
    return NatsNames(url=nats_url, stream=f"BENCH_RELAY_{tag}", subject_prefix=f"bench_relay_{tag}")


async def throughput(module: ModuleType, store: TaskApplication, nats_url: str, events: int) -> float:
    """Events/s of one relay publishing a backlog of ``events`` to a fresh stream."""
    names = _names(nats_url)
    relay = module.Relay(store=store, names=names)
    stop = asyncio.Event()
    started = time.perf_counter()
    running = asyncio.ensure_future(relay.run(stop))
    while relay.published < events:
        await asyncio.sleep(0.005)
        if running.done():
            raise RuntimeError("the relay stopped early")
    seconds = time.perf_counter() - started
    stop.set()
    await running
    delete_stream(names.url, names.stream)
    return events / seconds


async def latency(
    module: ModuleType, store: TaskApplication, nats_url: str, rate: float, seconds: float
) -> list[float]:
    """Commit -> NATS arrival of each event committed at ``rate``/s for ``seconds``, in seconds."""
    names = _names(nats_url)
    assert store.recorder.max_notification_id() is not None
    relay = module.Relay(store=store, names=names)
    stop = asyncio.Event()
    running = asyncio.ensure_future(relay.run(stop))
    backlog = store.recorder.max_notification_id() or 0
    while relay.published < backlog:  # noqa: ASYNC110 - polling a counter; the relay starts from 0: catch up
        await asyncio.sleep(0.01)
    client = await nats.connect(nats_url)
    arrived: dict[str, float] = {}

    async def on_message(msg: Any) -> None:
        arrived[msg.headers["Longhaul-Task"]] = time.perf_counter()

    await client.subscribe(f"{names.subject_prefix}.tasks.>", cb=on_message)
    await client.flush()
    committed: dict[str, float] = {}
    loop = asyncio.get_running_loop()

    def write() -> None:
        count = int(rate * seconds)
        start = time.perf_counter()
        for i in range(count):
            pause = start + i / rate - time.perf_counter()
            if pause > 0:
                time.sleep(pause)
            task = _task(datetime.now(UTC), lease=False)
            store.save_tasks(task)
            committed[str(task.id)] = time.perf_counter()

    writer = threading.Thread(target=write)
    writer.start()
    await loop.run_in_executor(None, writer.join)
    deadline = time.perf_counter() + 10
    while len(arrived) < len(committed) and time.perf_counter() < deadline:  # noqa: ASYNC110 - a counter
        await asyncio.sleep(0.01)
    await client.close()
    stop.set()
    await running
    delete_stream(names.url, names.stream)
    missing = len(committed) - len(arrived.keys() & committed.keys())
    if missing:
        raise RuntimeError(f"{missing} events never arrived")
    return [arrived[t] - committed[t] for t in committed]


def _backlog(store: TaskApplication, events: int) -> None:
    now = datetime.now(UTC)
    tasks = events // 2
    for start in range(0, tasks, TASKS_PER_COMMIT):
        store.save_tasks(*(_task(now, lease=True) for _ in range(min(TASKS_PER_COMMIT, tasks - start))))


def _order(modules: dict[str, ModuleType], round_: int) -> list[tuple[str, ModuleType]]:
    """The relays in the order of round ``round_``: alternating, so neither always goes first."""
    pairs = list(modules.items())
    return pairs if round_ % 2 == 0 else pairs[::-1]


async def main_async(args: Any) -> dict[str, Any]:
    modules = {"baseline": baseline_module(args.baseline_ref), "current": current_module()}
    rows: dict[str, dict[str, list[float]]] = {name: {"throughput": [], "latency": []} for name in modules}
    with fresh_schema(args.database_url, "relay") as schema:
        store = TaskApplication(StoreConfig(database_url=args.database_url, schema=schema))
        try:
            await asyncio.to_thread(_backlog, store, args.events)
            for round_ in range(args.rounds):
                for name, module in _order(modules, round_):
                    rate = await throughput(module, store, args.nats_url, args.events)
                    rows[name]["throughput"].append(rate)
                    print(f"{name}: {rate:,.0f} events/s from a backlog of {args.events:,}", flush=True)
            for round_ in range(args.rounds):
                for name, module in _order(modules, round_):
                    # Each latency phase commits more events: the throughput phases are done.
                    waits = await latency(module, store, args.nats_url, args.rate, args.seconds)
                    rows[name]["latency"] += waits
                    print(
                        f"{name}: commit->NATS p50 {percentile(waits, 0.5) * 1000:.2f} ms,"
                        f" p99 {percentile(waits, 0.99) * 1000:.2f} ms ({len(waits)} events)",
                        flush=True,
                    )
        finally:
            store.close()
    results: dict[str, Any] = {}
    for name, measured in rows.items():
        waits = measured["latency"]
        results[name] = {
            "throughput_events_per_s": [round(r) for r in measured["throughput"]],
            "throughput_median": round(statistics.median(measured["throughput"])),
            "throughput_best": round(max(measured["throughput"])),
            "latency_n": len(waits),
            "latency_p50_ms": round(percentile(waits, 0.5) * 1000, 3),
            "latency_p99_ms": round(percentile(waits, 0.99) * 1000, 3),
            "latency_max_ms": round(max(waits) * 1000, 3),
        }
    base, current = results["baseline"], results["current"]
    results["ratio_current_to_baseline"] = {
        "throughput_median": round(current["throughput_median"] / base["throughput_median"], 3),
        "throughput_best": round(current["throughput_best"] / base["throughput_best"], 3),
        "latency_p50": round(current["latency_p50_ms"] / base["latency_p50_ms"], 3),
        "latency_p99": round(current["latency_p99_ms"] / base["latency_p99_ms"], 3),
    }
    return results


def main() -> None:
    parser = base_parser(__doc__ or "")
    parser.add_argument("--nats-url", default=os.environ.get("LONGHAUL_TEST_NATS_URL", DEFAULT_NATS_URL))
    parser.add_argument("--events", type=int, help="backlog size (default 20,000; 4,000 with --quick)")
    parser.add_argument("--rate", type=float, default=200.0, help="events/s of the latency phase")
    parser.add_argument("--seconds", type=float, help="length of each latency phase (10; 4 with --quick)")
    parser.add_argument("--rounds", type=int, help="interleaved rounds (2; 1 with --quick)")
    parser.add_argument("--baseline-ref", default="main", help="git ref of the baseline relay")
    args = parser.parse_args()
    args.events = args.events or (4_000 if args.quick else 20_000)
    args.seconds = args.seconds or (4.0 if args.quick else 10.0)
    args.rounds = args.rounds or (1 if args.quick else 2)
    info = machine_info(args.database_url)
    results = asyncio.run(main_async(args))
    names = ("baseline", "current")
    print()
    print(
        table(
            ["relay", "events/s (median)", "events/s (best)", "p50 ms", "p99 ms", "max ms"],
            [
                [
                    f"{n} ({args.baseline_ref})" if n == "baseline" else n,
                    results[n]["throughput_median"],
                    results[n]["throughput_best"],
                    results[n]["latency_p50_ms"],
                    results[n]["latency_p99_ms"],
                    results[n]["latency_max_ms"],
                ]
                for n in names
            ],
        )
    )
    print(f"current / baseline: {results['ratio_current_to_baseline']}")
    params = {k: getattr(args, k) for k in ("events", "rate", "seconds", "rounds", "baseline_ref")}
    write_results("relay_throughput", {"machine": info, "params": params, "results": results}, args)


if __name__ == "__main__":
    main()
