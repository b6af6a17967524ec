"""``longhaul verify``'s checks: a store's chains, signed log and stored files, or an archive's.

Each check calls ``on_fault`` for every fault as it is found (the caller prints it) and
``on_progress`` with the running report of the phase it is in (chains, then the signed log, then
the stored files), and returns a :class:`Verification`: what was checked and how many faults it
found. The stored files the chains refer to are collected as the chains are read, then each (or
a sample) is read and hashed (``store.evidence.file_checks``).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol
from uuid import UUID

from store.evidence.blocking_files import BlockingFiles
from store.evidence.chain import ChainFault, ChainReport, ChainRow, verify_chains
from store.evidence.file_checks import (
    ArchivedFile,
    FileFault,
    FileReport,
    ReferencedFiles,
    check_archived_files,
    check_stored_files,
)
from store.evidence.log_audit import LogFault, receipt_faults
from store.evidence.log_audit_reads import LogAuditReads, LogReport, audit_store
from store.evidence.merkle_log import MerkleLog
from store.evidence.receipts import Receipt
from store.evidence.signed_notes import VerifierKey
from store.log.postgres import PostgresRunQueueRecorder

NAMED_LIMIT = 100_000
"""Chain faults remembered so that the log audit does not name their versions again (beyond: it may)."""

Fault = ChainFault | LogFault | FileFault
Progress = ChainReport | LogReport | FileReport


class NoVerifierKeyError(Exception):
    """There are signed checkpoints (or receipts) to check, and no key to check them with."""


class ArchivedChain(Protocol):
    """One task of an archive file: its chain rows and its receipt (``store.evidence.archive``)."""

    @property
    def task_id(self) -> UUID:
        """The task."""
        ...

    @property
    def rows(self) -> list[ChainRow]:
        """Its events as chain rows, in the file's order."""
        ...

    @property
    def receipt(self) -> Receipt | None:
        """Its receipt (format version 3), if the file holds one."""
        ...


@dataclass(frozen=True)
class StoredFiles:
    """The file store to read a store's files from, which tasks were erased, and how many to read."""

    files: BlockingFiles
    erased: frozenset[UUID] = frozenset()
    """Tasks erased with their tenant: their files may be gone (``longhaul erase``), no fault."""
    sample: int | None = None
    """Read this many files, chosen at random (``None``: every one)."""


@dataclass(frozen=True)
class ArchiveFiles:
    """An archive's file lines, where it is, and the file store of the files it names by reference."""

    path: Path
    lines: dict[str, ArchivedFile] = field(default_factory=dict)
    files: BlockingFiles | None = None
    """``None``: the files named by reference are not read."""


@dataclass(frozen=True)
class Verification:
    """What a verification checked and found."""

    chains: ChainReport
    log: LogReport | None = None
    """The store's signed log (None for an archive)."""
    signed: bool = True
    """A store: it has a signed checkpoint (without one, only the chains were checked)."""
    receipts: int | None = None
    """An archive of format version 3: the receipts checked (None: it holds none)."""
    receipt_faults: int = 0
    files: FileReport | None = None
    """The stored files (None: not checked)."""

    @property
    def log_faults(self) -> int:
        """The faults of the signed log (a store) or of the receipts (an archive)."""
        return (self.log.faults if self.log is not None else 0) + self.receipt_faults

    @property
    def faults(self) -> int:
        """Every fault found."""
        return self.chains.faults + self.log_faults + (self.files.faults if self.files is not None else 0)


def verify_store(
    recorder: PostgresRunQueueRecorder,
    merkle_log: MerkleLog,
    keys: Sequence[VerifierKey],
    *,
    on_fault: Callable[[Fault], None],
    on_progress: Callable[[Progress], None] | None = None,
    files: StoredFiles | None = None,
) -> Verification:
    """Check every chain of the store, the Merkle log against the signed checkpoints, then the files.

    ``NoVerifierKeyError`` (before any check) when there is a signed checkpoint and no key.
    A version whose chain fault was named is not named again by the log audit. With ``files``,
    the stored files the chains refer to are read and hashed (all, or a sample).
    """
    signed = merkle_log.latest_checkpoint() is not None
    if signed and not keys:
        raise NoVerifierKeyError
    named: set[tuple[UUID, int]] = set()

    def chain_fault(found: ChainFault) -> None:
        on_fault(found)
        if len(named) < NAMED_LIMIT:
            named.add((found.task_id, found.version))

    referenced = ReferencedFiles(set(files.erased)) if files is not None else None

    def histories() -> Iterator[tuple[UUID, list[ChainRow]]]:
        for task_id, rows in recorder.chained_histories():
            if referenced is not None:
                referenced.add(task_id, rows)
            yield task_id, rows

    chains = verify_chains(histories(), on_fault=chain_fault, on_task=on_progress)
    checked = audit_store(
        merkle_log, LogAuditReads(recorder), keys, named=named, on_fault=on_fault, on_page=on_progress
    )
    report = None
    if files is not None and referenced is not None:
        report = check_stored_files(
            referenced, files.files, sample=files.sample, on_fault=on_fault, on_progress=on_progress
        )
    return Verification(chains=chains, log=checked, signed=signed, files=report)


def verify_archive(
    version: int,
    histories: Iterable[ArchivedChain],
    keys: Sequence[VerifierKey],
    *,
    on_fault: Callable[[Fault], None],
    on_progress: Callable[[Progress], None] | None = None,
    files: ArchiveFiles | None = None,
) -> Verification:
    """Check an archive's chains, (format ``version`` 3 and later) each task's receipt and its files.

    ``NoVerifierKeyError`` (before any check) when the format holds receipts and there is no key.
    With ``files`` (format version 4), every stored file the events refer to is checked: its line,
    and its bytes (in the archive's tar, or by reference in ``files.files``) against its hash.
    """
    if version >= 3 and not keys:
        raise NoVerifierKeyError
    lasts: dict[UUID, tuple[Receipt | None, ChainRow | None]] = {}
    referenced = ReferencedFiles()

    def pairs() -> Iterator[tuple[UUID, Sequence[ChainRow]]]:
        for history in histories:
            lasts[history.task_id] = (history.receipt, history.rows[-1] if history.rows else None)
            if files is not None and version >= 4:
                referenced.add(history.task_id, history.rows)
            yield history.task_id, history.rows

    chains = verify_chains(pairs(), on_fault=on_fault, on_task=on_progress)
    report = None
    if files is not None and version >= 4:
        report = check_archived_files(
            files.path, files.lines, referenced, files=files.files, on_fault=on_fault, on_progress=on_progress
        )
    if version < 3:
        return Verification(chains=chains, files=report)
    faults = 0
    for task_id, (receipt, last) in lasts.items():
        for fault in receipt_faults(task_id, receipt, last, keys):
            faults += 1
            on_fault(fault)
    return Verification(chains=chains, receipts=len(lasts), receipt_faults=faults, files=report)
