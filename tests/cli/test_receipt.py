"""``longhaul receipt TASK_ID [--out FILE]``: the receipt document, and it verifies offline.

On a real PostgreSQL. The receipt is checked as an auditor would: ``store/evidence/receipts.py`` alone is
copied into an empty directory and run there with a plain interpreter (no longhaul on its path),
with the log's verifier key; it exits 0, and 1 for a receipt whose leaf was altered. An unknown
task, or one no signed checkpoint covers yet, is one line on stderr and exit 1.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from uuid import uuid4

import pytest

import store.evidence.receipts
from domain.task import Task
from store.evidence.merkle_log import catch_up
from store.evidence.signed_notes import SignerKey
from store.log.application import TaskApplication
from store.log.config import StoreConfig
from tests.support.tasks import new_task

Cli = Callable[..., tuple[int, str, str]]

START = datetime(2026, 5, 1, 9, 0, tzinfo=UTC)
SIGNER = SignerKey.generate("longhaul/cli.test")


@pytest.fixture
def task(postgres_store: TaskApplication) -> Task:
    """A task of two events, then a checkpoint of the log, then a third event."""
    task = new_task(START)
    postgres_store.save_tasks(task)
    task.grant_lease(worker="w-1", now=START, until=START + timedelta(minutes=5))
    postgres_store.save_tasks(task)
    return task


def _sign(store: TaskApplication) -> None:
    log = store.merkle_log
    assert log is not None
    assert catch_up(log, store.recorder.select_notifications, SIGNER, START) is not None


def _verify_offline(tmp_path: Path, document: str) -> subprocess.CompletedProcess[str]:
    """``python receipts.py verify RECEIPT.json --key VKEY`` in a directory holding that file alone."""
    alone = tmp_path / "auditor"
    alone.mkdir()
    shutil.copy(store.evidence.receipts.__file__, alone / "receipts.py")
    (alone / "receipt.json").write_text(document)
    (alone / "log.vkey").write_text(f"{SIGNER.verifier()}\n")
    return subprocess.run(
        [sys.executable, "-I", "receipts.py", "verify", "receipt.json", "--key", "log.vkey"],
        cwd=alone,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def test_the_printed_receipt_verifies_offline(
    cli: Cli, postgres_store: TaskApplication, task: Task, tmp_path: Path
) -> None:
    _sign(postgres_store)
    task.complete(epoch=1, now=START, message=None)
    postgres_store.save_tasks(task)  # after the checkpoint: the receipt proves version 2

    code, out, err = cli("receipt", str(task.id))

    assert (code, err) == (0, "")
    document = json.loads(out)
    assert document["leaf"]["task_id"] == str(task.id)
    assert document["leaf"]["version"] == 2
    verified = _verify_offline(tmp_path, out)
    assert verified.returncode == 0, verified.stdout + verified.stderr
    assert verified.stdout.startswith(f"valid: task {task.id} at version 2 is leaf ")

    document["leaf"]["version"] = 3  # a receipt claiming the event the checkpoint does not cover
    shutil.rmtree(tmp_path / "auditor")
    altered = _verify_offline(tmp_path, json.dumps(document))
    assert altered.returncode == 1, altered.stdout + altered.stderr
    assert altered.stdout.startswith("NOT VALID: ")


def test_out_writes_the_same_document_to_a_file(
    cli: Cli, postgres_store: TaskApplication, task: Task, tmp_path: Path
) -> None:
    _sign(postgres_store)
    code, printed, _ = cli("receipt", str(task.id))
    assert code == 0
    target = tmp_path / "receipt.json"

    code, out, err = cli("receipt", str(task.id), "--out", str(target))

    assert (code, err) == (0, "")
    assert out == f"receipt of task {task.id} at version 2 written to {target}\n"
    assert target.read_text() == printed
    code, _, err = cli("receipt", str(task.id), "--out", str(tmp_path / "no" / "such" / "dir" / "r.json"))
    assert code == 1
    assert err.startswith("longhaul: cannot write the receipt to ")
    assert err.count("\n") == 1


def test_a_task_no_checkpoint_covers_yet_says_why(cli: Cli, task: Task) -> None:
    code, out, err = cli("receipt", str(task.id))

    assert (code, out) == (1, "")
    assert err == (
        f"longhaul: no signed checkpoint covers task {task.id} yet: the sequencer signs one every"
        " LONGHAUL_CHECKPOINT_INTERVAL_SECONDS; ask again after the next\n"
    )


def test_an_unknown_task_is_one_line_and_exit_1(cli: Cli, store_config: StoreConfig) -> None:
    missing = uuid4()
    code, out, err = cli("receipt", str(missing))

    assert (code, out) == (1, "")
    assert err == f"longhaul: no task {missing} in {store_config.schema}\n"
