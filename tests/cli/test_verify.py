"""``longhaul verify``: the log altered with SQL behind longhaul's back, and verify names exactly that.

Each test builds a few tasks on real PostgreSQL (several commits each, some grouped, some from a
second application that knows no chain heads), changes the stored log the way someone with write
access to the database could, and checks that ``verify`` prints one line per damaged version,
naming the task, the version and the kind of damage, and nothing about the untouched tasks.
"""

from __future__ import annotations

import gzip
import json
import os
import subprocess
import sys
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any
from uuid import UUID

import psycopg
import pytest
from psycopg import sql

from domain.task import Task
from longhaul import commands
from longhaul.cli import SIGPIPE_EXIT
from store.application import TaskApplication
from store.config import StoreConfig
from store.postgres import CHAIN_TABLE, PostgresRunQueueRecorder
from tests.support.tasks import new_task
from workers.archive import archive_expired

Cli = Callable[..., tuple[int, str, str]]
START = datetime(2026, 5, 1, 9, 0, tzinfo=UTC)
CHECKPOINTS = 4
"""Each task: Submitted, LeaseGranted, 4 CheckpointSaved (versions 3-6), Completed (version 7)."""


def _worked(store: TaskApplication, count: int = 3) -> list[Task]:
    tasks = [new_task(START) for _ in range(count)]
    store.save_tasks(*tasks)  # one group commit
    until = START + timedelta(minutes=5)
    for task in tasks:
        task.grant_lease(worker="w-1", now=START, until=until)
    store.save_tasks(*tasks)
    for n in range(CHECKPOINTS):
        for task in tasks:
            task.save_checkpoint(epoch=1, now=START, step=0, checkpoint={"n": n}, lease_until=until)
            store.save_tasks(task)
    other = TaskApplication(store.config)  # a process that committed none of them before
    try:
        for task in tasks:
            again = other.get(task.id)
            again.complete(epoch=1, now=START, message=None)
            other.save_tasks(again)
    finally:
        other.close()
    return tasks


def _execute(config: StoreConfig, statement: str, params: Any = ()) -> list[tuple[Any, ...]]:
    with psycopg.connect(config.database_url, autocommit=True) as conn:
        conn.execute(sql.SQL("SET search_path TO {}").format(sql.Identifier(config.schema)))
        cursor = conn.execute(statement.encode(), params)
        return cursor.fetchall() if cursor.description else []


def _state(config: StoreConfig, task_id: UUID, version: int) -> bytes:
    rows = _execute(
        config,
        "SELECT state FROM longhaul_events WHERE originator_id = %s AND originator_version = %s",
        (task_id, version),
    )
    return bytes(rows[0][0])


def _faults(out: str) -> list[str]:
    return [line for line in out.splitlines() if line.startswith("task ")]


@pytest.fixture
def tasks(postgres_store: TaskApplication) -> list[Task]:
    return _worked(postgres_store)


def test_an_untouched_store_verifies(tasks: list[Task], cli: Cli) -> None:
    code, out, _ = cli("verify")
    assert code == 0
    assert _faults(out) == []
    assert out.strip().endswith(f"every chain verifies ({len(tasks)} tasks, {len(tasks) * 7} events)")


def test_one_changed_byte_of_an_event_is_named(
    tasks: list[Task], cli: Cli, store_config: StoreConfig
) -> None:
    target = tasks[1]
    state = bytearray(_state(store_config, target.id, 4))
    at = state.index(b'"n":1') + 4
    state[at] = ord("7")  # {"n":1} becomes {"n":7}
    _execute(
        store_config,
        "UPDATE longhaul_events SET state = %s WHERE originator_id = %s AND originator_version = 4",
        (bytes(state), target.id),
    )
    code, out, _ = cli("verify")
    assert code == 1
    assert _faults(out) == [
        f"task {target.id} version 4: hash-mismatch: the event does not match its hash: it was altered"
    ]
    assert f"1 faults in 1 of {len(tasks)} tasks" in out


def test_a_deleted_event_is_named(tasks: list[Task], cli: Cli, store_config: StoreConfig) -> None:
    target = tasks[0]
    _execute(
        store_config,
        "DELETE FROM longhaul_events WHERE originator_id = %s AND originator_version = 3",
        (target.id,),
    )
    code, out, _ = cli("verify")
    assert code == 1
    assert _faults(out) == [
        f"task {target.id} version 3: event-deleted: its hash is stored but the event is gone"
    ]


def test_an_event_deleted_with_its_hash_is_a_missing_version(
    tasks: list[Task], cli: Cli, store_config: StoreConfig
) -> None:
    target = tasks[2]
    for table, column, version in (("longhaul_events", "originator", 5), (CHAIN_TABLE, "task", 5)):
        key = "originator_version" if column == "originator" else "version"
        _execute(
            store_config, f"DELETE FROM {table} WHERE {column}_id = %s AND {key} = %s", (target.id, version)
        )
    code, out, _ = cli("verify")
    assert code == 1
    assert [line.split(": ")[0:2] for line in _faults(out)] == [
        [f"task {target.id} version 5", "missing-version"]
    ]


def test_an_inserted_event_that_renumbers_the_rest_is_named_at_every_moved_version(
    tasks: list[Task], cli: Cli, store_config: StoreConfig
) -> None:
    target = tasks[1]
    forged = _state(store_config, target.id, 3).replace(b'"n":0', b'"n":99')
    topic = _execute(
        store_config,
        "SELECT topic FROM longhaul_events WHERE originator_id = %s AND originator_version = 3",
        (target.id,),
    )[0][0]
    # Make room at version 3 (moving 3..7 up by one, through a range no version uses), insert there.
    _execute(
        store_config,
        "UPDATE longhaul_events SET originator_version = originator_version + 1000"
        " WHERE originator_id = %s AND originator_version >= 3",
        (target.id,),
    )
    _execute(
        store_config,
        "UPDATE longhaul_events SET originator_version = originator_version - 999"
        " WHERE originator_id = %s AND originator_version > 1000",
        (target.id,),
    )
    _execute(
        store_config,
        "INSERT INTO longhaul_events (originator_id, originator_version, topic, state)"
        " VALUES (%s, 3, %s, %s)",
        (target.id, topic, forged),
    )
    code, out, _ = cli("verify")
    assert code == 1
    assert _faults(out) == [
        f"task {target.id} version 3: hash-mismatch: the event does not match its hash: it was altered",
        *(
            f"task {target.id} version {v + 1}: out-of-order: holds the event of version {v}"
            for v in range(3, 8)
        ),
    ]


def test_two_swapped_payloads_are_named_at_both_versions(
    tasks: list[Task], cli: Cli, store_config: StoreConfig
) -> None:
    target = tasks[0]
    first, second = _state(store_config, target.id, 3), _state(store_config, target.id, 5)
    for version, state in ((3, second), (5, first)):
        _execute(
            store_config,
            "UPDATE longhaul_events SET state = %s WHERE originator_id = %s AND originator_version = %s",
            (state, target.id, version),
        )
    code, out, _ = cli("verify")
    assert code == 1
    assert _faults(out) == [
        f"task {target.id} version 3: out-of-order: holds the event of version 5",
        f"task {target.id} version 5: out-of-order: holds the event of version 3",
    ]


def test_an_event_appended_behind_longhauls_back_is_named(
    tasks: list[Task], cli: Cli, store_config: StoreConfig
) -> None:
    target = tasks[2]  # a replay of its last event, appended as a new version
    _execute(
        store_config,
        "INSERT INTO longhaul_events (originator_id, originator_version, topic, state)"
        " SELECT originator_id, 8, topic, state FROM longhaul_events"
        " WHERE originator_id = %s AND originator_version = 7",
        (target.id,),
    )
    code, out, _ = cli("verify")
    assert code == 1
    assert _faults(out) == [
        f"task {target.id} version 8: extra-event: a copy of the event of version 7, with no hash"
    ]


def test_a_whole_deleted_task_is_not_caught_by_chains_alone(
    tasks: list[Task], cli: Cli, store_config: StoreConfig
) -> None:
    """Documented in docs/audit.md: the Merkle tree over all events is what will catch this."""
    for table, column in (("longhaul_events", "originator_id"), (CHAIN_TABLE, "task_id")):
        _execute(store_config, f"DELETE FROM {table} WHERE {column} = %s", (tasks[0].id,))
    code, out, _ = cli("verify")
    assert code == 0
    assert f"({len(tasks) - 1} tasks," in out


def test_an_archive_carries_the_chain_and_verifies_offline(
    postgres_store: TaskApplication, tasks: list[Task], cli: Cli, tmp_path: Path
) -> None:
    later = START + timedelta(days=60)
    for task in tasks:
        postgres_store.expire(task.id, retention=timedelta(days=30), clock=lambda: later)
    run = archive_expired(postgres_store, tmp_path, clock=lambda: later)
    assert run.path is not None
    assert len(run.purged) == len(tasks)
    recorder = postgres_store.recorder
    assert isinstance(recorder, PostgresRunQueueRecorder)
    assert recorder.chain_rows([t.id for t in tasks]) == {}  # the purge took the chain rows too

    code, out, _ = cli("verify", "--archive", str(run.path))
    assert code == 0, out
    assert out.strip().endswith(f"every chain verifies ({len(tasks)} tasks, {len(tasks) * 8} events)")

    # Alter one event in the file (and fix up nothing else): verify names it.
    with gzip.open(run.path, "rt", encoding="utf-8") as lines:
        parsed = [json.loads(line) for line in lines]
    victim = next(p for p in parsed if p["type"] == "event" and p["version"] == 4)
    victim["state"] = victim["state"].replace('"n":1', '"n":5')
    tampered = tmp_path / "tampered.jsonl.gz"
    with gzip.open(tampered, "wt", encoding="utf-8") as out_file:
        out_file.writelines(json.dumps(p, ensure_ascii=False) + "\n" for p in parsed)
    code, out, _ = cli("verify", "--archive", str(tampered))
    assert code == 1
    assert _faults(out) == [
        f"task {victim['taskId']} version 4: hash-mismatch: the event does not match its hash: it was altered"
    ]


def test_verify_piped_into_head_ends_quietly(tasks: list[Task], store_config: StoreConfig) -> None:
    """Many faults, one line read: the reader leaves and verify stops without a traceback."""
    _execute(store_config, f"UPDATE {CHAIN_TABLE} SET hash = sha256(hash)")  # every link broken
    env = {k: v for k, v in os.environ.items() if not k.startswith("LONGHAUL_")}
    env |= {
        "LONGHAUL_DATABASE_URL": store_config.database_url,
        "LONGHAUL_DATABASE_SCHEMA": store_config.schema,
    }
    command = f'"{sys.executable}" -m longhaul.cli verify'
    done = subprocess.run(
        ["bash", "-c", f'{command} | head -1; echo "status ${{PIPESTATUS[0]}}"'],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    lines = done.stdout.splitlines()
    assert len(lines) == 2
    assert lines[0].startswith("task ")
    assert lines[1] in (f"status {SIGPIPE_EXIT}", "status 1")  # head may leave after the last write
    assert "Traceback" not in done.stderr


def test_progress_goes_to_stderr(tasks: list[Task], cli: Cli, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(commands, "VERIFY_PROGRESS_S", 0.0)  # every task, as on a large store
    code, out, err = cli("verify")
    assert code == 0
    progress = [line for line in err.splitlines() if line.startswith("verify: ")]
    assert [line.split(",")[0] for line in progress] == [
        f"verify: {n} tasks" for n in range(1, len(tasks) + 1)
    ]
    assert "verify:" not in out
