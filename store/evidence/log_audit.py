"""The audit of the Merkle log against its signed checkpoints: pure checks that name every fault.

``longhaul verify`` (``docs/audit.md`` "Verify", ADR 0030) checks the chains first
(``store/evidence/chain.py``), then the Merkle log with this module:

- :func:`checkpoint_faults`: every stored checkpoint's note opens with the verifier keys, its
  origin is the signing key's name, and it signs the size and root of its row;
- :class:`LeafPass`, fed the leaves in index order a page at a time with what the log holds at
  each leaf's (task, version) and the stored subtrees: every leaf's event is in the log with the
  leaf's chain hash (a task whose every leaf is missing is named once, as deleted, unless it was
  purged after archiving), the leaf indexes have no gap, every stored subtree is the one the
  leaves give, and the root of the first ``n`` leaves is the signed root of each checkpoint of
  size ``n``;
- :func:`consistency_faults`: each consecutive pair of checkpoints is consistent (RFC 9162
  consistency proofs from the stored subtrees);
- :func:`receipt_faults`, for an archive file: a task's receipt verifies with the keys and proves
  the task's last archived event.

The reads are elsewhere (``store/evidence/log_audit_reads.py``); here only values come in and faults go
out. Faults at a (task, version) that the chain check already named are left out (``named``),
so one damage is one line.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Container, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from uuid import UUID

from store.evidence.chain import ChainRow
from store.evidence.checkpoints import CheckpointError, parse_checkpoint
from store.evidence.merkle import MerkleTree, Node, ProofError, verify_consistency
from store.evidence.merkle_log import Leaf, PurgedTask, StoredCheckpoint
from store.evidence.receipts import Receipt, verify_receipt
from store.evidence.signed_notes import NoteError, VerifierKey, open_note


@dataclass(frozen=True)
class LogFault:
    """One fault of the signed log: what it is about, its kind, and a sentence that says it."""

    subject: str
    """``task T version V``, ``task T``, ``checkpoint N``, ``checkpoints N and M``, ``leaves A..B``."""
    kind: str
    detail: str

    def __str__(self) -> str:
        return f"{self.subject}: {self.kind}: {self.detail}"


@dataclass(frozen=True)
class InLog:
    """What the log holds at a leaf's (task, version): the stored chain hash (if any), and an event or not."""

    chain_hash: bytes | None
    has_event: bool


def leaves_subject(start: int, end: int) -> str:
    """``leaf N`` or ``leaves A..B`` (both ends included)."""
    return f"leaf {start}" if start == end else f"leaves {start}..{end}"


def checkpoint_faults(checkpoints: Iterable[StoredCheckpoint], keys: Sequence[VerifierKey]) -> list[LogFault]:
    """Every checkpoint whose note does not open with ``keys``, is of another origin, or signs another row."""
    faults: list[LogFault] = []
    for stored in checkpoints:
        subject = f"checkpoint {stored.size}"
        try:
            text, verified = open_note(stored.note, keys)
            signed = parse_checkpoint(text)
        except (NoteError, CheckpointError) as error:
            faults.append(LogFault(subject, "bad-signature", f"its note does not verify: {error}"))
            continue
        if not any(key.name == signed.origin for key in verified):
            names = ", ".join(key.name for key in verified)
            faults.append(
                LogFault(subject, "wrong-origin", f"signed by {names}, but its origin is {signed.origin!r}")
            )
        if (signed.size, signed.root_hash) != (stored.size, stored.root_hash):
            faults.append(
                LogFault(
                    subject,
                    "row-mismatch",
                    f"its note signs size {signed.size} and another root than its row holds",
                )
            )
    return faults


def consistency_faults(
    checkpoints: Sequence[StoredCheckpoint], proof: Callable[[int, int], Sequence[bytes]]
) -> list[LogFault]:
    """Each consecutive pair of ``checkpoints`` (smallest first) whose consistency proof fails.

    ``proof(size1, size2)`` reads the proof from the stored subtrees (``KeyError``: one is gone).
    """
    faults: list[LogFault] = []
    for first, second in itertools.pairwise(checkpoints):
        subject = f"checkpoints {first.size} and {second.size}"
        try:
            verify_consistency(
                first.size, second.size, first.root_hash, second.root_hash, proof(first.size, second.size)
            )
        except KeyError:
            faults.append(LogFault(subject, "inconsistent", "a subtree of the consistency proof is gone"))
        except ProofError as error:
            faults.append(
                LogFault(subject, "inconsistent", f"{error}: a subtree or a checkpoint was altered")
            )
    return faults


@dataclass
class LeafPass:
    """One pass over the leaves in index order: the leaves against the log, the subtrees, the roots.

    Feed :meth:`page` each page of leaves, then call :meth:`finish` with the tasks among
    :meth:`missing_tasks` that still have rows in the log.
    """

    checkpoints: Sequence[StoredCheckpoint]
    purged: Mapping[UUID, PurgedTask]
    named: Container[tuple[UUID, int]] = ()
    """(task, version) pairs the chain check named: not named again."""
    leaves: int = 0
    purged_leaves: int = 0
    tree: MerkleTree = field(default_factory=MerkleTree)
    _next: int = 0
    _gap: int | None = None
    """The first missing leaf index: no root or subtree is recomputed past it."""
    _checked: int = 0
    _missing: dict[UUID, list[Leaf]] = field(default_factory=dict)
    _bad: set[Node] = field(default_factory=set)

    def page(
        self,
        leaves: Sequence[Leaf],
        in_log: Mapping[tuple[UUID, int], InLog],
        stored_nodes: Callable[[Sequence[Node]], Mapping[Node, bytes]],
    ) -> list[LogFault]:
        """The faults of a page of leaves (in index order, following the last page's)."""
        faults: list[LogFault] = []
        roots: list[LogFault] = []
        completed: list[tuple[Node, bytes]] = []
        for leaf in leaves:
            self.leaves += 1
            if leaf.index != self._next:
                faults.append(
                    LogFault(
                        leaves_subject(self._next, leaf.index - 1),
                        "leaves-missing",
                        "gone from the tree: deleted behind longhaul's back",
                    )
                )
                if self._gap is None:
                    self._gap = self._next
            self._next = leaf.index + 1
            faults += self._leaf(leaf, in_log.get((leaf.task_id, leaf.version)))
            if self._gap is None:
                completed += self.tree.append(leaf.leaf_hash)
                roots += self._roots()
        stored = stored_nodes([node for node, _ in completed])
        for node, node_hash in completed:
            found = stored.get(node)
            if found == node_hash:
                continue
            children = (Node(node.level - 1, 2 * node.position), Node(node.level - 1, 2 * node.position + 1))
            if node.level and any(child in self._bad for child in children):
                self._bad.add(node)  # follows from the subtree below, named already
                continue
            self._bad.add(node)
            start = node.position << node.level
            subject = leaves_subject(start, start + (1 << node.level) - 1)
            what = "is gone" if found is None else "is not the one its leaves give: it or a leaf was altered"
            faults.append(LogFault(subject, "subtree-mismatch", f"the stored hash of this subtree {what}"))
        return faults + roots

    def _leaf(self, leaf: Leaf, at: InLog | None) -> list[LogFault]:
        key = (leaf.task_id, leaf.version)
        if at is None or (at.chain_hash is None and not at.has_event):
            purged = self.purged.get(leaf.task_id)
            if purged is not None and leaf.version <= purged.last_version:
                self.purged_leaves += 1
            else:
                self._missing.setdefault(leaf.task_id, []).append(leaf)
            return []
        if at.chain_hash == leaf.chain_hash or key in self.named:
            return []
        holds = "no chain hash" if at.chain_hash is None else "another chain hash"
        return [
            LogFault(
                f"task {leaf.task_id} version {leaf.version}",
                "leaf-mismatch",
                f"leaf {leaf.index} of the signed tree holds its chain hash, the log {holds}:"
                " the log or the leaf was altered",
            )
        ]

    def _roots(self) -> list[LogFault]:
        faults = []
        while (
            self._checked < len(self.checkpoints) and self.checkpoints[self._checked].size <= self.tree.size
        ):
            checkpoint = self.checkpoints[self._checked]
            if checkpoint.size == self.tree.size and self.tree.root() != checkpoint.root_hash:
                faults.append(
                    LogFault(
                        f"checkpoint {checkpoint.size}",
                        "root-mismatch",
                        f"the first {checkpoint.size} leaves give another root than the signed one",
                    )
                )
            self._checked += 1
        return faults

    def missing_tasks(self) -> list[UUID]:
        """The tasks with leaves whose events are not in the log (and were not purged)."""
        return sorted(self._missing)

    def finish(self, present: Container[UUID]) -> list[LogFault]:
        """The faults found at the end: missing leaves' events, tasks deleted, roots left unchecked.

        ``present``: the tasks among :meth:`missing_tasks` with any event or chain hash in the log.
        """
        faults: list[LogFault] = []
        for task_id in self.missing_tasks():
            leaves = self._missing[task_id]
            if task_id not in present and task_id not in self.purged:
                versions = sorted(leaf.version for leaf in leaves)
                span = (
                    f"versions {versions[0]}..{versions[-1]} are"
                    if len(versions) > 1
                    else f"version {versions[0]} is"
                )
                faults.append(
                    LogFault(f"task {task_id}", "deleted", f"{span} in the signed tree, none in the log")
                )
                continue
            faults += [
                LogFault(
                    f"task {task_id} version {leaf.version}",
                    "not-in-log",
                    f"leaf {leaf.index} of the signed tree, but neither its event nor its hash is in the log",
                )
                for leaf in leaves
                if (task_id, leaf.version) not in self.named
            ]
        signed = max((c.size for c in self.checkpoints), default=0)
        if self._next < signed:
            faults.append(
                LogFault(
                    leaves_subject(self._next, signed - 1),
                    "leaves-missing",
                    "gone from the tree: deleted behind longhaul's back",
                )
            )
        gone = self._gap if self._gap is not None else self._next
        for checkpoint in self.checkpoints[self._checked :]:
            faults.append(
                LogFault(
                    f"checkpoint {checkpoint.size}",
                    "root-mismatch",
                    f"its root cannot be recomputed: leaves from index {gone} are gone",
                )
            )
        return faults


def receipt_faults(
    task_id: UUID, receipt: Receipt | None, last: ChainRow | None, keys: Sequence[VerifierKey]
) -> list[LogFault]:
    """The faults of an archived task's receipt: none, one that does not verify, or not of its last event.

    ``last`` is the task's last archived version as the archive holds it (version, chain hash).
    """
    if receipt is None:
        return [LogFault(f"task {task_id}", "no-receipt", "the archive holds no receipt of it")]
    subject = f"task {task_id} version {receipt.version}"
    verdict = verify_receipt(receipt, [str(key) for key in keys])
    if not verdict.valid:
        return [LogFault(subject, "bad-receipt", verdict.reason)]
    if receipt.task_id != task_id:
        return [LogFault(subject, "receipt-mismatch", f"its receipt is of task {receipt.task_id}")]
    if last is None or receipt.version != last.version:
        archived = "no version" if last is None else f"version {last.version}"
        return [
            LogFault(
                subject,
                "receipt-mismatch",
                f"the receipt is of this version, the archive's last is {archived}",
            )
        ]
    if receipt.chain_hash != last.chain:
        return [
            LogFault(
                subject,
                "receipt-mismatch",
                "the signed tree holds another chain hash for it than the archive: the archive was altered",
            )
        ]
    return []
