"""The stored files a log refers to, and their bytes checked against their hashes.

A stored file's part names its SHA-256 and size in the event (``domain.files``), so the chain
and the signed checkpoints cover the file's bytes as long as those bytes still hash to it.
``ReferencedFiles`` collects, as ``verify`` or ``archive`` reads each task's stored events, every
file the events name: per hash its size, a name, the first task that refers to it (and how many
more), and the first one that is not erased. ``check_stored_files`` reads each file (or a sample)
from the file store and hashes it; ``check_archived_files`` does the same for an archive: the
bytes in its companion ``.files.tar`` (``store.evidence.archived_files``), or in the file store
where the archive names them by reference. Each finds faults as ``FileFault``: the task, the hash,
the file's name and what is wrong (missing, other bytes, another size). A file missing for an
erased task (``longhaul erase``) is no fault: it is counted as erased.
"""

from __future__ import annotations

import hashlib
import json
import random
import tarfile
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import BinaryIO
from uuid import UUID

from domain.files import SCHEME, parts_of, stored_file
from store.evidence.blocking_files import BlockingFiles, Rehashed
from store.evidence.chain import ChainRow

SCHEME_BYTES = SCHEME.encode()
CHUNK = 1 << 20
MEMBER_PREFIX = "files/"
"""A file's member in an archive's ``.files.tar``: ``files/<sha256>``."""


@dataclass(frozen=True)
class FileFault:
    """One stored file that is not what the log says: missing, other bytes or another size."""

    task_id: UUID
    sha256: str
    filename: str | None
    reason: str
    others: int = 0
    """More tasks that refer to the same file."""

    def __str__(self) -> str:
        name = f" ({self.filename})" if self.filename else ""
        more = f" (and {self.others} more tasks)" if self.others else ""
        return f"task {self.task_id}{more}: file sha256:{self.sha256}{name}: {self.reason}"


@dataclass
class Referenced:
    """One stored file as the log refers to it."""

    sha256: str
    size: int
    """The size the first part that names it says."""
    filename: str | None
    task_id: UUID
    """The first task that refers to it."""
    tasks: int = 1
    live_task: UUID | None = None
    """The first task that refers to it and is not erased (``None``: only erased tasks do)."""
    sizes: set[int] = field(default_factory=set)
    """Every size the parts that name it say (one, unless a part lies)."""

    @property
    def named_task(self) -> UUID:
        """The task a fault names: one not erased, if any."""
        return self.live_task or self.task_id


class ReferencedFiles:
    """Every stored file the events given to ``add`` refer to, by hash."""

    def __init__(self, erased: set[UUID] | None = None) -> None:
        self.erased = erased or set()
        self.files: dict[str, Referenced] = {}

    def add(self, task_id: UUID, rows: Iterable[ChainRow]) -> list[str]:
        """Collect the files of one task's stored events; returns their hashes, each once."""
        found: list[str] = []
        for row in rows:
            state = row.state
            if state is None or SCHEME_BYTES not in state:
                continue
            try:
                event = json.loads(state)
            except ValueError:  # not JSON: the chain check names the event
                continue
            for part in parts_of(event):
                ref = stored_file(part)
                if ref is None or ref.sha256 in found:
                    continue
                found.append(ref.sha256)
                filename = part.get("filename") if isinstance(part.get("filename"), str) else None
                self._note(task_id, ref.sha256, ref.size, filename)
        return found

    def _note(self, task_id: UUID, sha256: str, size: int, filename: str | None) -> None:
        live = task_id not in self.erased
        seen = self.files.get(sha256)
        if seen is None:
            seen = self.files[sha256] = Referenced(sha256, size, filename, task_id, tasks=0)
        seen.tasks += 1  # once per task: ``add`` names each file of a task once
        seen.sizes.add(size)
        if seen.filename is None:
            seen.filename = filename
        if live and seen.live_task is None:
            seen.live_task = task_id


@dataclass
class FileReport:
    """What a check of stored files read and found."""

    referenced: int = 0
    """Distinct files the log refers to."""
    checked: int = 0
    """Files read and hashed."""
    faults: int = 0
    erased: int = 0
    """Files missing because only erased tasks refer to them: no fault."""
    by_reference: int = 0
    """Files an archive names by reference, not checked (no file store to read them from)."""


def check_stored_files(
    referenced: ReferencedFiles,
    files: BlockingFiles,
    *,
    sample: int | None = None,
    on_fault: Callable[[FileFault], None],
    on_progress: Callable[[FileReport], None] | None = None,
    seed: int | None = None,
) -> FileReport:
    """Read every referenced file from the file store (or ``sample`` of them, at random) and hash it."""
    report = FileReport(referenced=len(referenced.files))
    chosen = _chosen(list(referenced.files), sample, seed)
    for found in files.rehash_each(chosen):
        ref = referenced.files[found.sha256]
        report.checked += 1
        fault = _fault(ref, found)
        if _erased(ref, found):
            report.erased += 1
        elif fault is not None:
            report.faults += 1
            on_fault(fault)
        if on_progress is not None:
            on_progress(report)
    return report


@dataclass(frozen=True)
class ArchivedFile:
    """An archive's line about one file: its hash, size and where its bytes are kept."""

    sha256: str
    size: int
    kept: str
    """``archive`` (in the companion tar named ``where``), ``store`` (the file store ``where``) or
    ``erased`` (its tenant was erased before the archive was written: no bytes anywhere)."""
    where: str | None = None

    KEPT = ("archive", "store", "erased")


def check_archived_files(
    path: Path,
    lines: Mapping[str, ArchivedFile],
    referenced: ReferencedFiles,
    *,
    files: BlockingFiles | None = None,
    on_fault: Callable[[FileFault], None],
    on_progress: Callable[[FileReport], None] | None = None,
) -> FileReport:
    """Check the files an archive's events refer to against its file lines and the bytes they name.

    The bytes of a file kept in the archive are read from the companion tar beside ``path``, each
    member hashed as it streams; those kept by reference from ``files`` (``None``: not checked,
    counted in ``by_reference``).
    """
    report = FileReport(referenced=len(referenced.files))
    faults, in_tar, in_store = _where_kept(lines, referenced, report)
    for name, hashes in in_tar.items():
        for found in _tar_members(path.with_name(name), set(hashes)):
            report.checked += 1
            fault = _fault(referenced.files[found.sha256], found, where=f"in {name}")
            if fault is not None:
                faults.append(fault)
            if on_progress is not None:
                on_progress(report)
    if files is None:
        report.by_reference = len(in_store)
    else:
        for found in files.rehash_each(in_store):
            report.checked += 1
            ref = referenced.files[found.sha256]
            fault = _fault(ref, found, where=f"in the file store {files.url}")
            if _erased(ref, found):
                report.erased += 1
            elif fault is not None:
                faults.append(fault)
    for fault in faults:
        report.faults += 1
        on_fault(fault)
    return report


def _where_kept(
    lines: Mapping[str, ArchivedFile], referenced: ReferencedFiles, report: FileReport
) -> tuple[list[FileFault], dict[str, list[str]], list[str]]:
    """Each referenced file's line: the faults of the lines, the hashes per tar, those in the store.

    Counts in ``report`` the files kept nowhere because their tenant was erased.
    """
    faults: list[FileFault] = []
    in_tar: dict[str, list[str]] = {}
    in_store: list[str] = []
    for sha256, ref in referenced.files.items():
        line = lines.get(sha256)
        if line is None:
            faults.append(_named(ref, "the archive holds no line for it (no bytes, no reference)"))
        elif line.size not in ref.sizes or len(ref.sizes) > 1:
            faults.append(_named(ref, f"the parts say {_sizes(ref)} bytes, the archive's line {line.size}"))
        elif line.kept == "archive" and line.where is not None:
            in_tar.setdefault(line.where, []).append(sha256)
        elif line.kept == "store":
            in_store.append(sha256)
        elif line.kept == "erased":
            report.erased += 1
        else:
            faults.append(_named(ref, f"the archive's line keeps it nowhere ({line.kept!r})"))
    return faults, in_tar, in_store


def _tar_members(path: Path, wanted: set[str]) -> Iterable[Rehashed]:
    """Each wanted file as the tar holds it, hashed as it streams; the ones it lacks as not found."""
    left = set(wanted)
    try:
        with tarfile.open(path, "r:") as tar:
            for member in tar:
                sha256 = member.name.removeprefix(MEMBER_PREFIX)
                if not member.name.startswith(MEMBER_PREFIX) or sha256 not in left or not member.isfile():
                    continue
                reader = tar.extractfile(member)
                assert reader is not None
                digest, size = hashlib.sha256(), 0
                while chunk := reader.read(CHUNK):
                    digest.update(chunk)
                    size += len(chunk)
                left.discard(sha256)
                yield Rehashed(sha256, found=True, digest=digest.hexdigest(), size=size)
    except (OSError, tarfile.TarError):
        pass  # what was not read is missing, below
    for sha256 in sorted(left):
        yield Rehashed(sha256, found=False)


def stream_member(out: BinaryIO, sha256: str, size: int, copy: Callable[[BinaryIO], Rehashed]) -> Rehashed:
    """Write one ``files/<sha256>`` member of ``size`` bytes to the tar stream ``out``; ``copy`` writes them.

    The header says ``size`` (the part's): bytes of another count make an unreadable tar, which the
    check names, and ``copy``'s result says what was written.
    """
    info = tarfile.TarInfo(MEMBER_PREFIX + sha256)
    info.size = size
    info.mode = 0o444
    out.write(info.tobuf(format=tarfile.PAX_FORMAT))
    written = copy(out)
    if written.size is not None:
        out.write(b"\0" * (-written.size % tarfile.BLOCKSIZE))
    return written


def end_tar(out: BinaryIO) -> None:
    """The two zero blocks that end a tar, padded to a whole record."""
    out.write(b"\0" * (2 * tarfile.BLOCKSIZE))
    position = out.tell()
    out.write(b"\0" * (-position % tarfile.RECORDSIZE))


def _erased(ref: Referenced, found: Rehashed) -> bool:
    """Whether ``found`` is missing because only erased tasks refer to it (no fault)."""
    return not found.found and ref.live_task is None


def _fault(ref: Referenced, found: Rehashed, where: str = "in the file store") -> FileFault | None:
    """What is wrong with ``found`` for ``ref`` (``None``: nothing, or missing for erased tasks only)."""
    if not found.found:
        if ref.live_task is None:
            return None
        return _named(ref, f"missing: no file with this hash {where}")
    if found.digest != ref.sha256:
        return _named(ref, f"changed: the bytes {where} hash to sha256:{found.digest}")
    if found.size not in ref.sizes or len(ref.sizes) > 1:
        return _named(ref, f"the parts say {_sizes(ref)} bytes, {where} it has {found.size}")
    return None


def _named(ref: Referenced, reason: str) -> FileFault:
    return FileFault(ref.named_task, ref.sha256, ref.filename, reason, others=ref.tasks - 1)


def _sizes(ref: Referenced) -> str:
    return " or ".join(str(size) for size in sorted(ref.sizes))


def _chosen(hashes: Sequence[str], sample: int | None, seed: int | None) -> list[str]:
    if sample is None or sample >= len(hashes):
        return list(hashes)
    return random.Random(seed).sample(list(hashes), sample)  # noqa: S311 - a sample, not a secret
