"""Load (``TaskApplication.get``) a task with ~10,000 events, with snapshots against a full replay.

The store snapshots every 100 versions, so a load reads one snapshot and at most 99 events.
Two tasks are built: one whose head is a snapshot (10,000 events) and one 99 events past its
last snapshot (the worst case, 10,099 events). The same-run baseline is the same load with the
snapshot store switched off (a full replay of every event).

    uv run python -m bench.load_task            # 10,000 events, 50 loads per case
    uv run python -m bench.load_task --quick    # 2,000 events, fewer loads
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterable
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
from store.application import APP_NAME, SNAPSHOT_INTERVAL, TaskApplication
from store.config import StoreConfig

TARGET_MS = 20.0


class ReplayTaskApplication(TaskApplication):
    """The same store with its snapshot store switched off: every load replays every event."""

    name = APP_NAME  # the library names tables after the application; keep the same tables

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
    store.get(task_id)  # warm: connection, prepared statements
    durations = []
    for _ in range(loads):
        t0 = time.perf_counter()
        task = store.get(task_id)
        durations.append(time.perf_counter() - t0)
        assert task.version == version
    return durations


def main() -> None:
    parser = base_parser(__doc__ or "")
    parser.add_argument("--events", type=int, default=10_000, help="events of the snapshot-at-head task")
    parser.add_argument("--loads", type=int, default=50, help="timed loads per case")
    parser.add_argument(
        "--replay-loads", type=int, default=None, help="timed full replays (default: --loads)"
    )
    parser.add_argument("--batch", type=int, default=500, help="events saved per transaction while building")
    args = parser.parse_args()
    if args.quick:
        args.events, args.loads, args.replay_loads = 2_000, 20, 5
    replay_loads = args.replay_loads or args.loads
    info = machine_info(args.database_url)

    with fresh_schema(args.database_url, "load") as schema:
        config = StoreConfig(args.database_url, schema=schema, pool_size=2)
        store = TaskApplication(config)
        replay = ReplayTaskApplication(config)
        plain = PlainProjectorTaskApplication(config)
        cached = TaskApplication(StoreConfig(args.database_url, schema=schema, pool_size=2, cache_size=16))
        try:
            head_events = args.events
            tail_events = args.events + SNAPSHOT_INTERVAL - 1
            head_id, head_build = build_task(store, head_events, args.batch)
            tail_id, tail_build = build_task(store, tail_events, args.batch)
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
            ]
            results: dict[str, Any] = {}
            rows = []
            for label, target, task_id, version, loads in cases:
                stats = summary_ms(time_loads(target, task_id, loads, version))
                results[label] = {"events": version, **stats}
                rows.append(
                    [label, version, stats["n"], stats["median_ms"], stats["p95_ms"], stats["max_ms"]]
                )
        finally:
            cached.close()
            plain.close()
            replay.close()
            store.close()

    worst = results[f"snapshot + {SNAPSHOT_INTERVAL - 1} events (worst case)"]
    base = results["full replay, no snapshot (baseline, +99)"]
    speedup = base["median_ms"] / worst["median_ms"]
    met = worst["p95_ms"] < TARGET_MS
    print()
    print(table(["case", "events", "loads", "median ms", "p95 ms", "max ms"], rows))
    print()
    print(f"speed-up of snapshots (worst case) over full replay, medians: {speedup:,.0f}x")
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
            "target_ms": TARGET_MS,
            "target_met": met,
            "replay_us_per_event": round(base["median_ms"] * 1000 / base["events"], 1),
        },
        args,
    )


if __name__ == "__main__":
    main()
