"""Archive, purge and sweep of stored files, on the real PostgreSQL and a file store in a directory.

An archive holds the bytes of every stored file its tasks refer to (a tar beside it, each file
once, checked against its hash), or with ``files_by_reference`` names them where they are kept;
the purge lets go of the tasks' files, and the sweep deletes those no live task holds: a file two
tasks share stays until both are gone. The file index must have applied the log (a projector runs).
"""

from __future__ import annotations

import gzip
import tarfile
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import psycopg
import pytest

from domain.task import Task
from projections.file_index import open_file_index
from store.evidence.archive import ArchiveError, archive_expired, read_archive
from store.evidence.archived_files import files_tar
from store.evidence.blocking_files import BlockingFiles
from store.evidence.file_retention import FileRetention, sweep_files
from store.evidence.merkle_log import catch_up
from store.evidence.signed_notes import SignerKey
from store.files import FileStore
from store.log.application import TaskApplication
from store.log.config import StoreConfig
from tests.support.projector import RunningProjector, projector_running
from tests.support.stored_files import MiB, change_one_byte, path_of, put, task_with_files

START = datetime(2026, 5, 1, 9, 0, tzinfo=UTC)
RETENTION = timedelta(days=30)
LATER = START + RETENTION + timedelta(days=1)
SIGNER = SignerKey.generate("longhaul/test")


def clock() -> datetime:
    return LATER


@pytest.fixture
def files(tmp_path: Path) -> FileStore:
    return FileStore.from_url((tmp_path / "files").as_uri())


@pytest.fixture
def blocking(files: FileStore) -> Iterator[BlockingFiles]:
    with BlockingFiles(files) as opened:
        yield opened


@pytest.fixture
def projector(store: TaskApplication, store_config: StoreConfig) -> Iterator[RunningProjector]:
    with projector_running(store_config) as running:
        yield running


def _expire(store: TaskApplication, task: Task) -> None:
    store.expire(task.id, retention=RETENTION, clock=clock)


def _signed(store: TaskApplication) -> None:
    log = store.merkle_log
    assert log is not None
    catch_up(log, store.recorder.select_notifications, SIGNER, LATER)


def _caught_up(store: TaskApplication, projector: RunningProjector) -> None:
    projector.wait(store.recorder.max_notification_id(), 20)


def _sizes(blocking: BlockingFiles, *hashes: str) -> list[int | None]:
    return [blocking.size(sha256) for sha256 in hashes]


def test_an_archive_holds_the_bytes_of_every_file_its_tasks_refer_to_once(
    store: TaskApplication, files: FileStore, blocking: BlockingFiles, tmp_path: Path
) -> None:
    big = bytes(range(256)) * (3 * MiB // 256) + b"tail"
    small = b"a small file"
    one, two = put(files, big), put(files, small)
    tasks = [task_with_files(store, [one, two], now=START), task_with_files(store, [two], now=START)]
    for task in tasks:
        _expire(store, task)
    _signed(store)

    run = archive_expired(store, tmp_path / "archives", clock=clock, files=blocking)

    assert run.path is not None
    assert sorted(run.purged) == sorted(t.id for t in tasks)
    assert run.files == 2
    assert run.files_path == files_tar(run.path)
    archive = read_archive(run.path)
    assert archive.header["formatVersion"] == 4
    assert {sha: (f.size, f.kept, f.where) for sha, f in archive.files.items()} == {
        one.sha256: (len(big), "archive", run.files_path.name),
        two.sha256: (len(small), "archive", run.files_path.name),
    }
    with tarfile.open(run.files_path) as tar:
        members = {m.name: m.size for m in tar.getmembers()}
        assert members == {f"files/{one.sha256}": len(big), f"files/{two.sha256}": len(small)}
        held = tar.extractfile(f"files/{one.sha256}")
        assert held is not None
        assert held.read() == big
    assert list((tmp_path / "archives").glob("*.partial")) == []


def test_a_changed_byte_in_the_archives_files_is_named_and_nothing_is_purged(
    store: TaskApplication, files: FileStore, blocking: BlockingFiles, tmp_path: Path
) -> None:
    ref = put(files, b"x" * 5000)
    task = task_with_files(store, [ref], now=START)
    _expire(store, task)
    _signed(store)

    def change_a_byte(path: Path) -> None:
        tar = files_tar(path)
        data = bytearray(tar.read_bytes())
        data[512 * 3 + 10] ^= 0xFF  # in the member's bytes, past its (pax and ustar) headers
        tar.write_bytes(bytes(data))

    with pytest.raises(ArchiveError, match=rf"task {task.id}: file sha256:{ref.sha256} \(file-0.bin\)"):
        archive_expired(store, tmp_path, clock=clock, files=blocking, before_verify=change_a_byte)
    assert store.get(task.id).expired  # still in the store


def test_a_file_changed_in_the_store_stops_the_archive_before_any_purge(
    store: TaskApplication, files: FileStore, blocking: BlockingFiles, tmp_path: Path
) -> None:
    ref = put(files, b"y" * 70000)
    task = task_with_files(store, [ref], now=START)
    _expire(store, task)
    _signed(store)
    change_one_byte(files, ref.sha256, at=65536)

    with pytest.raises(ArchiveError, match=rf"file sha256:{ref.sha256} .*hash to sha256:"):
        archive_expired(store, tmp_path, clock=clock, files=blocking)
    assert store.get(task.id).expired
    assert list(tmp_path.glob("*.files.tar*")) == []  # the half-written tar is gone


def test_a_task_whose_file_is_missing_is_refused_and_stays(
    store: TaskApplication, files: FileStore, blocking: BlockingFiles, tmp_path: Path
) -> None:
    gone, kept = put(files, b"gone" * 10), put(files, b"kept" * 10)
    lost, fine = task_with_files(store, [gone], now=START), task_with_files(store, [kept], now=START)
    for task in (lost, fine):
        _expire(store, task)
    _signed(store)
    path_of(files, gone.sha256).unlink()

    run = archive_expired(store, tmp_path, clock=clock, files=blocking)

    assert run.purged == [fine.id]
    assert run.refused == {
        lost.id: [f"task {lost.id}: file sha256:{gone.sha256} is missing from the file store"]
    }
    assert store.get(lost.id).expired


def test_without_a_file_store_a_task_with_files_is_refused(
    store: TaskApplication, files: FileStore, tmp_path: Path
) -> None:
    task = task_with_files(store, [put(files, b"z" * 100)], now=START)
    _expire(store, task)
    _signed(store)

    run = archive_expired(store, tmp_path, clock=clock)

    assert run.path is None
    assert run.refused == {
        task.id: [f"task {task.id}: refers to 1 stored files, and no file store was given"]
    }


def test_the_purge_deletes_a_file_nothing_holds_and_keeps_one_a_live_task_shares(
    store: TaskApplication,
    files: FileStore,
    blocking: BlockingFiles,
    projector: RunningProjector,
    tmp_path: Path,
) -> None:
    own, shared = put(files, b"own" * 1000), put(files, b"shared" * 1000)
    first = task_with_files(store, [own, shared], now=START)
    second = task_with_files(store, [shared], now=START + timedelta(days=20))  # ends later
    _expire(store, first)
    _signed(store)

    run = archive_expired(store, tmp_path, clock=clock, files=blocking)
    assert run.purged == [first.id]
    _caught_up(store, projector)
    sweep = sweep_files(store, blocking, now=LATER, wait_s=20)

    assert (sweep.deleted, sweep.held, sweep.waiting) == (1, 1, 0)
    assert _sizes(blocking, own.sha256, shared.sha256) == [None, shared.size]

    later = LATER + timedelta(days=30)  # later the second goes too: then so does the shared file
    store.expire(second.id, retention=RETENTION, clock=lambda: later)
    _signed(store)
    assert archive_expired(store, tmp_path, clock=lambda: later, files=blocking).purged == [second.id]
    _caught_up(store, projector)
    sweep = sweep_files(store, blocking, now=later, wait_s=20)
    assert (sweep.deleted, sweep.held) == (1, 0)
    assert _sizes(blocking, shared.sha256) == [None]


def test_files_named_by_reference_stay_in_the_store_for_the_archive(
    store: TaskApplication,
    files: FileStore,
    blocking: BlockingFiles,
    projector: RunningProjector,
    tmp_path: Path,
) -> None:
    ref = put(files, b"by reference" * 100)
    task = task_with_files(store, [ref], now=START)
    _expire(store, task)
    _signed(store)

    run = archive_expired(store, tmp_path, clock=clock, files=blocking, files_by_reference=True)

    assert run.path is not None
    assert run.files_path is None  # no bytes went into the archive
    assert read_archive(run.path).files[ref.sha256].kept == "store"
    assert read_archive(run.path).files[ref.sha256].where == files.url
    _caught_up(store, projector)
    sweep = sweep_files(store, blocking, now=LATER, wait_s=20)
    assert (sweep.deleted, sweep.held) == (0, 0)  # never a candidate: the archive holds it
    assert _sizes(blocking, ref.sha256) == [ref.size]


def test_nothing_is_deleted_while_the_file_index_trails_the_log(
    store: TaskApplication, files: FileStore, blocking: BlockingFiles, tmp_path: Path
) -> None:
    ref = put(files, b"waits" * 100)
    task = task_with_files(store, [ref], now=START)
    _expire(store, task)
    _signed(store)
    assert archive_expired(store, tmp_path, clock=clock, files=blocking).purged == [task.id]
    task_with_files(store, [put(files, b"another")], now=LATER)  # the index has not seen it (no projector)

    sweep = sweep_files(store, blocking, now=LATER, wait_s=0.5)

    assert (sweep.deleted, sweep.waiting) == (0, 1)
    assert _sizes(blocking, ref.sha256) == [ref.size]
    index = open_file_index(store)
    assert index is not None
    index.rebuild(store)  # caught up: now it goes
    assert sweep_files(store, blocking, now=LATER, wait_s=5).deleted == 1
    assert _sizes(blocking, ref.sha256) == [None]


def test_an_upload_holds_its_file_for_a_day_then_lets_go(
    store: TaskApplication,
    store_config: StoreConfig,
    files: FileStore,
    blocking: BlockingFiles,
    projector: RunningProjector,
) -> None:
    ref = put(files, b"uploaded" * 100)
    with psycopg.connect(store_config.database_url, autocommit=True) as conn:
        conn.execute(
            f'INSERT INTO "{store_config.schema}".longhaul_uploads'
            " (tenant, sha256, size, media_type, uploaded_at) VALUES ('acme', %s, %s, 'text/plain', %s)",
            (ref.sha256, ref.size, LATER - timedelta(hours=1)),
        )
    _caught_up(store, projector)

    assert sweep_files(store, blocking, now=LATER).uploads_expired == 0
    assert _sizes(blocking, ref.sha256) == [ref.size]

    sweep = sweep_files(store, blocking, now=LATER + timedelta(days=1))
    assert (sweep.uploads_expired, sweep.deleted) == (1, 1)
    assert _sizes(blocking, ref.sha256) == [None]


def test_erase_lets_go_of_the_tenants_files_and_keeps_those_another_tenant_shares(
    store: TaskApplication, files: FileStore, blocking: BlockingFiles, projector: RunningProjector
) -> None:
    own, shared = put(files, b"acme's own" * 100), put(files, b"both" * 100)
    acme = task_with_files(store, [own, shared], now=START, tenant="acme", end=False)
    task_with_files(store, [shared], now=START, tenant="globex")
    _caught_up(store, projector)

    erased = FileRetention(store).erase_tenant_files("acme", now=LATER)
    sweep = sweep_files(store, blocking, now=LATER, wait_s=20)

    assert (erased.tasks, erased.files) == (1, 2)
    assert (sweep.deleted, sweep.held) == (1, 1)
    assert _sizes(blocking, own.sha256, shared.sha256) == [None, shared.size]
    assert FileRetention(store).erased() == {acme.id}


def test_unfinished_writes_older_than_a_day_are_removed(
    store: TaskApplication, files: FileStore, blocking: BlockingFiles, tmp_path: Path
) -> None:
    incoming = tmp_path / "files" / "incoming"
    incoming.mkdir(parents=True)
    (incoming / "dead-upload").write_bytes(b"half a file")

    assert sweep_files(store, blocking, now=datetime.now(UTC)).incoming_removed == 0
    assert sweep_files(store, blocking, now=datetime.now(UTC) + timedelta(days=2)).incoming_removed == 1
    assert not (incoming / "dead-upload").exists()


def test_a_tampered_archive_file_line_is_refused_by_its_checksum(
    store: TaskApplication, files: FileStore, blocking: BlockingFiles, tmp_path: Path
) -> None:
    ref = put(files, b"counted" * 10)
    task = task_with_files(store, [ref], now=START)
    _expire(store, task)
    _signed(store)
    run = archive_expired(store, tmp_path, clock=clock, files=blocking)
    assert run.path is not None
    assert files_tar(run.path).is_file()

    text = gzip.decompress(run.path.read_bytes()).decode()
    run.path.write_bytes(gzip.compress(text.replace('"kept":"archive"', '"kept":"erased"').encode()))
    with pytest.raises(ArchiveError, match="sha256 of its lines differs"):
        read_archive(run.path)
