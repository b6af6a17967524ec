"""``longhaul verify``: the log altered with SQL behind longhaul's back, and verify names exactly that.

Each test builds a few tasks on real PostgreSQL (several commits each, some grouped, some from a
second application that knows no chain heads), sequences them into the Merkle log with two signed
checkpoints (``catch_up``, as the sequencer would), changes the stored log, the tree or the
checkpoints the way someone with write access to the database could, and checks that ``verify``
prints one line per damage, naming the task and version (or the checkpoint, or the leaves) and the
kind of damage, and nothing about the untouched tasks.
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
from longhaul import evidence_commands
from longhaul.cli import SIGPIPE_EXIT
from store.evidence.archive import archive_expired
from store.evidence.chain import chain_hash
from store.evidence.key_files import create_signer_key
from store.evidence.merkle_log import MerkleLog, catch_up
from store.evidence.signed_notes import SignerKey
from store.log.application import TaskApplication
from store.log.config import StoreConfig
from store.log.postgres import CHAIN_TABLE, PostgresRunQueueRecorder
from tests.support.tasks import new_task

Cli = Callable[..., tuple[int, str, str]]
START = datetime(2026, 5, 1, 9, 0, tzinfo=UTC)
CHECKPOINTS = 4
"""Each task: Submitted, LeaseGranted, 4 CheckpointSaved (versions 3-6), Completed (version 7)."""
TASKS = 3
FIRST_SIZE = TASKS * 6
"""The first signed checkpoint covers every task up to its last CheckpointSaved; the second all."""


def _log(store: TaskApplication) -> MerkleLog:
    log = store.merkle_log
    assert log is not None
    return log


def _sign(store: TaskApplication, signer: SignerKey) -> None:
    catch_up(_log(store), store.recorder.select_notifications, signer, START)


def _worked(store: TaskApplication, count: int = TASKS, signer: SignerKey | None = None) -> list[Task]:
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
    if signer is not None:
        _sign(store, signer)
    other = TaskApplication(store.config)  # a process that committed none of them before
    try:
        for task in tasks:
            again = other.get(task.id)
            again.complete(epoch=1, now=START, message=None)
            other.save_tasks(again)
    finally:
        other.close()
    if signer is not None:
        _sign(store, signer)
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
    """Every fault line: all but the summary lines (``schema ...:``, ``<file>: ...``)."""
    return [
        line
        for line in out.splitlines()
        if line.split(" ")[0] in ("task", "checkpoint", "checkpoints", "leaf", "leaves")
    ]


def _leaves(config: StoreConfig, task_id: UUID) -> list[int]:
    rows = _execute(
        config, "SELECT leaf_index FROM longhaul_merkle_leaves WHERE task_id = %s ORDER BY 1", (task_id,)
    )
    return [row[0] for row in rows]


def _counts(
    tasks: int, events: int, leaves: int, *, checkpoints: int = 2, purged: int = 0, unsequenced: int = 0
) -> str:
    return (
        f"{tasks} tasks, {events} events, {leaves} leaves, {checkpoints} checkpoints, {purged} purged,"
        f" {unsequenced} not yet sequenced"
    )


@pytest.fixture
def signer(tmp_path: Path) -> SignerKey:
    return create_signer_key(tmp_path / "audit-key", "longhaul/test")


@pytest.fixture
def keyed(cli: Cli, signer: SignerKey, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Cli:
    """``cli`` with the signer key's file configured: verify checks the checkpoints with its verifier."""
    monkeypatch.setenv("LONGHAUL_AUDIT_KEY_FILE", str(tmp_path / "audit-key"))
    return cli


@pytest.fixture
def tasks(postgres_store: TaskApplication, signer: SignerKey) -> list[Task]:
    return _worked(postgres_store, signer=signer)


def test_an_untouched_store_verifies(tasks: list[Task], keyed: Cli) -> None:
    code, out, _ = keyed("verify")
    assert code == 0, out
    assert _faults(out) == []
    events = len(tasks) * 7
    assert out.strip().endswith(
        f"every chain and the signed log verify ({_counts(len(tasks), events, events)})"
    )


def test_a_store_never_sequenced_says_so_and_checks_the_chains(
    postgres_store: TaskApplication, cli: Cli
) -> None:
    tasks = _worked(postgres_store)
    code, out, _ = cli("verify")  # no key needed: there is nothing signed
    assert code == 0, out
    events = len(tasks) * 7
    assert "no signed checkpoint yet: only the chains were checked against the log" in out
    assert out.strip().endswith(f"({_counts(len(tasks), events, 0, checkpoints=0, unsequenced=events)})")


def test_checkpoints_without_a_verifier_key_are_refused(tasks: list[Task], cli: Cli) -> None:
    code, _, err = cli("verify")
    assert code == 1
    assert "no verifier key to check the signed checkpoints with" in err


def test_a_checkpoint_of_another_key_is_named(
    tasks: list[Task], keyed: Cli, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    other = create_signer_key(tmp_path / "other-key", "longhaul/other")
    monkeypatch.setenv("LONGHAUL_AUDIT_KEY_FILE", str(tmp_path / "other-key"))
    code, out, _ = keyed("verify")
    assert code == 1
    assert [line.split(": ")[:2] for line in _faults(out)] == [
        [f"checkpoint {size}", "bad-signature"] for size in (FIRST_SIZE, len(tasks) * 7)
    ]
    assert "no signature by a known key (the note is signed by longhaul/test+" in out
    assert other.name not in out


def test_one_changed_byte_of_an_event_is_named(
    tasks: list[Task], keyed: Cli, store_config: StoreConfig
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
    code, out, _ = keyed("verify")
    assert code == 1
    assert _faults(out) == [
        f"task {target.id} version 4: hash-mismatch: the event does not match its hash: it was altered"
    ]
    assert "1 faults (1 in chains, 0 in the signed log; 3 tasks, 21 events, 21 leaves," in out


def test_a_deleted_event_is_named(tasks: list[Task], keyed: Cli, store_config: StoreConfig) -> None:
    target = tasks[0]
    _execute(
        store_config,
        "DELETE FROM longhaul_events WHERE originator_id = %s AND originator_version = 3",
        (target.id,),
    )
    code, out, _ = keyed("verify")
    assert code == 1
    assert _faults(out) == [
        f"task {target.id} version 3: event-deleted: its hash is stored but the event is gone"
    ]


def test_an_event_deleted_with_its_hash_is_a_missing_version(
    tasks: list[Task], keyed: Cli, store_config: StoreConfig
) -> None:
    target = tasks[2]
    for table, column, version in (("longhaul_events", "originator", 5), (CHAIN_TABLE, "task", 5)):
        key = "originator_version" if column == "originator" else "version"
        _execute(
            store_config, f"DELETE FROM {table} WHERE {column}_id = %s AND {key} = %s", (target.id, version)
        )
    code, out, _ = keyed("verify")
    assert code == 1
    assert [line.split(": ")[0:2] for line in _faults(out)] == [
        [f"task {target.id} version 5", "missing-version"]  # its leaf's absence is this same damage
    ]


def test_a_tasks_last_event_deleted_with_its_hash_is_named_by_its_leaf(
    tasks: list[Task], keyed: Cli, store_config: StoreConfig
) -> None:
    """The chain cannot see a shortened task; the signed tree holds its last leaf."""
    target = tasks[2]
    (index,) = (i for i in _leaves(store_config, target.id)[-1:])
    _execute(
        store_config,
        "DELETE FROM longhaul_events WHERE originator_id = %s AND originator_version = 7",
        (target.id,),
    )
    _execute(store_config, f"DELETE FROM {CHAIN_TABLE} WHERE task_id = %s AND version = 7", (target.id,))
    code, out, _ = keyed("verify")
    assert code == 1
    assert _faults(out) == [
        (
            f"task {target.id} version 7: not-in-log: leaf {index} of the signed tree, but neither its event"
            " nor its hash is in the log"
        )
    ]


def test_an_inserted_event_that_renumbers_the_rest_is_named_at_every_moved_version(
    tasks: list[Task], keyed: Cli, store_config: StoreConfig
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
    code, out, _ = keyed("verify")
    assert code == 1
    assert _faults(out) == [
        f"task {target.id} version 3: hash-mismatch: the event does not match its hash: it was altered",
        *(
            f"task {target.id} version {v + 1}: out-of-order: holds the event of version {v}"
            for v in range(3, 8)
        ),
    ]  # the leaves are of the chain hashes, which stayed: the signed log adds nothing the chain said
    assert "1 not yet sequenced)" in out  # the inserted event, after the sequencer's position


def test_two_swapped_payloads_are_named_at_both_versions(
    tasks: list[Task], keyed: Cli, store_config: StoreConfig
) -> None:
    target = tasks[0]
    first, second = _state(store_config, target.id, 3), _state(store_config, target.id, 5)
    for version, state in ((3, second), (5, first)):
        _execute(
            store_config,
            "UPDATE longhaul_events SET state = %s WHERE originator_id = %s AND originator_version = %s",
            (state, target.id, version),
        )
    code, out, _ = keyed("verify")
    assert code == 1
    assert _faults(out) == [
        f"task {target.id} version 3: out-of-order: holds the event of version 5",
        f"task {target.id} version 5: out-of-order: holds the event of version 3",
    ]


def test_an_event_appended_behind_longhauls_back_is_named(
    tasks: list[Task], keyed: Cli, store_config: StoreConfig
) -> None:
    target = tasks[2]  # a replay of its last event, appended as a new version
    _execute(
        store_config,
        "INSERT INTO longhaul_events (originator_id, originator_version, topic, state)"
        " SELECT originator_id, 8, topic, state FROM longhaul_events"
        " WHERE originator_id = %s AND originator_version = 7",
        (target.id,),
    )
    code, out, _ = keyed("verify")
    assert code == 1
    assert _faults(out) == [
        f"task {target.id} version 8: extra-event: a copy of the event of version 7, with no hash"
    ]


def test_an_event_with_a_forged_hash_slipped_in_below_the_sequencers_position_is_named(
    tasks: list[Task], keyed: Cli, store_config: StoreConfig
) -> None:
    """A well-forged chain link passes the chain check; no leaf holds it, though the sequencer went past."""
    target = tasks[0]
    ((topic, state, previous),) = _execute(
        store_config,
        "SELECT e.topic, e.state, c.hash FROM longhaul_events e JOIN longhaul_event_chain c"
        " ON c.task_id = e.originator_id AND c.version = e.originator_version"
        " WHERE e.originator_id = %s AND e.originator_version = 7",
        (target.id,),
    )
    forged = chain_hash(target.id, 8, topic, bytes(state), bytes(previous))
    _execute(
        store_config,
        "INSERT INTO longhaul_events (notification_id, originator_id, originator_version, topic, state)"
        " VALUES (0, %s, 8, %s, %s)",
        (target.id, topic, bytes(state)),
    )
    _execute(
        store_config,
        f"INSERT INTO {CHAIN_TABLE} (task_id, version, hash) VALUES (%s, 8, %s)",
        (target.id, forged),
    )
    code, out, _ = keyed("verify")
    assert code == 1
    assert _faults(out) == [
        (
            f"task {target.id} version 8: not-in-tree: at log position 0, at or below the sequencer's"
            f" {_log_position(store_config)}, but in no leaf: inserted behind longhaul's back"
        )
    ]


def _log_position(config: StoreConfig) -> int:
    return int(_execute(config, "SELECT log_position FROM longhaul_sequencer_position")[0][0])


def test_a_whole_deleted_task_is_named_by_its_leaves(
    tasks: list[Task], keyed: Cli, store_config: StoreConfig
) -> None:
    """The chains cannot see it (a task gone is no broken link); the signed tree holds its leaves."""
    for table, column in (("longhaul_events", "originator_id"), (CHAIN_TABLE, "task_id")):
        _execute(store_config, f"DELETE FROM {table} WHERE {column} = %s", (tasks[0].id,))
    code, out, _ = keyed("verify")
    assert code == 1
    assert _faults(out) == [
        f"task {tasks[0].id}: deleted: versions 1..7 are in the signed tree, none in the log"
    ]
    assert f"0 in chains, 1 in the signed log; {len(tasks) - 1} tasks," in out


def test_a_whole_task_deleted_with_its_leaves_breaks_the_signed_roots(
    tasks: list[Task], keyed: Cli, store_config: StoreConfig
) -> None:
    gone = _leaves(store_config, tasks[0].id)
    for table, column in (
        ("longhaul_events", "originator_id"),
        (CHAIN_TABLE, "task_id"),
        ("longhaul_merkle_leaves", "task_id"),
    ):
        _execute(store_config, f"DELETE FROM {table} WHERE {column} = %s", (tasks[0].id,))
    code, out, _ = keyed("verify")
    assert code == 1
    assert _faults(out) == [
        *(
            f"leaf {index}: leaves-missing: gone from the tree: deleted behind longhaul's back"
            for index in gone
        ),
        *(
            f"checkpoint {size}: root-mismatch: its root cannot be recomputed:"
            f" leaves from index {gone[0]} are gone"
            for size in (FIRST_SIZE, len(tasks) * 7)
        ),
    ]


def test_an_altered_checkpoint_note_is_named(
    tasks: list[Task], keyed: Cli, store_config: StoreConfig
) -> None:
    _execute(
        store_config,
        "UPDATE longhaul_checkpoints SET note = replace(note, %s, %s) WHERE tree_size = %s",
        (f"\n{FIRST_SIZE}\n", f"\n{FIRST_SIZE + 1}\n", FIRST_SIZE),
    )
    code, out, _ = keyed("verify")
    assert code == 1
    (line,) = _faults(out)
    assert line.startswith(
        f"checkpoint {FIRST_SIZE}: bad-signature: its note does not verify: the signature of longhaul/test+"
    )
    assert line.endswith("does not verify: the note was altered after it was signed")


def test_an_altered_leaf_is_named_with_its_subtree_and_the_roots(
    tasks: list[Task], keyed: Cli, store_config: StoreConfig
) -> None:
    index = _leaves(store_config, tasks[1].id)[3]  # version 4
    _execute(
        store_config,
        "UPDATE longhaul_merkle_leaves SET chain_hash = sha256(chain_hash) WHERE leaf_index = %s",
        (index,),
    )
    code, out, _ = keyed("verify")
    assert code == 1
    assert _faults(out) == [
        (
            f"task {tasks[1].id} version 4: leaf-mismatch: leaf {index} of the signed tree holds its"
            " chain hash, the log another chain hash: the log or the leaf was altered"
        ),
        (
            f"leaf {index}: subtree-mismatch: the stored hash of this subtree is not the one its leaves give:"
            " it or a leaf was altered"
        ),
        *(
            f"checkpoint {size}: root-mismatch: the first {size} leaves give another root than the signed one"
            for size in (FIRST_SIZE, len(tasks) * 7)
        ),
    ]


def test_an_altered_subtree_is_named_and_breaks_the_consistency_of_the_checkpoints(
    tasks: list[Task], keyed: Cli, store_config: StoreConfig
) -> None:
    """The subtree of leaves 16..17 is in the consistency proof from 18 to 21 leaves."""
    _execute(
        store_config, "UPDATE longhaul_merkle_nodes SET hash = sha256(hash) WHERE level = 1 AND position = 8"
    )
    code, out, _ = keyed("verify")
    assert code == 1
    assert _faults(out) == [
        (
            "leaves 16..17: subtree-mismatch: the stored hash of this subtree is not the one its leaves give:"
            " it or a leaf was altered"
        ),
        (
            f"checkpoints {FIRST_SIZE} and {len(tasks) * 7}: inconsistent: the consistency proof does not"
            f" lead to the root of size {FIRST_SIZE}: a subtree or a checkpoint was altered"
        ),
    ]


def _expire_and_archive(
    store: TaskApplication, tasks: list[Task], signer: SignerKey, directory: Path
) -> Path:
    later = START + timedelta(days=60)
    for task in tasks:
        store.expire(task.id, retention=timedelta(days=30), clock=lambda: later)
    _sign(store, signer)
    run = archive_expired(store, directory, clock=lambda: later)
    assert run.path is not None
    assert sorted(run.purged) == sorted(t.id for t in tasks)
    return run.path


def test_a_purged_task_is_no_fault(
    postgres_store: TaskApplication, tasks: list[Task], signer: SignerKey, keyed: Cli, tmp_path: Path
) -> None:
    _expire_and_archive(postgres_store, tasks[:1], signer, tmp_path)
    code, out, _ = keyed("verify")
    assert code == 0, out
    events = len(tasks) * 7 + 1
    assert out.strip().endswith(f"({_counts(len(tasks) - 1, events - 8, events, checkpoints=3, purged=1)})")


def test_a_tenant_erased_still_verifies(tasks: list[Task], keyed: Cli) -> None:
    code, out, _ = keyed("erase", "--tenant", tasks[0].tenant)
    assert code == 0, out
    code, out, _ = keyed("verify")
    assert code == 0, out
    assert _faults(out) == []


def test_an_archive_carries_the_chain_and_receipts_and_verifies_offline(
    postgres_store: TaskApplication, tasks: list[Task], signer: SignerKey, keyed: Cli, tmp_path: Path
) -> None:
    path = _expire_and_archive(postgres_store, tasks, signer, tmp_path)
    recorder = postgres_store.recorder
    assert isinstance(recorder, PostgresRunQueueRecorder)
    assert recorder.chain_rows([t.id for t in tasks]) == {}  # the purge took the chain rows too

    code, out, _ = keyed("verify", "--archive", str(path))
    assert code == 0, out
    assert out.strip().endswith(
        f"every chain and receipt verifies ({len(tasks)} tasks, {len(tasks) * 8} events,"
        f" {len(tasks)} receipts)"
    )

    with gzip.open(path, "rt", encoding="utf-8") as lines:
        parsed = [json.loads(line) for line in lines]

    def tampered(change: Callable[[list[dict[str, Any]]], str]) -> tuple[str, list[str]]:
        copy = json.loads(json.dumps(parsed))
        task_id = change(copy)
        altered = tmp_path / "tampered.jsonl.gz"
        with gzip.open(altered, "wt", encoding="utf-8") as out_file:
            out_file.writelines(json.dumps(p, ensure_ascii=False) + "\n" for p in copy)
        code, out, _ = keyed("verify", "--archive", str(altered))
        assert code == 1
        return task_id, _faults(out)

    def event(lines: list[dict[str, Any]]) -> str:  # one event altered, nothing else fixed up
        victim = next(p for p in lines if p["type"] == "event" and p["version"] == 4)
        victim["state"] = victim["state"].replace('"n":1', '"n":5')
        return str(victim["taskId"])

    task_id, faults = tampered(event)
    assert faults == [
        f"task {task_id} version 4: hash-mismatch: the event does not match its hash: it was altered"
    ]

    def proof(lines: list[dict[str, Any]]) -> str:  # one byte of a receipt's proof
        receipt = next(p for p in lines if p["type"] == "receipt")
        hashes = receipt["receipt"]["inclusion_proof"]
        hashes[0] = ("B" if hashes[0][0] == "A" else "A") + hashes[0][1:]
        return str(receipt["taskId"])

    task_id, faults = tampered(proof)
    assert [line.split(": ")[:2] for line in faults] == [[f"task {task_id} version 8", "bad-receipt"]]
    assert "the leaf or the proof was altered" in faults[0]

    def rewritten(
        lines: list[dict[str, Any]],
    ) -> str:  # the last event and its chain rewritten: the tree knows
        last = next(p for p in lines if p["type"] == "event" and p["version"] == 8)
        previous = next(
            p for p in lines if p["type"] == "event" and p["version"] == 7 and p["taskId"] == last["taskId"]
        )
        last["state"] += " "
        last["chain"] = chain_hash(
            UUID(last["taskId"]), 8, last["topic"], last["state"].encode(), bytes.fromhex(previous["chain"])
        ).hex()
        return str(last["taskId"])

    task_id, faults = tampered(rewritten)
    assert faults == [
        (
            f"task {task_id} version 8: receipt-mismatch: the signed tree holds another chain hash"
            " for it than the archive: the archive was altered"
        )
    ]


def test_verify_piped_into_head_ends_quietly(
    tasks: list[Task], store_config: StoreConfig, tmp_path: Path
) -> None:
    """Many faults, one line read: the reader leaves and verify stops without a traceback."""
    _execute(store_config, f"UPDATE {CHAIN_TABLE} SET hash = sha256(hash)")  # every link broken
    env = {k: v for k, v in os.environ.items() if not k.startswith("LONGHAUL_")}
    env |= {
        "LONGHAUL_DATABASE_URL": store_config.database_url,
        "LONGHAUL_DATABASE_SCHEMA": store_config.schema,
        "LONGHAUL_AUDIT_KEY_FILE": str(tmp_path / "audit-key"),
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


def test_progress_goes_to_stderr(tasks: list[Task], keyed: Cli, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(evidence_commands, "VERIFY_PROGRESS_S", 0.0)  # every task, as on a large store
    code, out, err = keyed("verify")
    assert code == 0
    progress = [line for line in err.splitlines() if line.startswith("verify: ")]
    assert [line.split(",")[0] for line in progress] == [
        *(f"verify: {n} tasks" for n in range(1, len(tasks) + 1)),
        f"verify: {len(tasks) * 7} leaves checked (0 s)",  # one page of leaves
    ]
    assert "verify:" not in out
