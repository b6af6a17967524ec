"""The verification status of one task: its hash chain, and the signed checkpoint that covers it.

What the timeline page shows (``api/audit_pages.py``). The *chain* is checked as ``verify`` checks
every task (``store.evidence.chain.check_task`` over the stored events and hashes). The *checkpoint* is the
task's receipt (``MerkleLog.receipt``: the latest signed checkpoint and the inclusion proof of the
task's last event it covers) verified with the log's verifier keys (``store.evidence.receipts``), and the
chain hash the receipt proves compared with the one stored for that version now; the leaves the
sequencer took in for the task's other versions are compared with the stored hashes too. So an
event altered together with its chain row (the chain alone checks) still fails, naming the
versions whose stored hash is not the one the Merkle log took in.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum
from uuid import UUID

from store.evidence.chain import ChainFault, ChainRow, check_task
from store.evidence.merkle_log import MerkleLog
from store.evidence.receipts import Receipt, verify_receipt
from store.evidence.signed_notes import VerifierKey
from store.log.application import TaskApplication
from store.log.memory import MemoryRunQueueRecorder
from store.log.postgres import PostgresRunQueueRecorder

INTERVAL_SETTING = "LONGHAUL_CHECKPOINT_INTERVAL_SECONDS"
"""The setting of how often the sequencer signs a checkpoint, named where none covers a task yet."""


class Status(StrEnum):
    """The outcome of one check."""

    VERIFIED = "verified"
    PENDING = "pending"
    """Nothing wrong, and nothing to prove it by yet: no signed checkpoint covers the task."""
    FAILED = "failed"
    UNAVAILABLE = "unavailable"
    """It cannot be checked here: a memory store (no Merkle log), or no verifier key configured."""


@dataclass(frozen=True)
class Fault:
    """One thing wrong at one version of a task."""

    version: int
    reason: str

    def __str__(self) -> str:
        return f"version {self.version}: {self.reason}"


@dataclass(frozen=True)
class ChainStatus:
    """The task's hash chain: each event against the hash stored beside it, chained to the one before."""

    status: Status
    summary: str
    faults: tuple[Fault, ...] = ()


@dataclass(frozen=True)
class CheckpointStatus:
    """The signed checkpoint that covers the task, if one does, and whether its receipt holds."""

    status: Status
    summary: str
    faults: tuple[Fault, ...] = ()
    size: int | None = None
    """The tree size of the checkpoint (when a receipt was found)."""
    version: int | None = None
    """The task's version the receipt proves: its last event the checkpoint covers."""
    signer: str | None = None
    """``name+keyID`` of the verifier key the checkpoint verified with."""
    signed_at: datetime | None = None


@dataclass(frozen=True)
class TaskVerification:
    """Both checks of one task."""

    chain: ChainStatus
    checkpoint: CheckpointStatus

    @property
    def failed(self) -> bool:
        """Whether either check failed."""
        return Status.FAILED in (self.chain.status, self.checkpoint.status)

    @property
    def faulty_versions(self) -> frozenset[int]:
        """The versions either check names a fault at."""
        return frozenset(fault.version for fault in (*self.chain.faults, *self.checkpoint.faults))


def verify_task(
    store: TaskApplication, task_id: UUID, verifier_keys: tuple[VerifierKey, ...] | list[VerifierKey]
) -> TaskVerification:
    """Check the chain of ``task_id`` and the checkpoint covering it, with the log's ``verifier_keys``."""
    recorder = store.recorder
    assert isinstance(recorder, (PostgresRunQueueRecorder, MemoryRunQueueRecorder))
    rows = recorder.chain_rows([task_id]).get(task_id, [])
    return TaskVerification(
        chain=chain_status(task_id, rows),
        checkpoint=checkpoint_status(store.merkle_log, task_id, rows, list(verifier_keys)),
    )


def chain_status(task_id: UUID, rows: list[ChainRow]) -> ChainStatus:
    """The chain's status from the task's stored ``rows``."""
    faults = check_task(task_id, rows)
    events = sum(1 for row in rows if row.has_event)
    if faults:
        return ChainStatus(
            Status.FAILED,
            f"{len(faults)} fault{'s' if len(faults) > 1 else ''} in the chain of {events} events",
            tuple(_chain_fault(fault) for fault in faults),
        )
    return ChainStatus(Status.VERIFIED, f"all {events} events match their chained hashes")


def _chain_fault(fault: ChainFault) -> Fault:
    return Fault(fault.version, f"{fault.kind}: {fault.detail}")


def checkpoint_status(
    log: MerkleLog | None, task_id: UUID, rows: list[ChainRow], keys: list[VerifierKey]
) -> CheckpointStatus:
    """The status of the checkpoint covering the task, given its stored ``rows`` and the log's ``keys``."""
    if log is None:
        return CheckpointStatus(Status.UNAVAILABLE, "this store keeps no Merkle log (LONGHAUL_STORE=memory)")
    stored = {row.version: row.chain for row in rows}
    receipt = log.receipt(task_id)
    proven = None if receipt is None else receipt.version
    faults = [
        Fault(
            leaf.version,
            f"{_hash_fault(stored.get(leaf.version))} the Merkle log took in (leaf {leaf.index})",
        )
        for leaf in log.leaves_of(task_id)
        if leaf.version != proven and stored.get(leaf.version) != leaf.chain_hash
    ]
    if receipt is None:
        if faults:
            return CheckpointStatus(
                Status.FAILED, "the Merkle log disagrees with the stored chain", tuple(faults)
            )
        return CheckpointStatus(
            Status.PENDING,
            f"not yet in a signed checkpoint: the sequencer signs one every {INTERVAL_SETTING}",
        )
    if not keys:
        return CheckpointStatus(
            Status.FAILED if faults else Status.UNAVAILABLE,
            "no verifier key is configured (LONGHAUL_AUDIT_KEY_FILE, LONGHAUL_AUDIT_VERIFIER_KEYS)",
            tuple(faults),
        )
    return _proven(log, receipt, stored, keys, faults)


def _proven(
    log: MerkleLog,
    receipt: Receipt,
    stored: dict[int, bytes | None],
    keys: list[VerifierKey],
    faults: list[Fault],
) -> CheckpointStatus:
    """The status of a found ``receipt``: it verifies, and proves the chain hash stored now."""
    verdict = verify_receipt(receipt, [str(key) for key in keys])  # receipts.py has its own key type
    if not verdict.valid:
        faults.insert(0, Fault(receipt.version, f"the receipt does not verify: {verdict.reason}"))
    if stored.get(receipt.version) != receipt.chain_hash:
        reason = f"{_hash_fault(stored.get(receipt.version))} the signed checkpoint covers"
        faults.insert(0, Fault(receipt.version, reason))
    faults.sort(key=lambda fault: fault.version)
    if verdict.checkpoint is None:
        return CheckpointStatus(Status.FAILED, "the receipt of the task does not verify", tuple(faults))
    size = verdict.checkpoint.size
    latest = log.latest_checkpoint()
    signed_at = latest.signed_at if latest is not None and latest.note == receipt.checkpoint else None
    signer = next(f"{k.name}+{k.key_id:08x}" for k in keys if verify_receipt(receipt, str(k)).valid)
    if faults:
        status = Status.FAILED
        summary = f"the checkpoint of size {size} does not cover the task's events as they are stored"
    else:
        status = Status.VERIFIED
        summary = f"versions 1 to {receipt.version} are in the checkpoint of size {size} signed by {signer}"
        last = max(stored, default=receipt.version)
        if last > receipt.version:
            summary += f"; versions {receipt.version + 1} to {last} are not yet in a signed checkpoint"
    return CheckpointStatus(
        status, summary, tuple(faults), size=size, version=receipt.version, signer=signer, signed_at=signed_at
    )


def _hash_fault(now: bytes | None) -> str:
    """The start of a sentence saying how the stored chain hash differs from a leaf's."""
    if now is None:
        return "no chain hash is stored for it, though it is a leaf"
    return "its stored chain hash is not the one"
