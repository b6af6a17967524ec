"""Archive then purge: expired tasks' events go to a verified file, and only then leave the store.

``archive_expired`` writes every expired task's events (all versions, as stored) to one gzip
JSON-lines file per run, each task's events followed by the receipt of its last event (its
inclusion in the latest signed checkpoint, ``store/evidence/receipts.py``), reads the file back to check it
(header, trailer checksum and counts, each task's versions complete and in order, as many as the
store had, its receipt of its last version), and only then purges each task in its own
transaction: events, snapshots, run-queue row, the task's rows in the current-task view and the
retention index, and its webhook deliveries (with their attempts) together, recording the task as
purged (``longhaul_purged_tasks``: ``verify`` tells a purge from a deletion). A task whose last
event no signed checkpoint covers yet stays for a later run; a task whose chain has a fault
(``store.evidence.chain.check_task``) is refused: neither archived nor purged. A run stopped before the
purge leaves everything in the store, and a re-run archives those tasks again (in a second file);
a run stopped mid-purge leaves the tasks it had not reached, and the next run archives only those.
A task is never purged without a verified file that holds it.

Stored files (``domain.files``: a part that names a file in the file store by hash) go with their
tasks: their bytes into a tar beside the archive, or (``files_by_reference``) only their hashes
and the store that keeps them (``store.evidence.archived_files``). Reading the file back checks each
file's bytes against its hash (``store.evidence.file_checks``), and the purge lets go of the
task's files in its own transaction, so that ``store.evidence.file_retention.sweep_files`` deletes
those no other task holds (by reference: they are kept for the archive).

The format (``longhaul-archive`` version 4: each event's stored bytes exactly and its chain hash,
``store/evidence/chain.py``, each task's receipt, and a line per stored file) is in
``docs/audit.md`` ("Archive format"), and the design in ``docs/adr/0013-archive-then-purge.md``,
``docs/adr/0022-a-hash-chain-per-task.md`` and ``docs/adr/0030-verify-against-checkpoints.md``.
Files of version 3 (no file lines), 2 (no receipts) and 1 (parsed events, no chain hashes) are
still read. ``archive_histories`` gives a file's tasks as chain rows
with their receipts, for ``longhaul verify --archive``.

Longer than 500 lines on purpose: one archive format, its writer and its reader for every
version, so that a change of the format is read and reviewed in one place.
"""

from __future__ import annotations

import base64
import gzip
import hashlib
import json
import logging
import os
import zlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any
from uuid import UUID

from eventsourcing.persistence import StoredEvent

from domain.clock import Clock
from store.deliveries.records import DELIVERIES
from store.evidence.archived_files import (
    FileArchiveError,
    FileArchiver,
    file_line,
    files_tar,
    parsed_file_line,
)
from store.evidence.blocking_files import BlockingFiles
from store.evidence.chain import ChainFault, ChainRow, check_task
from store.evidence.file_checks import ArchivedFile, ReferencedFiles, check_archived_files
from store.evidence.file_retention import ERASED_TASKS_TABLE, FILE_INDEX_TABLE, FileRetention
from store.evidence.merkle_log import MerkleLog
from store.evidence.receipts import Receipt
from store.log.application import TaskApplication
from store.log.postgres import PostgresRunQueueRecorder
from store.public_form import iso

log = logging.getLogger(__name__)

FORMAT = "longhaul-archive"
FORMAT_VERSION = 4
READABLE_VERSIONS = (1, 2, 3, 4)
PAGE = 500
"""Expired tasks listed per query."""
PURGED_WITH_THE_TASK = (
    "longhaul_task_view",
    "longhaul_retention_index",
    DELIVERIES,
    FILE_INDEX_TABLE,
    ERASED_TASKS_TABLE,
)
"""The schema's other tables whose rows of a task go in its purge's transaction: the current-task
view and the retention index (``projections.task_view``, ``projections.retention_index``; created
by the migrations 0003 and 0005), the webhook deliveries (their attempts go with them), and the
file index and the record of erased tasks (``store.evidence.file_retention``, migration 0013)."""


class ArchiveError(Exception):
    """An archive could not be written, or a file is no valid archive (the message says where)."""


@dataclass(frozen=True)
class ArchivedEvent:
    """One stored event as an archive line holds it: its stored bytes exactly, and its chain hash."""

    task_id: UUID
    tenant: str
    version: int
    topic: str
    state: bytes
    """The stored event's bytes, exactly as in the store (what its chain hash covers)."""
    chain: bytes | None
    """Its chain hash as the store held it (``None``: none was stored, or a version-1 file)."""

    @property
    def event(self) -> Any:
        """The stored event's JSON, parsed."""
        return json.loads(self.state)

    def stored(self) -> StoredEvent:
        """The event as the store's recorder would return it (for the store's mapper)."""
        return StoredEvent(
            originator_id=self.task_id, originator_version=self.version, topic=self.topic, state=self.state
        )


@dataclass(frozen=True)
class Archive:
    """A read and checked archive file: its header and every task's events in order."""

    header: dict[str, Any]
    tasks: dict[UUID, list[ArchivedEvent]]
    receipts: dict[UUID, Receipt] = field(default_factory=dict)
    """Each task's receipt of its last version (format version 3; none in older files)."""
    files: dict[str, ArchivedFile] = field(default_factory=dict)
    """Each stored file the events refer to, by hash: where its bytes are kept (version 4)."""

    @property
    def events(self) -> int:
        """How many events the archive holds."""
        return sum(len(events) for events in self.tasks.values())


@dataclass
class ArchiveRun:
    """What one ``archive_expired`` did."""

    path: Path | None
    """The file written (``None``: there was no expired task)."""
    tasks: int = 0
    events: int = 0
    files: int = 0
    """Stored files the archive holds the bytes of (in ``files_path``), or names by reference."""
    files_path: Path | None = None
    """The tar of the files' bytes beside ``path`` (``None``: no file's bytes went in)."""
    purged: list[UUID] = field(default_factory=list)
    skipped: list[UUID] = field(default_factory=list)
    """Archived but not purged: they changed after they were read (they stay; a re-run takes them)."""
    unsequenced: list[UUID] = field(default_factory=list)
    """Not archived: no signed checkpoint covers their last event yet (a later run takes them)."""
    refused: dict[UUID, list[str]] = field(default_factory=dict)
    """Not archived, not purged: their chain has faults, or their leaf another chain hash (said)."""


def archive_expired(
    store: TaskApplication,
    directory: Path,
    *,
    clock: Clock,
    before_verify: Callable[[Path], None] | None = None,
    files: BlockingFiles | None = None,
    files_by_reference: bool = False,
) -> ArchiveRun:
    """Write every expired task's events to one file in ``directory``, verify it, then purge them.

    The bytes of the stored files the tasks refer to are read from ``files`` into a tar beside
    the file (with ``files_by_reference``, only named); without ``files`` a task that refers to
    a stored file is refused. ``before_verify`` runs between writing and reading back (a test
    hook: it may corrupt the files or raise, as a crash there would).

    Raises:
        ArchiveError: The store is not PostgreSQL, a file's bytes are not what their hash says,
            or the archive did not verify (nothing purged).
    """
    recorder = store.recorder
    merkle_log = store.merkle_log
    if not isinstance(recorder, PostgresRunQueueRecorder) or merkle_log is None:
        raise ArchiveError("archiving needs the store on PostgreSQL")
    tasks = _expired(recorder)
    if not tasks:
        return ArchiveRun(path=None)
    now = clock()
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / f"longhaul-archive-{recorder.datastore.schema}-{now:%Y%m%dT%H%M%S%fZ}.jsonl.gz"
    left = ArchiveRun(path=None)
    retention = FileRetention(store)
    archiver = FileArchiver(
        path,
        files,
        by_reference=files_by_reference,
        erased=retention.erased([task_id for task_id, _ in tasks]),
    )
    try:
        written = _write(
            recorder, merkle_log, path, tasks, left, archiver, schema=recorder.datastore.schema, now=now
        )
    except FileArchiveError as error:
        raise ArchiveError(f"{path}: {error}") from error
    finally:
        archiver.abandon()
    if left.unsequenced:
        log.info("%d expired tasks left: not yet in a signed checkpoint", len(left.unsequenced))
    if not written:
        path.unlink()
        files_tar(path).unlink(missing_ok=True)
        return left
    log.info("archived %d tasks (%d events) to %s", len(written), sum(written.values()), path)
    if before_verify is not None:
        before_verify(path)
    archive = read_archive(path)
    found = {task_id: events[-1].version for task_id, events in archive.tasks.items()}
    if found != written:
        raise ArchiveError(f"{path}: holds other tasks or versions than were written; nothing purged")
    _check_files(path, archive)
    tar = files_tar(path)
    run = ArchiveRun(
        path=path,
        tasks=len(archive.tasks),
        events=archive.events,
        files=len(archive.files),
        files_path=tar if tar.exists() else None,
        unsequenced=left.unsequenced,
        refused=left.refused,
    )
    kept_by = path.name if files_by_reference else None
    for task_id, version in written.items():
        if recorder.purge(
            task_id,
            version=version,
            archive_file=path.name,
            purged_at=now,
            also=PURGED_WITH_THE_TASK,
            then=retention.purge_statements(archiver.task_files.get(task_id, []), now=now, kept_by=kept_by),
        ):
            run.purged.append(task_id)
        else:
            run.skipped.append(task_id)
    log.info("purged %d archived tasks (%d changed meanwhile and stay)", len(run.purged), len(run.skipped))
    return run


def _check_files(path: Path, archive: Archive) -> None:
    """The files the archive's events refer to have their lines, and their bytes in its tar hash right.

    Raises:
        ArchiveError: Any file fault (each named); nothing is purged.
    """
    referenced = ReferencedFiles()
    for task_id, events in archive.tasks.items():
        referenced.add(task_id, [ChainRow(e.version, e.topic, e.state, e.chain) for e in events])
    faults: list[str] = []
    check_archived_files(path, archive.files, referenced, on_fault=lambda fault: faults.append(str(fault)))
    if faults:
        raise ArchiveError(
            f"{path}: {len(faults)} file faults ({faults[0]}{', ...' if len(faults) > 1 else ''});"
            " nothing purged"
        )


def _expired(recorder: PostgresRunQueueRecorder) -> list[tuple[UUID, str]]:
    tasks: list[tuple[UUID, str]] = []
    while True:
        page = recorder.expired_tasks(PAGE, after=tasks[-1][0] if tasks else None)
        tasks += page
        if len(page) < PAGE:
            return tasks


def _write(
    recorder: PostgresRunQueueRecorder,
    merkle_log: MerkleLog,
    path: Path,
    tasks: list[tuple[UUID, str]],
    left: ArchiveRun,
    archiver: FileArchiver,
    *,
    schema: str,
    now: datetime,
) -> dict[UUID, int]:
    """Write the archive (to a temporary name, then renamed); ``task_id -> last version`` written.

    The tasks not written are put in ``left``: not yet in a signed checkpoint, or refused (for a
    fault in their chain, or a stored file missing). Their files' bytes go to ``archiver``'s tar,
    finished before the archive gets its name.
    """
    partial = path.with_name(path.name + ".partial")
    digest = hashlib.sha256()
    written: dict[UUID, int] = {}
    events = 0
    with gzip.open(partial, "wb") as out:

        def line(obj: dict[str, Any], *, counted: bool = True) -> None:
            data = (json.dumps(obj, separators=(",", ":"), ensure_ascii=False) + "\n").encode()
            if counted:
                digest.update(data)
            out.write(data)

        line({"type": "header", "format": FORMAT, "formatVersion": FORMAT_VERSION, "schema": schema,
              "createdAt": iso(now)})  # fmt: skip
        for start in range(0, len(tasks), PAGE):
            page = tasks[start : start + PAGE]
            found = recorder.chain_rows([task_id for task_id, _ in page])
            for task_id, tenant in page:
                rows = found.get(task_id, [])
                receipt = _receipt(merkle_log, task_id, rows, left)
                if receipt is None:
                    continue
                stored = [row for row in rows if row.has_event]
                refused = archiver.admit(task_id, stored)
                if refused:
                    left.refused[task_id] = refused
                    for reason in refused:
                        log.warning("refused to archive task %s: %s", task_id, reason)
                    continue
                for row in stored:
                    line(_event_line(task_id, tenant, row))
                line({"type": "receipt", "taskId": str(task_id), "receipt": json.loads(receipt.to_json())})
                written[task_id] = stored[-1].version
                events += len(stored)
        for file in archiver.lines.values():
            line(file_line(file))
        line(
            {"type": "trailer", "tasks": len(written), "events": events, "files": len(archiver.lines),
             "sha256": digest.hexdigest()},
            counted=False,
        )  # fmt: skip
        out.flush()
    with partial.open("rb") as done:
        os.fsync(done.fileno())
    archiver.finish()
    partial.replace(path)
    return written


def _receipt(merkle_log: MerkleLog, task_id: UUID, rows: list[ChainRow], left: ArchiveRun) -> Receipt | None:
    """The receipt of the task's last event, if it is to be archived now; else why not, in ``left``."""
    faults: list[ChainFault] = check_task(task_id, rows)
    if faults:
        left.refused[task_id] = [str(fault) for fault in faults]
        for fault in faults:
            log.warning("refused to archive task %s: %s", task_id, fault)
        return None
    if not rows:
        return None
    receipt = merkle_log.receipt(task_id)
    if receipt is None or receipt.version != rows[-1].version:
        left.unsequenced.append(task_id)
        return None
    if receipt.chain_hash != rows[-1].chain:
        reason = f"task {task_id} version {receipt.version}: its leaf holds another chain hash than the log"
        left.refused[task_id] = [reason]
        log.warning("refused to archive task %s: %s", task_id, reason)
        return None
    return receipt


def _event_line(task_id: UUID, tenant: str, row: ChainRow) -> dict[str, Any]:
    """An event line: the stored bytes as text when they are UTF-8 (JSON always is), else base64."""
    assert row.topic is not None
    assert row.state is not None
    line: dict[str, Any] = {"type": "event", "taskId": str(task_id), "tenant": tenant,
                            "version": row.version, "topic": row.topic}  # fmt: skip
    try:
        line["state"] = row.state.decode()
    except UnicodeDecodeError:
        line["stateBase64"] = base64.b64encode(row.state).decode()
    line["chain"] = None if row.chain is None else row.chain.hex()
    return line


def _archived_event(obj: dict[str, Any], version: int) -> ArchivedEvent:
    if version == 1:  # parsed events, re-serialised as the store's transcoder writes them
        state = json.dumps(obj["event"], separators=(",", ":"), ensure_ascii=False).encode()
    elif "stateBase64" in obj:
        state = base64.b64decode(obj["stateBase64"], validate=True)
    else:
        state = obj["state"].encode()
    chain = obj.get("chain")
    return ArchivedEvent(
        task_id=UUID(obj["taskId"]),
        tenant=obj["tenant"],
        version=obj["version"],
        topic=obj["topic"],
        state=state,
        chain=bytes.fromhex(chain) if chain is not None else None,
    )


@dataclass(frozen=True)
class ArchivedHistory:
    """One task of an archive file as chain rows, as the file holds them, and its receipt (if any)."""

    task_id: UUID
    rows: list[ChainRow]
    receipt: Receipt | None


def archive_histories(path: Path) -> tuple[int, Iterator[ArchivedHistory]]:
    """The file's format version, and its tasks as chain rows and receipts, by task (for ``verify``).

    Reads the lines without the checks of ``read_archive`` (gaps, order, trailer), so that the
    chain check names what is wrong at which version.

    Raises:
        ArchiveError: The file is unreadable or no archive of a format this release reads.
    """
    tasks: dict[UUID, list[ChainRow]] = {}
    receipts: dict[UUID, Receipt] = {}
    version = 0
    try:
        for number, raw in enumerate(_lines(path), start=1):
            obj = json.loads(raw)
            kind = obj.get("type") if isinstance(obj, dict) else None
            if number == 1:
                version = _format_version(path, obj)
            elif kind == "event":
                event = _archived_event(obj, version)
                tasks.setdefault(event.task_id, []).append(
                    ChainRow(event.version, event.topic, event.state, event.chain)
                )
            elif kind == "receipt" and version >= 3:
                receipts[UUID(obj["taskId"])] = _parsed_receipt(obj)
            elif kind == "file" and version >= 4:
                parsed_file_line(obj)
            elif kind != "trailer":
                raise ArchiveError(f"{path}: line {number} is no archive line")
    except (OSError, EOFError, gzip.BadGzipFile, zlib.error, ValueError, KeyError, TypeError) as error:
        raise ArchiveError(f"{path}: unreadable archive ({error})") from error
    if version == 1:
        raise ArchiveError(f"{path}: a {FORMAT} file of format version 1 holds no chain hashes")
    histories = (
        ArchivedHistory(task_id, sorted(tasks[task_id], key=lambda row: row.version), receipts.get(task_id))
        for task_id in sorted(tasks)
    )
    return version, histories


def archive_file_lines(path: Path) -> dict[str, ArchivedFile]:
    """The file lines of an archive (format version 4; none in older files), by hash.

    Raises:
        ArchiveError: The file is unreadable, or a file line is malformed.
    """
    files: dict[str, ArchivedFile] = {}
    try:
        for raw in _lines(path):
            if b'"type":"file"' not in raw:
                continue
            obj = json.loads(raw)
            if isinstance(obj, dict) and obj.get("type") == "file":
                file = parsed_file_line(obj)
                files[file.sha256] = file
    except (OSError, EOFError, gzip.BadGzipFile, zlib.error, ValueError, KeyError, TypeError) as error:
        raise ArchiveError(f"{path}: unreadable archive ({error})") from error
    return files


def _parsed_receipt(obj: dict[str, Any]) -> Receipt:
    """The receipt of a receipt line (``ReceiptError``, a ``ValueError``, for a malformed one)."""
    return Receipt.from_json(json.dumps(obj["receipt"]))


def _format_version(path: Path, header: Any) -> int:
    """The format version of a file whose first line is ``header``, if this release reads it."""
    if (
        not isinstance(header, dict)
        or header.get("type") != "header"
        or header.get("format") != FORMAT
        or header.get("formatVersion") not in READABLE_VERSIONS
    ):
        raise ArchiveError(f"{path}: not a {FORMAT} file of format version {READABLE_VERSIONS}")
    version: int = header["formatVersion"]
    return version


def read_archive(path: Path) -> Archive:
    """Read and check an archive: header, trailer (counts and sha256), each task's versions 1..n.

    Raises:
        ArchiveError: The file is unreadable, truncated, altered, or no archive of this format.
    """
    version = 0
    digest = hashlib.sha256()
    header: dict[str, Any] | None = None
    trailer: dict[str, Any] | None = None
    tasks: dict[UUID, list[ArchivedEvent]] = {}
    receipts: dict[UUID, Receipt] = {}
    files: dict[str, ArchivedFile] = {}
    try:
        for number, raw in enumerate(_lines(path), start=1):
            if trailer is not None:
                raise ArchiveError(f"{path}: line {number} follows the trailer")
            obj = json.loads(raw)
            kind = obj.get("type") if isinstance(obj, dict) else None
            if number == 1:
                version = _format_version(path, obj)
                header = obj
            elif kind == "event":
                event = _archived_event(obj, version)
                events = tasks.setdefault(event.task_id, [])
                if event.version != len(events) + 1:
                    raise ArchiveError(
                        f"{path}: line {number}: task {event.task_id} version {event.version} "
                        f"follows version {len(events)}"
                    )
                events.append(event)
            elif kind == "receipt" and version >= 3:
                _check_receipt(path, number, obj, tasks, receipts)
            elif kind == "file" and version >= 4:
                _add_file(path, number, obj, files)
            elif kind == "trailer":
                trailer = obj
                continue
            else:
                raise ArchiveError(f"{path}: line {number} is no archive line")
            digest.update(raw)
    except (OSError, EOFError, gzip.BadGzipFile, zlib.error, ValueError, KeyError, TypeError) as error:
        raise ArchiveError(f"{path}: unreadable archive ({error})") from error
    if header is None or trailer is None:
        raise ArchiveError(f"{path}: truncated (no {'header' if header is None else 'trailer'})")
    _check_whole(path, header, trailer, digest.hexdigest(), tasks, receipts)
    if header["formatVersion"] >= 4 and trailer.get("files") != len(files):
        raise ArchiveError(f"{path}: holds {len(files)} file lines, not what it says")
    return Archive(header=header, tasks=tasks, receipts=receipts, files=files)


def _check_whole(
    path: Path,
    header: dict[str, Any],
    trailer: dict[str, Any],
    sha256: str,
    tasks: dict[UUID, list[ArchivedEvent]],
    receipts: dict[UUID, Receipt],
) -> None:
    """The trailer's checksum and counts are the file's, and (version 3) every task has its receipt."""
    count = sum(len(e) for e in tasks.values())
    if trailer.get("sha256") != sha256:
        raise ArchiveError(f"{path}: the sha256 of its lines differs from its trailer's")
    counts = (len(tasks), count)
    if (trailer.get("tasks"), trailer.get("events")) != counts or header.get("tasks", len(tasks)) != len(
        tasks
    ):
        raise ArchiveError(f"{path}: holds {len(tasks)} tasks and {count} events, not what it says")
    if header["formatVersion"] >= 3 and set(receipts) != set(tasks):
        raise ArchiveError(f"{path}: {len(set(tasks) - set(receipts))} tasks have no receipt")


def _add_file(path: Path, number: int, obj: dict[str, Any], files: dict[str, ArchivedFile]) -> None:
    """A file line names a file no line before it did."""
    file = parsed_file_line(obj)
    if file.sha256 in files:
        raise ArchiveError(f"{path}: line {number}: a second line for file sha256:{file.sha256}")
    files[file.sha256] = file


def _check_receipt(
    path: Path,
    number: int,
    obj: dict[str, Any],
    tasks: dict[UUID, list[ArchivedEvent]],
    receipts: dict[UUID, Receipt],
) -> None:
    """A receipt line follows its task's events and proves the last of them (its version, its chain)."""
    task_id = UUID(obj["taskId"])
    receipt = _parsed_receipt(obj)
    events = tasks.get(task_id)
    if task_id in receipts or not events or receipt.task_id != task_id:
        raise ArchiveError(f"{path}: line {number}: a receipt out of place for task {task_id}")
    if (receipt.version, receipt.chain_hash) != (events[-1].version, events[-1].chain):
        raise ArchiveError(
            f"{path}: line {number}: the receipt of task {task_id} is not of its last archived event"
        )
    receipts[task_id] = receipt


def _lines(path: Path) -> Iterator[bytes]:
    with gzip.open(path, "rb") as lines:
        yield from lines
