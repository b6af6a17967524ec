"""Issue 9's "done when": a task that paused, survived a worker crash and completed verifies.

Real processes on real PostgreSQL: two workers run an access review; the one holding it is
SIGKILLed mid-fetch, the other resumes it, it pauses for the owners' approval, the answer comes
(appended by this process, as the gateway would), and it completes. Its events were written by
three processes, none of which knew the chain heads of the others' commits. Once sequenced and
signed (``catch_up``, as the sequencer would), ``longhaul verify`` passes against the checkpoint,
and the task's receipt verifies offline: ``store/evidence/receipts.py`` copied alone into an empty directory
and run there by an isolated interpreter; with one byte of its proof changed, it does not. One
byte of an event changed behind longhaul's back is then named, and nothing else.
"""

from __future__ import annotations

import base64
import shutil
import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path
from uuid import UUID

import psycopg
from psycopg import sql

from store.evidence.key_files import create_signer_key
from store.evidence.merkle_log import catch_up
from store.evidence.receipts import Receipt
from store.log.application import TaskApplication
from store.log.config import StoreConfig
from tests.crash.cluster import Cluster, answer, events, holder_pid, of_kind, submit, wait_for_state
from tests.support.processes import wait_until

SYSTEMS = 6
KILL_AFTER = 3
RECEIPTS_PY = Path(__file__).resolve().parents[2] / "store" / "evidence" / "receipts.py"


def _fetched(store: TaskApplication, task_id: UUID) -> int:
    return len(store.get(task_id).checkpoint.get("fetched", []))


def _offline(receipt: Receipt, key: str, directory: Path) -> subprocess.CompletedProcess[str]:
    """``python receipts.py verify RECEIPT --key VKEY`` in a directory holding that one file only."""
    directory.mkdir()
    shutil.copy(RECEIPTS_PY, directory / "receipts.py")
    (directory / "receipt.json").write_text(receipt.to_json())
    return subprocess.run(
        [sys.executable, "-I", "receipts.py", "verify", "receipt.json", "--key", key],
        cwd=directory,
        env={"PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def test_a_paused_crashed_completed_task_verifies_and_a_changed_byte_is_named(
    cluster: Cluster, store: TaskApplication, tmp_path: Path
) -> None:
    cluster.fake_iam()
    workers = cluster.workers(2)
    params = {"systems": SYSTEMS, "fetch_delay_ms": 300, "revocations": 2}
    task_id = submit(store, "access-review", params)
    wait_until(lambda: _fetched(store, task_id) >= KILL_AFTER, 60, "3 fetched systems", interval=0.01)
    pid = holder_pid(store, task_id)
    next(w for w in workers if w.pid == pid).kill()

    wait_for_state(store, task_id, "TASK_STATE_INPUT_REQUIRED", 90, cluster)
    answer(store, task_id, {"approve": True})
    wait_for_state(store, task_id, "TASK_STATE_COMPLETED", 60, cluster)
    history = events(store, task_id)
    assert [g.epoch for g in of_kind(history, "LeaseGranted")][:2] == [1, 2]  # it did survive a crash
    assert of_kind(history, "InputRequested")
    assert of_kind(history, "InputReceived")

    key_file = tmp_path / "audit-key"
    signer = create_signer_key(key_file, "longhaul/crash-test")
    log = store.merkle_log
    assert log is not None
    checkpoint = catch_up(log, store.recorder.select_notifications, signer, datetime.now(UTC))
    assert checkpoint is not None
    assert checkpoint.size == len(history)
    done = cluster.run(["verify"], audit_key_file=str(key_file))
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.splitlines()[-1].endswith(
        f"every chain and the signed log verify (1 tasks, {len(history)} events, {len(history)} leaves,"
        " 1 checkpoints, 0 purged, 0 not yet sequenced)"
    )

    receipt = log.receipt(task_id)
    assert receipt is not None
    assert receipt.version == history[-1].originator_version  # the completed task's last event
    verifier = str(signer.verifier())
    offline = _offline(receipt, verifier, tmp_path / "auditor")
    assert offline.returncode == 0, offline.stdout + offline.stderr
    assert offline.stdout.startswith(f"valid: task {task_id} at version {receipt.version} is leaf")
    assert receipt.inclusion_proof  # a tree of more than one leaf
    first = bytearray(receipt.inclusion_proof[0])
    first[0] ^= 0x01  # one byte of the proof
    changed = Receipt(**{**vars(receipt), "inclusion_proof": (bytes(first), *receipt.inclusion_proof[1:])})
    assert base64.b64encode(bytes(first)).decode() in changed.to_json()
    offline = _offline(changed, verifier, tmp_path / "auditor-2")
    assert offline.returncode == 1, offline.stdout + offline.stderr
    assert offline.stdout.startswith("NOT VALID: the inclusion proof of leaf")

    version = of_kind(history, "InputReceived")[0].originator_version
    config = store.config
    assert isinstance(config, StoreConfig)
    with psycopg.connect(config.database_url, autocommit=True) as conn:
        conn.execute(
            sql.SQL(
                "UPDATE {} SET state = overlay(state placing '\\x20'::bytea from 1 for 1)"
                " WHERE originator_id = %s AND originator_version = %s"
            ).format(sql.Identifier(config.schema, "longhaul_events")),
            (task_id, version),
        )
    done = cluster.run(["verify"], audit_key_file=str(key_file))
    assert done.returncode == 1
    faults = [line for line in done.stdout.splitlines() if line.startswith("task ")]
    assert faults == [
        f"task {task_id} version {version}: hash-mismatch: the event does not match its hash: it was altered"
    ]
