"""``longhaul verify``'s checks: a store's chains and signed log, or an archive's chains and receipts.

Each check calls ``on_fault`` for every fault as it is found (the caller prints it) and
``on_progress`` with the running report of the phase it is in (chains, then the signed log), and
returns a :class:`Verification`: what was checked and how many faults it found.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Protocol
from uuid import UUID

from store.evidence.chain import ChainFault, ChainReport, ChainRow, verify_chains
from store.evidence.log_audit import LogFault, receipt_faults
from store.evidence.log_audit_reads import LogAuditReads, LogReport, audit_store
from store.evidence.merkle_log import MerkleLog
from store.evidence.receipts import Receipt
from store.evidence.signed_notes import VerifierKey
from store.log.postgres import PostgresRunQueueRecorder

NAMED_LIMIT = 100_000
"""Chain faults remembered so that the log audit does not name their versions again (beyond: it may)."""

Fault = ChainFault | LogFault
Progress = ChainReport | LogReport


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

    @property
    def log_faults(self) -> int:
        """The faults of the signed log (a store) or of the receipts (an archive)."""
        return (self.log.faults if self.log is not None else 0) + self.receipt_faults

    @property
    def faults(self) -> int:
        """Every fault found."""
        return self.chains.faults + self.log_faults


def verify_store(
    recorder: PostgresRunQueueRecorder,
    merkle_log: MerkleLog,
    keys: Sequence[VerifierKey],
    *,
    on_fault: Callable[[Fault], None],
    on_progress: Callable[[Progress], None] | None = None,
) -> Verification:
    """Check every chain of the store, then the Merkle log against the signed checkpoints.

    ``NoVerifierKeyError`` (before any check) when there is a signed checkpoint and no key.
    A version whose chain fault was named is not named again by the log audit.
    """
    signed = merkle_log.latest_checkpoint() is not None
    if signed and not keys:
        raise NoVerifierKeyError
    named: set[tuple[UUID, int]] = set()

    def chain_fault(found: ChainFault) -> None:
        on_fault(found)
        if len(named) < NAMED_LIMIT:
            named.add((found.task_id, found.version))

    chains = verify_chains(recorder.chained_histories(), on_fault=chain_fault, on_task=on_progress)
    checked = audit_store(
        merkle_log, LogAuditReads(recorder), keys, named=named, on_fault=on_fault, on_page=on_progress
    )
    return Verification(chains=chains, log=checked, signed=signed)


def verify_archive(
    version: int,
    histories: Iterable[ArchivedChain],
    keys: Sequence[VerifierKey],
    *,
    on_fault: Callable[[Fault], None],
    on_progress: Callable[[Progress], None] | None = None,
) -> Verification:
    """Check an archive's chains and (format ``version`` 3 and later) each task's receipt.

    ``NoVerifierKeyError`` (before any check) when the format holds receipts and there is no key.
    """
    if version >= 3 and not keys:
        raise NoVerifierKeyError
    lasts: dict[UUID, tuple[Receipt | None, ChainRow | None]] = {}

    def pairs() -> Iterator[tuple[UUID, Sequence[ChainRow]]]:
        for history in histories:
            lasts[history.task_id] = (history.receipt, history.rows[-1] if history.rows else None)
            yield history.task_id, history.rows

    chains = verify_chains(pairs(), on_fault=on_fault, on_task=on_progress)
    if version < 3:
        return Verification(chains=chains)
    faults = 0
    for task_id, (receipt, last) in lasts.items():
        for fault in receipt_faults(task_id, receipt, last, keys):
            faults += 1
            on_fault(fault)
    return Verification(chains=chains, receipts=len(lasts), receipt_faults=faults)
