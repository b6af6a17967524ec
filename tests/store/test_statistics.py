"""The planner's statistics kept when autovacuum is off (``store.log.statistics``, ADR 0047)."""

from __future__ import annotations

import time
from datetime import UTC, datetime, timedelta

import psycopg

from store.log.application import TaskApplication
from store.log.config import MemoryConfig, StoreConfig
from store.log.statistics import TableStatistics
from tests.support.tasks import new_task
from workers.sweeper import Sweeper

NOW = datetime(2026, 12, 3, 8, 0, tzinfo=UTC)
TASKS = 80  # past autovacuum's default analyze threshold of 50 changed rows on an empty table


def _statistics(store: TaskApplication) -> TableStatistics:
    found = store.statistics
    assert found is not None
    return found


def _grow(store: TaskApplication) -> None:
    for _ in range(TASKS):
        task = new_task(NOW)
        task.grant_lease(worker="w", now=NOW, until=NOW + timedelta(minutes=5))
        store.save_tasks(task)


def _until_stale(statistics: TableStatistics, *tables: str) -> list[str]:
    """The stale tables once ``tables`` are among them (the server publishes its counts within ~1 s)."""
    deadline = time.monotonic() + 15
    while True:
        stale = statistics.stale()
        if set(tables) <= set(stale) or time.monotonic() > deadline:
            return stale
        time.sleep(0.2)


def _last_analyze(store_config: StoreConfig, table: str) -> datetime | None:
    with psycopg.connect(store_config.database_url, autocommit=True) as conn:
        row = conn.execute(
            "SELECT last_analyze FROM pg_stat_user_tables WHERE schemaname = %s AND relname = %s",
            (store_config.schema, table),
        ).fetchone()
    assert row is not None
    value = row[0]
    assert value is None or isinstance(value, datetime)
    return value


def test_with_autovacuum_off_the_tables_that_changed_are_analyzed_once(
    store: TaskApplication, store_config: StoreConfig
) -> None:
    statistics = _statistics(store)
    _grow(store)
    stale = _until_stale(statistics, "longhaul_events", "longhaul_run_queue")
    assert {"longhaul_events", "longhaul_run_queue"} <= set(stale)
    assert _last_analyze(store_config, "longhaul_run_queue") is None
    analyzed = statistics.refresh(autovacuum_on=False)
    assert set(stale) <= set(analyzed)
    assert _last_analyze(store_config, "longhaul_run_queue") is not None
    assert statistics.stale() == []  # counted from this analyze on
    assert statistics.refresh(autovacuum_on=False) == []  # nothing changed since


def test_with_autovacuum_on_nothing_is_analyzed(store: TaskApplication, store_config: StoreConfig) -> None:
    statistics = _statistics(store)
    _grow(store)
    assert "longhaul_run_queue" in _until_stale(statistics, "longhaul_run_queue")
    assert statistics.refresh(autovacuum_on=True) == []
    assert _last_analyze(store_config, "longhaul_run_queue") is None


def test_the_sweeper_follows_the_servers_setting(store: TaskApplication, store_config: StoreConfig) -> None:
    statistics = _statistics(store)
    _grow(store)
    _until_stale(statistics, "longhaul_run_queue")
    sweeper = Sweeper(store=store, clock=lambda: NOW, retention=timedelta(days=30), interval=1.0)
    analyzed = sweeper.refresh_statistics()
    if statistics.autovacuum_on():
        assert analyzed == []
    else:
        assert "longhaul_run_queue" in analyzed
        assert _last_analyze(store_config, "longhaul_run_queue") is not None


def test_a_memory_store_has_no_statistics() -> None:
    store = TaskApplication(MemoryConfig())
    try:
        assert store.statistics is None
        sweeper = Sweeper(store=store, clock=lambda: NOW, retention=timedelta(days=30), interval=1.0)
        assert sweeper.refresh_statistics() == []
    finally:
        store.close()


def test_a_table_below_the_threshold_is_not_stale(store: TaskApplication, store_config: StoreConfig) -> None:
    statistics = _statistics(store)
    for _ in range(10):  # 10 run-queue rows: under the threshold of 50 on an empty table
        store.save_tasks(new_task(NOW))
    deadline = time.monotonic() + 15
    with psycopg.connect(store_config.database_url, autocommit=True) as conn:
        while time.monotonic() < deadline:  # until the server published the changes
            row = conn.execute(
                "SELECT n_mod_since_analyze FROM pg_stat_user_tables WHERE schemaname = %s"
                " AND relname = 'longhaul_run_queue'",
                (store_config.schema,),
            ).fetchone()
            if row is not None and row[0] >= 10:
                break
            time.sleep(0.2)
    assert row is not None
    assert row[0] >= 10
    assert "longhaul_run_queue" not in statistics.stale()
    assert "longhaul_run_queue" not in statistics.refresh(autovacuum_on=False)
