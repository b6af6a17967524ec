"""``longhaul worker`` with counters and timers around the hot paths (profiling aid, bench only).

Runs exactly the CLI's worker, after wrapping a few methods with counters (no behaviour change):
group commits (``TaskApplication.save_each``: transactions, group sizes, groups split by a conflict,
conflicts), loads (``TaskApplication.get``), run-queue queries, claims (``Worker._claim``) and
``LeasedTask.commit`` retries. On exit it writes JSON to ``$BENCH_STATS_FILE`` (and every
``$BENCH_STATS_EVERY`` seconds while it runs, if set).

``$BENCH_WHATIF`` (comma-separated) tries a change without touching the project's code, to
quantify a suggestion:

- ``no-pre-ping``: ``POSTGRES_PRE_PING`` off (the pool no longer runs a check query before
  every use of a connection);
- ``plain-projector``: loads replay with a projector that skips the library's per-event
  runtime-Protocol ``isinstance`` check;
- ``cache``: the worker's store keeps an aggregate cache (fast-forwarded on each load);
- ``switch-interval``: ``sys.setswitchinterval(0.0005)`` (default 5 ms): a thread back from the
  database waits less for the GIL while the event loop or another thread runs Python.

    BENCH_STATS_FILE=/tmp/w.json LONGHAUL_...=... python -m bench.instrumented_worker
"""

from __future__ import annotations

import collections
import functools
import json
import os
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from eventsourcing.application import AggregateNotFoundError
from eventsourcing.persistence import RecordConflictError

from domain.task import Task
from longhaul import cli, wiring
from store.log import PostgresRunQueueRecorder, TaskApplication, TaskNotFoundError
from store.log import application as eventstore
from store.log import config as store_config
from workers.lease import LeasedTask
from workers.worker import Worker

STATS: dict[str, Any] = collections.defaultdict(float)
GROUP_SIZES: collections.Counter[int] = collections.Counter()
LOCK = threading.Lock()


def _count(name: str, seconds: float) -> None:
    with LOCK:
        STATS[f"{name}.calls"] += 1
        STATS[f"{name}.seconds"] += seconds


def _timed_sync(name: str, fn: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        t0 = time.perf_counter()
        try:
            return fn(*args, **kwargs)
        finally:
            _count(name, time.perf_counter() - t0)

    return wrapper


def _timed_async(name: str, fn: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(fn)
    async def wrapper(*args: Any, **kwargs: Any) -> Any:
        t0 = time.perf_counter()
        try:
            result = await fn(*args, **kwargs)
        except BaseException:
            _count(name + ".raised", 0.0)
            raise
        finally:
            _count(name, time.perf_counter() - t0)
        if result is None:
            _count(name + ".returned_none", 0.0)
        return result

    return wrapper


def plain_projector(aggregate: Any, events: Any) -> Any:
    for event in events:
        aggregate = event.mutate(aggregate)
    return aggregate


def install_what_ifs(names: set[str]) -> None:
    if "no-pre-ping" in names:
        original_env = store_config.postgres_env

        def postgres_env(config: store_config.StoreConfig) -> dict[str, str]:
            return {**original_env(config), "POSTGRES_PRE_PING": "n"}

        eventstore.postgres_env = postgres_env  # type: ignore[attr-defined]  # where the application calls it
    if "plain-projector" in names:

        def get(self: TaskApplication, task_id: Any, version: int | None = None) -> Task:
            try:
                task = self.repository.get(task_id, version=version, projector_func=plain_projector)
            except AggregateNotFoundError as error:
                raise TaskNotFoundError(str(task_id)) from error
            assert isinstance(task, Task)
            return task

        TaskApplication.get = get  # type: ignore[method-assign]
    if "cache" in names:
        original_build = wiring.build_store

        def build_store(
            settings: Any, *, pool_size: int = 5, cache_size: int = 0, pre_ping: bool = True
        ) -> TaskApplication:
            return original_build(settings, pool_size=pool_size, cache_size=1024, pre_ping=pre_ping)

        wiring.build_store = build_store
    if "switch-interval" in names:
        sys.setswitchinterval(0.0005)
    unknown = names - {"no-pre-ping", "plain-projector", "cache", "switch-interval"}
    if unknown:
        raise SystemExit(f"unknown BENCH_WHATIF: {sorted(unknown)}")


def install() -> None:
    install_what_ifs({n.strip() for n in os.environ.get("BENCH_WHATIF", "").split(",") if n.strip()})
    original_save = TaskApplication.save

    def save(self: TaskApplication, *objs: Any, **kwargs: Any) -> Any:
        t0 = time.perf_counter()
        try:
            return original_save(self, *objs, **kwargs)
        except RecordConflictError:
            _count("store.save.conflict", 0.0)
            raise
        finally:
            _count("store.save (one transaction)", time.perf_counter() - t0)

    original_save_each = TaskApplication.save_each

    def save_each(self: TaskApplication, *tasks: Any) -> Any:
        with LOCK:
            GROUP_SIZES[len(tasks)] += 1
        t0 = time.perf_counter()
        outcomes = original_save_each(self, *tasks)
        _count("committer.save_each (group)", time.perf_counter() - t0)
        if any(o is not None for o in outcomes):
            _count("committer.group_had_conflict", 0.0)
            with LOCK:
                STATS["committer.conflicting_tasks"] += sum(o is not None for o in outcomes)
        return outcomes

    original_append_each = TaskApplication._append_each

    def append_each(self: TaskApplication, batch: Any) -> Any:
        t0 = time.perf_counter()
        try:
            return original_append_each(self, batch)
        finally:
            _count("store.append_each (one call)", time.perf_counter() - t0)

    TaskApplication.save = save  # type: ignore[method-assign, assignment]
    TaskApplication.save_each = save_each  # type: ignore[method-assign]
    TaskApplication._append_each = append_each  # type: ignore[method-assign]
    TaskApplication.get = _timed_sync("store.get", TaskApplication.get)  # type: ignore[method-assign]
    for name in ("claimable", "owners", "next_lease_end"):
        setattr(
            PostgresRunQueueRecorder,
            name,
            _timed_sync(f"run_queue.{name}", getattr(PostgresRunQueueRecorder, name)),
        )
    Worker._claim = _timed_async("worker._claim", Worker._claim)  # type: ignore[method-assign]
    Worker._claim_some = _timed_async("worker._claim_some", Worker._claim_some)  # type: ignore[method-assign]
    LeasedTask.commit = _timed_async("lease.commit", LeasedTask.commit)  # type: ignore[method-assign]


def dump() -> None:
    path = os.environ.get("BENCH_STATS_FILE")
    if not path:
        return
    stats = {k: round(v, 4) for k, v in sorted(STATS.items())}
    stats["group_sizes"] = dict(sorted(GROUP_SIZES.items()))
    with LOCK:
        tmp = Path(f"{path}.tmp")
        tmp.write_text(json.dumps(stats, indent=2))
        tmp.replace(path)


def dump_every(seconds: float) -> None:
    def loop() -> None:
        while True:
            time.sleep(seconds)
            dump()

    threading.Thread(target=loop, daemon=True).start()


if __name__ == "__main__":
    install()
    if os.environ.get("BENCH_STATS_EVERY"):
        dump_every(float(os.environ["BENCH_STATS_EVERY"]))
    try:
        code = cli.main(["worker"])
    finally:
        dump()
    sys.exit(code)
