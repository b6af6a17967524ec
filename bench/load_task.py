"""Load (``TaskApplication.get``) a task with ~10,000 events, with snapshots against a full replay.

The store snapshots every 100 versions, so a load reads one snapshot and at most 99 events.
Two tasks are built: one whose head is a snapshot (10,000 events) and one 99 events past its
last snapshot (the worst case, 10,099 events). The same-run baseline is the same load with the
snapshot store switched off (a full replay of every event).

    uv run python -m bench.load_task            # 10,000 events, 50 loads per case
    uv run python -m bench.load_task --quick    # 2,000 events, fewer loads
"""

from __future__ import annotations

import argparse
import time
import uuid
from collections.abc import Iterable, Sequence
from datetime import timedelta
from typing import Any

from bench.common import (
    Stopwatch,
    base_parser,
    fresh_schema,
    machine_info,
    summary_ms,
    table,
    utc_now,
    write_results,
)
from domain.task import Task
from store.log import APP_NAME, SNAPSHOT_INTERVAL, StoreConfig, TaskApplication

TARGET_MS = 20.0
SHORT_EVENTS = 5  # about what a short task has when its caller reads it


class LibraryLoadTaskApplication(TaskApplication):
    """The same store loading through the library's repository: a snapshot read, then an events read.

    ``TaskApplication.get`` loads the task as it is with one statement (``get_many``); this is
    how it loaded before, the same-run baseline of that statement.
    """

    name = APP_NAME  # the library names tables after the application; keep the same tables

    def get(self, task_id: uuid.UUID, version: int | None = None) -> Task:
        task: Task = self.repository.get(task_id, version=version)
        assert isinstance(task, Task)
        return task


class ReplayTaskApplication(LibraryLoadTaskApplication):
    """The same store with its snapshot store switched off: every load replays every event."""

    name = APP_NAME  # each subclass names itself unless it says otherwise

    def __init__(self, config: StoreConfig) -> None:
        super().__init__(config)
        self.repository.snapshot_store = None


class PlainProjectorTaskApplication(TaskApplication):
    """What-if: the same store, replaying without the library's per-event Protocol ``isinstance``.

    ``eventsourcing.application.project_aggregate`` runs ``assert isinstance(event,
    CanMutateProtocol)`` for every event; on Python 3.11 a runtime-checkable Protocol check costs
    tens of microseconds. This variant passes a plain projector to ``repository.get``.
    """

    name = APP_NAME

    def get(self, task_id: uuid.UUID, version: int | None = None) -> Task:
        task = self.repository.get(task_id, version=version, projector_func=plain_projector)
        assert isinstance(task, Task)
        return task


def plain_projector(aggregate: Any, events: Iterable[Any]) -> Any:
    for event in events:
        aggregate = event.mutate(aggregate)
    return aggregate


def build_task(store: TaskApplication, events: int, batch: int) -> tuple[uuid.UUID, float]:
    """A task with exactly ``events`` events (lease extensions and progress under one lease)."""
    start = utc_now()
    clock = iter(start + timedelta(microseconds=i) for i in range(events + 10))
    task = Task.submit(
        task_id=uuid.uuid4(),
        now=next(clock),
        tenant="bench",
        context_id=str(uuid.uuid4()),
        skill="bench-noop-1",
        skill_version=1,
        message={"messageId": str(uuid.uuid4()), "role": "ROLE_USER", "parts": [{"text": "load me"}]},
        params={},
    )
    lease_until = start + timedelta(days=1)
    epoch = task.grant_lease(worker="bench", now=next(clock), until=lease_until)
    with Stopwatch() as sw:
        while task.version < events:
            now = next(clock)
            if task.version % 2:
                task.extend_lease(epoch=epoch, now=now, until=lease_until)
            else:
                message = {
                    "messageId": str(uuid.uuid4()),
                    "role": "ROLE_AGENT",
                    "parts": [{"text": f"working on item {task.version}"}],
                    "taskId": str(task.id),
                    "contextId": task.context_id,
                }
                task.report_progress(epoch=epoch, now=now, message=message)
            if len(task.pending_events) >= batch or task.version == events:
                store.save_tasks(task)
    assert task.version == events
    return task.id, sw.seconds


def time_loads(store: TaskApplication, task_id: uuid.UUID, loads: int, version: int) -> list[float]:
    """Each load's wall time, after one load to warm up (connection, prepared statements)."""
    [(durations, _)] = time_alternating([store], task_id, loads, version)
    return durations


def time_alternating(
    stores: Sequence[TaskApplication], task_id: uuid.UUID, loads: int, version: int
) -> list[tuple[list[float], float]]:
    """Loads of several stores, one load of each in turn (the machine's drift is shared).

    Per store: each load's wall time, and the calling thread's CPU per load (ms, the mean). Each
    store loads once first, untimed, to warm up.
    """
    for store in stores:
        store.get(task_id)
    durations: list[list[float]] = [[] for _ in stores]
    cpu = [0.0 for _ in stores]
    for _ in range(loads):
        for n, store in enumerate(stores):
            c0, t0 = time.thread_time(), time.perf_counter()
            task = store.get(task_id)
            durations[n].append(time.perf_counter() - t0)
            cpu[n] += time.thread_time() - c0
            assert task.version == version
    return [(times, spent * 1000 / loads) for times, spent in zip(durations, cpu, strict=True)]


def arguments() -> argparse.Namespace:
    """The command line, with ``--quick``'s sizes applied."""
    parser = base_parser(__doc__ or "")
    parser.add_argument("--events", type=int, default=10_000, help="events of the snapshot-at-head task")
    parser.add_argument("--loads", type=int, default=50, help="timed loads per case")
    parser.add_argument(
        "--replay-loads", type=int, default=None, help="timed full replays (default: --loads)"
    )
    parser.add_argument("--batch", type=int, default=500, help="events saved per transaction while building")
    parser.add_argument(
        "--short-loads", type=int, default=500, help=f"timed loads of a task of {SHORT_EVENTS} events"
    )
    args = parser.parse_args()
    if args.quick:
        args.events, args.loads, args.replay_loads, args.short_loads = 2_000, 20, 5, 50
    return args


def main() -> None:
    args = arguments()
    replay_loads = args.replay_loads or args.loads
    info = machine_info(args.database_url)

    with fresh_schema(args.database_url, "load") as schema:
        config = StoreConfig(args.database_url, schema=schema, pool_size=2)
        store = TaskApplication(config)
        replay = ReplayTaskApplication(config)
        library = LibraryLoadTaskApplication(config)
        plain = PlainProjectorTaskApplication(config)
        cached = TaskApplication(StoreConfig(args.database_url, schema=schema, pool_size=2, cache_size=16))
        try:
            head_events = args.events
            tail_events = args.events + SNAPSHOT_INTERVAL - 1
            head_id, head_build = build_task(store, head_events, args.batch)
            tail_id, tail_build = build_task(store, tail_events, args.batch)
            short_id, _ = build_task(store, SHORT_EVENTS, args.batch)
            print(
                f"built tasks of {head_events:,} and {tail_events:,} events in "
                f"{head_build:.1f} s and {tail_build:.1f} s "
                f"({(head_events + tail_events) / (head_build + tail_build):,.0f} events/s incl. snapshots)"
            )
            cases: list[tuple[str, TaskApplication, uuid.UUID, int, int]] = [
                ("snapshot at head", store, head_id, head_events, args.loads),
                (
                    f"snapshot + {SNAPSHOT_INTERVAL - 1} events (worst case)",
                    store,
                    tail_id,
                    tail_events,
                    args.loads,
                ),
                ("full replay, no snapshot (baseline)", replay, head_id, head_events, replay_loads),
                ("full replay, no snapshot (baseline, +99)", replay, tail_id, tail_events, replay_loads),
                ("what-if: worst case, plain projector", plain, tail_id, tail_events, args.loads),
                ("aggregate cache, warm (reference)", cached, tail_id, tail_events, args.loads),
                ("library's two reads: worst case", library, tail_id, tail_events, args.loads),
            ]
            timed = [
                (label, version, time_loads(target, task_id, loads, version))
                for label, target, task_id, version, loads in cases
            ]
            (one_statement, one_cpu), (two_reads, two_cpu) = time_alternating(
                (store, library), short_id, args.short_loads, SHORT_EVENTS
            )
            timed.append((f"short task ({SHORT_EVENTS} events)", SHORT_EVENTS, one_statement))
            timed.append(
                (f"library's two reads: short task ({SHORT_EVENTS} events)", SHORT_EVENTS, two_reads)
            )
        finally:
            library.close()
            cached.close()
            plain.close()
            replay.close()
            store.close()

    results: dict[str, Any] = {}
    rows = []
    for label, version, durations in timed:
        stats = summary_ms(durations)
        results[label] = {"events": version, **stats}
        rows.append([label, version, stats["n"], stats["median_ms"], stats["p95_ms"], stats["max_ms"]])
    worst = results[f"snapshot + {SNAPSHOT_INTERVAL - 1} events (worst case)"]
    base = results["full replay, no snapshot (baseline, +99)"]
    speedup = base["median_ms"] / worst["median_ms"]
    met = worst["p95_ms"] < TARGET_MS
    print()
    print(table(["case", "events", "loads", "median ms", "p95 ms", "max ms"], rows))
    print()
    print(f"speed-up of snapshots (worst case) over full replay, medians: {speedup:,.0f}x")
    one = results[f"short task ({SHORT_EVENTS} events)"]["median_ms"]
    two = results[f"library's two reads: short task ({SHORT_EVENTS} events)"]["median_ms"]
    print(
        f"a short task's load, one statement against the library's two reads, medians: "
        f"{one:.3f} against {two:.3f} ms ({one / two:.2f}x); the thread's CPU per load "
        f"{one_cpu:.3f} against {two_cpu:.3f} ms ({one_cpu / two_cpu:.2f}x)"
    )
    print(
        f"target: p95 < {TARGET_MS:.0f} ms with snapshots (worst case): "
        f"{'MET' if met else 'MISSED'} ({worst['p95_ms']:.2f} ms)"
    )
    write_results(
        "load_task",
        {
            "benchmark": "load_task",
            "machine": info,
            "params": {
                "events": args.events,
                "loads": args.loads,
                "replay_loads": replay_loads,
                "snapshot_interval": SNAPSHOT_INTERVAL,
                "batch": args.batch,
            },
            "cases": results,
            "speedup_median_worst_case": round(speedup, 1),
            "short_task_one_statement_ratio": round(one / two, 3),
            "short_task_cpu_ms": {"one_statement": round(one_cpu, 4), "library": round(two_cpu, 4)},
            "target_ms": TARGET_MS,
            "target_met": met,
            "replay_us_per_event": round(base["median_ms"] * 1000 / base["events"], 1),
        },
        args,
    )


if __name__ == "__main__":
    main()
