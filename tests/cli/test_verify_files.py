"""``longhaul verify`` rehashes the stored files, ``archive`` keeps them, ``erase`` deletes a tenant's.

On the real PostgreSQL, with the file store a directory of the test's own (the ``cli`` fixture's
``LONGHAUL_FILE_STORE_URL``): a file deleted or changed behind longhaul's back is named (task,
hash, name, what is wrong) and verify exits 1; an archive's tar is checked the same way.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from store.evidence.archived_files import files_tar
from store.evidence.key_files import create_signer_key
from store.evidence.merkle_log import catch_up
from store.files import FileStore
from store.log.application import TaskApplication
from store.log.config import StoreConfig
from tests.support.projector import RunningProjector, projector_running
from tests.support.stored_files import MiB, change_one_byte, path_of, put, task_with_files

Cli = Callable[..., tuple[int, str, str]]
NOW = datetime(2026, 5, 1, 9, 0, tzinfo=UTC)
FAULT = re.compile(r"^task \S+( \(and \d+ more tasks\))?: file sha256:[0-9a-f]{64}")


@pytest.fixture
def files(tmp_path: Path) -> FileStore:
    return FileStore.from_url((tmp_path / "files").as_uri())  # the cli fixture's file store


@pytest.fixture
def projector(store: TaskApplication, store_config: StoreConfig) -> Iterator[RunningProjector]:
    with projector_running(store_config) as running:
        yield running


def _faults(out: str) -> list[str]:
    return [line for line in out.splitlines() if FAULT.match(line)]


def test_verify_rehashes_every_stored_file_and_names_a_missing_and_a_changed_one(
    cli: Cli, store: TaskApplication, files: FileStore
) -> None:
    big, gone, fine = put(files, b"\x01" * (2 * MiB + 3)), put(files, b"gone" * 100), put(files, b"fine")
    changed = task_with_files(store, [big], now=NOW, names=["report.pdf"])
    lost = task_with_files(store, [gone, fine], now=NOW, names=["gone.txt", "fine.txt"])
    task_with_files(store, [fine], now=NOW)

    code, out, _ = cli("verify")
    assert code == 0, out
    assert out.strip().endswith(
        "every chain, the signed log and the stored files read verify (3 tasks, 12 events, 0 leaves,"
        " 0 checkpoints, 0 purged, 12 not yet sequenced, 3 of 3 stored files rehashed)"
    )

    change_one_byte(files, big.sha256, at=MiB + 1)
    path_of(files, gone.sha256).unlink()
    code, out, _ = cli("verify")

    assert code == 1
    changed_to = _sha256_of(files, big.sha256)
    was_changed = (
        f"task {changed.id}: file sha256:{big.sha256} (report.pdf): changed: the bytes in the file store"
        f" hash to sha256:{changed_to}"
    )
    is_missing = (
        f"task {lost.id}: file sha256:{gone.sha256} (gone.txt): missing: no file with this hash in the"
        " file store"
    )
    assert sorted(_faults(out)) == sorted([was_changed, is_missing])
    assert "2 faults (0 in chains, 0 in the signed log, 2 in stored files;" in out


def test_verify_reads_a_sample_or_no_file_at_all(cli: Cli, store: TaskApplication, files: FileStore) -> None:
    refs = [put(files, f"file {n}".encode()) for n in range(5)]
    task_with_files(store, refs, now=NOW)

    code, out, _ = cli("verify", "--files-sample", "2")
    assert code == 0, out
    assert "2 of 5 stored files rehashed" in out

    for ref in refs:
        path_of(files, ref.sha256).unlink()
    code, out, _ = cli("verify", "--no-files")
    assert code == 0, out
    assert out.strip().endswith("stored files not checked)")
    code, out, _ = cli("verify", "--files-sample", "3")
    assert code == 1
    assert len(_faults(out)) == 3


def test_a_shared_missing_file_names_one_task_and_counts_the_others(
    cli: Cli, store: TaskApplication, files: FileStore
) -> None:
    ref = put(files, b"shared")
    tasks = [task_with_files(store, [ref], now=NOW) for _ in range(3)]
    path_of(files, ref.sha256).unlink()

    code, out, _ = cli("verify")

    assert code == 1
    (fault,) = _faults(out)
    first = min(task.id for task in tasks)  # verify reads the tasks in id order
    assert fault.startswith(
        f"task {first} (and 2 more tasks): file sha256:{ref.sha256} (file-0.bin): missing"
    )


def test_erase_deletes_the_tenants_files_and_verify_counts_them_as_erased(
    cli: Cli, store: TaskApplication, files: FileStore, projector: RunningProjector
) -> None:
    own, shared = put(files, b"acme only"), put(files, b"acme and globex")
    task_with_files(store, [own, shared], now=NOW, tenant="acme")
    task_with_files(store, [shared], now=NOW, tenant="globex")
    projector.wait(store.recorder.max_notification_id(), 20)

    code, out, err = cli("erase", "--tenant", "acme")

    assert (code, err) == (0, "")
    assert out.splitlines() == [
        "erased the keys of 0 tasks of tenant acme: their secrets can no longer be read",
        (
            "its tasks refer to 2 stored files: deleted 1 nothing else holds, 1 still held by other"
            " tenants' tasks or archives"
        ),
    ]
    assert not path_of(files, own.sha256).exists()
    assert path_of(files, shared.sha256).exists()
    code, out, _ = cli("verify")
    assert code == 0, out
    assert "2 of 2 stored files rehashed (1 erased with their tenant)" in out


def test_verify_archive_checks_the_bytes_in_its_tar_and_names_a_changed_byte(
    cli: Cli,
    store: TaskApplication,
    files: FileStore,
    projector: RunningProjector,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    signer = create_signer_key(tmp_path / "audit-key", "longhaul/test")
    monkeypatch.setenv("LONGHAUL_AUDIT_KEY_FILE", str(tmp_path / "audit-key"))
    ref = put(files, b"archived bytes" * 1000)
    task = task_with_files(store, [ref], now=NOW - timedelta(days=40), names=["kept.bin"])
    store.expire(task.id, retention=timedelta(days=30), clock=lambda: NOW)
    log = store.merkle_log
    assert log is not None
    catch_up(log, store.recorder.select_notifications, signer, NOW)

    code, out, err = cli("archive", "--to", str(tmp_path / "archives"))
    assert code == 0, err
    path, tar = (Path(line) for line in out.splitlines())
    assert tar == files_tar(path)
    assert "1 stored files with their bytes" in err
    assert "files: deleted 1 stored files nothing holds any more (0 still held)" in err
    assert not path_of(files, ref.sha256).exists()  # its bytes are in the archive now
    code, out, _ = cli("verify", "--archive", str(path))
    assert code == 0, out
    assert out.strip().endswith(
        "every chain, receipt and stored file read verifies"
        " (1 tasks, 5 events, 1 receipts, 1 of 1 stored files rehashed)"
    )

    data = bytearray(tar.read_bytes())
    data[tar.stat().st_size // 4] ^= 0x01
    tar.write_bytes(bytes(data))
    code, out, _ = cli("verify", "--archive", str(path))
    assert code == 1
    (fault,) = _faults(out)
    assert fault.startswith(
        f"task {task.id}: file sha256:{ref.sha256} (kept.bin): changed: the bytes in {tar.name}"
    )


def _sha256_of(files: FileStore, sha256: str) -> str:
    return hashlib.sha256(path_of(files, sha256).read_bytes()).hexdigest()
