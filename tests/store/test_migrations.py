"""Schema migrations: from nothing, from the schema of releases before them, refusals, races."""

from __future__ import annotations

import json
import re
import threading
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from uuid import UUID

import psycopg
import pytest
from psycopg import sql

from domain.states import INTERRUPTED, RUNNABLE, TERMINAL
from store.evidence.chain import GENESIS, chain_hash, check_task
from store.log import migrations
from store.log.application import TaskApplication
from store.log.config import StoreConfig
from store.log.locks import advisory_lock, ddl_lock_name
from store.log.migrations import VERSION_TABLE, SchemaTooNewError
from store.log.postgres import PostgresRunQueueRecorder
from store.log.run_queue import RunQueueRow
from tests.support.tasks import new_task

FIXTURES = Path(__file__).parent / "fixtures"
LATEST = migrations.latest_version()
VIEW_TABLES = {
    "longhaul_task_view",
    "longhaul_task_view_tracking",
    "longhaul_retention_index",
    "longhaul_retention_index_tracking",
}
"""Added by 0003 and 0005, after versioned migrations began: a schema of version 0 never had them."""
DELIVERY_TABLES = {"longhaul_deliveries", "longhaul_delivery_attempts"}
"""Added by 0004 (the webhook delivery record)."""
CHAIN_TABLES = {"longhaul_event_chain"}
"""Added by 0006 (the hash chain of events), with a backfill of the events stored before it."""
KEY_TABLES = {"longhaul_task_keys"}
"""Added by 0007 (each task's secret key, outside the log)."""
MERKLE_TABLES = {
    "longhaul_merkle_leaves",
    "longhaul_merkle_nodes",
    "longhaul_checkpoints",
    "longhaul_purged_tasks",
    "longhaul_sequencer_position",
}
"""Added by 0008 (the sequencer's Merkle log, its checkpoints, the purged tasks)."""
UPLOAD_TABLES = {"longhaul_uploads"}
"""Added by 0012 (which tenant uploaded which file)."""
FILE_TABLES = {
    "longhaul_file_index",
    "longhaul_file_index_tracking",
    "longhaul_file_deletions",
    "longhaul_archived_files",
    "longhaul_erased_tasks",
}
"""Added by 0013 (which stored files are still held: the file index, candidates, archives, erasures)."""
NEW_TABLES = (
    VIEW_TABLES | DELIVERY_TABLES | CHAIN_TABLES | KEY_TABLES | MERKLE_TABLES | UPLOAD_TABLES | FILE_TABLES
)
OWN_TABLES = {"longhaul_run_queue", "longhaul_relay_position", VERSION_TABLE} | NEW_TABLES
LIBRARY_TABLES = {"longhaul_events", "longhaul_snapshots"}


def _execute(config: StoreConfig, statement: Any, params: Any = None) -> list[tuple[Any, ...]]:
    with psycopg.connect(config.database_url, autocommit=True) as conn:
        cursor = conn.execute(statement, params)
        return cursor.fetchall() if cursor.description else []


def _tables(config: StoreConfig) -> set[str]:
    rows = _execute(config, "SELECT tablename FROM pg_tables WHERE schemaname = %s", (config.schema,))
    return {name for (name,) in rows}


def _versions(config: StoreConfig) -> list[tuple[int, str]]:
    table = sql.Identifier(config.schema, VERSION_TABLE)
    rows = _execute(config, sql.SQL("SELECT version, name FROM {} ORDER BY version").format(table))
    return [(version, name) for version, name in rows]


def _all_versions() -> list[tuple[int, str]]:
    return [(m.version, m.name) for m in migrations.known()]


def test_the_migrations_are_numbered_in_order_each_number_once() -> None:
    known = migrations.known()
    versions = [m.version for m in known]
    assert versions[0] == 1
    assert versions == sorted(set(versions))
    assert [m.label for m in known][:3] == ["0001_run_queue", "0002_relay_position", "0003_task_view"]
    for migration in known:
        assert "{schema}" in migration.template
        assert migration.statement("s").as_string(None).count('"s".') >= 1


# ---------------------------------------------------------------------- from an empty database


def test_opening_a_store_on_an_empty_database_migrates_it(store_config: StoreConfig) -> None:
    store = TaskApplication(store_config)
    try:
        report = store.schema_migrations
        assert report is not None
        assert (report.found, report.version) == (0, LATEST)
        assert [m.version for m in report.applied] == [m.version for m in migrations.known()]
        assert _tables(store_config) >= OWN_TABLES | LIBRARY_TABLES
        assert _versions(store_config) == _all_versions()
        task = new_task(datetime.now(UTC))
        store.save_tasks(task)
        assert store.run_queue.row(task.id) == RunQueueRow.of(task)
    finally:
        store.close()


def test_the_partial_indexes_match_the_queries(store_config: StoreConfig) -> None:
    """The index predicates name the same states as the domain (a change needs a migration)."""
    TaskApplication(store_config).close()
    rows = _execute(
        store_config,
        "SELECT indexname, indexdef FROM pg_indexes WHERE schemaname = %s AND tablename = %s",
        (store_config.schema, "longhaul_run_queue"),
    )
    states = {name: set(re.findall(r"'(TASK_STATE_[A-Z_]+)'", definition)) for name, definition in rows}
    assert states["longhaul_run_queue_claim"] == set(RUNNABLE)
    assert states["longhaul_run_queue_deadline"] == set(INTERRUPTED)
    assert states["longhaul_run_queue_retention"] == set(TERMINAL)
    assert states["longhaul_run_queue_live"] == set(TERMINAL)


def test_longhaul_migrate_applies_and_reports(cli: Any, store_config: StoreConfig) -> None:
    code, out, _ = cli("migrate")
    assert code == 0
    lines = out.splitlines()
    assert lines[: len(migrations.known())] == [f"applied {m.label}" for m in migrations.known()]
    assert lines[-1] == f"schema {store_config.schema}: migrated from version 0 to {LATEST}"
    assert _tables(store_config) >= OWN_TABLES | LIBRARY_TABLES


# ---------------------------------------------------------------------- from version 0


@pytest.fixture
def schema_v0(store_config: StoreConfig) -> StoreConfig:
    """This test's schema as releases before versioned migrations left it, with some data."""
    dump = (FIXTURES / "schema_v0.sql").read_text()
    fixture = json.loads((FIXTURES / "stored_events_v0.json").read_text())
    schema = sql.Identifier(store_config.schema)
    with psycopg.connect(store_config.database_url, autocommit=True) as conn:
        conn.execute(dump.replace("{schema}", store_config.schema).encode())
        for kind in ("events", "snapshots"):
            table = sql.Identifier(f"longhaul_{kind}")
            for e in fixture[kind]:
                conn.execute(
                    sql.SQL(
                        "INSERT INTO {}.{} (originator_id, originator_version, topic, state)"
                        " VALUES (%s, %s, %s, %s)"
                    ).format(schema, table),
                    (UUID(e["originator_id"]), e["originator_version"], e["topic"], e["state"].encode()),
                )
        for row in V0_ROWS:
            conn.execute(
                sql.SQL("INSERT INTO {}.longhaul_run_queue VALUES ({})").format(
                    schema, sql.SQL(", ").join(sql.Placeholder() * len(vars(row)))
                ),
                tuple(vars(row).values()),
            )
        conn.execute(
            sql.SQL("INSERT INTO {}.longhaul_relay_position VALUES ('S', 34)").format(schema),
        )
    return store_config


V0_ROWS = [
    RunQueueRow(
        task_id=UUID(int=1),
        version=21,
        tenant="acme",
        state="TASK_STATE_COMPLETED",
        skill="access-review",
        skill_version=1,
        next_step=2,
        lease_owner=None,
        lease_until=None,
        deadline=None,
        updated_at=datetime(2026, 11, 30, 12, 1, 40, tzinfo=UTC),
        expired=True,
    ),
    RunQueueRow(
        task_id=UUID(int=5),
        version=4,
        tenant="acme",
        state="TASK_STATE_SUBMITTED",
        skill="echo",
        skill_version=1,
        next_step=0,
        lease_owner=None,
        lease_until=None,
        deadline=None,
        updated_at=datetime(2026, 11, 30, 12, 0, 3, tzinfo=UTC),
        expired=False,
    ),
]


def test_a_schema_from_before_migrations_is_adopted_with_its_data(schema_v0: StoreConfig) -> None:
    before = _tables(schema_v0)
    assert VERSION_TABLE not in before

    store = TaskApplication(schema_v0)
    try:
        report = store.schema_migrations
        assert report is not None
        assert (report.found, report.version) == (0, LATEST)
        assert _tables(schema_v0) == before | {VERSION_TABLE} | NEW_TABLES
        assert _versions(schema_v0) == _all_versions()
        for row in V0_ROWS:
            assert store.run_queue.row(row.task_id) == row
        assert store.run_queue.claimable(datetime.now(UTC), 10, [("echo", 1)]) == [UUID(int=5)]
        assert store.get(UUID(int=1)).version == 21  # the log, and its snapshot, load
        position = _execute(
            schema_v0,
            sql.SQL("SELECT * FROM {}.longhaul_relay_position").format(sql.Identifier(schema_v0.schema)),
        )
        assert position == [("S", 34)]
        # The events stored before chains were chained by 0006's SQL as store/evidence/chain.py chains them.
        recorder = store.recorder
        assert isinstance(recorder, PostgresRunQueueRecorder)
        histories = dict(recorder.chained_histories())
        assert len(histories) == 5
        assert [r.version for r in histories[UUID(int=1)]] == list(range(1, 22))
        for task_id, rows in histories.items():
            assert check_task(task_id, rows) == []
            first = rows[0]
            assert first.topic is not None
            assert first.state is not None
            assert first.chain == chain_hash(task_id, 1, first.topic, first.state, GENESIS)
        task = new_task(datetime.now(UTC))  # and it takes new appends, with their rows
        store.save_tasks(task)
        assert store.run_queue.row(task.id) == RunQueueRow.of(task)
        old = store.get(UUID(int=5))  # a task from before chains goes on chaining from its backfill
        old.expire(now=datetime.now(UTC), reason="test")
        store.save_tasks(old)
        assert check_task(old.id, recorder.chain_rows([old.id])[old.id]) == []
        assert len(recorder.chain_rows([old.id])[old.id]) == 5
    finally:
        store.close()


# ---------------------------------------------------------------------- refusals, repeats, races


def _make_newer(config: StoreConfig) -> None:
    TaskApplication(config).close()
    _execute(
        config,
        sql.SQL("INSERT INTO {} (version, name) VALUES (%s, 'from_the_future')").format(
            sql.Identifier(config.schema, VERSION_TABLE)
        ),
        (LATEST + 1,),
    )


def test_a_newer_schema_is_refused_by_every_process(cli: Any, store_config: StoreConfig) -> None:
    _make_newer(store_config)

    with pytest.raises(SchemaTooNewError, match=f"version {LATEST + 1}.*up to {LATEST}"):
        TaskApplication(store_config)
    for command in ("migrate", "worker", "sweeper", "history"):
        args = [command, "00000000-0000-0000-0000-000000000001"] if command == "history" else [command]
        code, _, err = cli(*args)
        assert code == 1, command
        assert f"is at version {LATEST + 1}" in err
        assert f"knows versions up to {LATEST} only" in err
        assert "Run that release (or a newer one)" in err
    assert _versions(store_config)[-1] == (LATEST + 1, "from_the_future")  # nothing was changed


def test_migrating_again_changes_nothing(cli: Any, store_config: StoreConfig) -> None:
    assert cli("migrate")[0] == 0
    code, out, _ = cli("migrate")
    assert code == 0
    assert out.splitlines() == [f"schema {store_config.schema}: at version {LATEST}, nothing to apply"]
    with advisory_lock(store_config.database_url, ddl_lock_name(store_config.schema)) as conn:
        report = migrations.migrate(conn, store_config.schema)
    assert (report.found, report.applied, report.version) == (LATEST, (), LATEST)
    assert _versions(store_config) == _all_versions()


def test_a_migration_numbered_below_the_schemas_version_is_still_applied(store_config: StoreConfig) -> None:
    """Numbers may skip (a branch merged later takes one below): every unapplied one is pending."""
    TaskApplication(store_config).close()
    schema = sql.Identifier(store_config.schema)
    _execute(
        store_config,
        sql.SQL("DROP TABLE {}.longhaul_task_view, {}.longhaul_task_view_tracking").format(schema, schema),
    )
    _execute(
        store_config,
        sql.SQL("DELETE FROM {}.{} WHERE version = 3").format(schema, sql.Identifier(VERSION_TABLE)),
    )
    with advisory_lock(store_config.database_url, ddl_lock_name(store_config.schema)) as conn:
        report = migrations.migrate(conn, store_config.schema)
    assert [m.label for m in report.applied] == ["0003_task_view"]
    assert (report.found, report.version) == (LATEST, LATEST)
    assert _tables(store_config) >= VIEW_TABLES
    assert _versions(store_config) == _all_versions()


def test_processes_starting_together_migrate_once(store_config: StoreConfig) -> None:
    barrier = threading.Barrier(4)
    stores: list[TaskApplication] = []
    errors: list[BaseException] = []

    def open_store() -> None:
        barrier.wait()
        try:
            stores.append(TaskApplication(store_config))
        except BaseException as error:
            errors.append(error)

    threads = [threading.Thread(target=open_store) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    try:
        assert errors == []
        applied = [s.schema_migrations.applied for s in stores if s.schema_migrations is not None]
        assert sorted(len(a) for a in applied) == [0, 0, 0, len(migrations.known())]  # one of them did it all
        assert _versions(store_config) == _all_versions()
    finally:
        for store in stores:
            store.close()


def test_memory_has_nothing_to_migrate_and_no_relay(cli: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LONGHAUL_STORE", "memory")
    code, _, err = cli("migrate")
    assert code == 1
    assert "`longhaul migrate` needs LONGHAUL_STORE=postgres" in err
    monkeypatch.setenv("LONGHAUL_NATS_URL", "nats://127.0.0.1:1")
    code, _, err = cli("relay")
    assert code == 1
    assert "the relay needs LONGHAUL_STORE=postgres" in err
