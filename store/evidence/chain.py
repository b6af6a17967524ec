r"""The per-task hash chain of events, and the pure check of one task's stored chain.

For the event of task ``task_id`` at version ``v`` (``docs/audit.md``, "Chain")::

    chain_v = SHA-256("longhaul-chain-v1\n" || task_id (16 bytes) || v (8 bytes, big-endian)
                      || len(topic) (4 bytes BE) || topic (UTF-8)
                      || len(state) (4 bytes BE) || state (the stored bytes) || chain_{v-1})

with ``chain_0`` 32 zero bytes. The recorders write ``chain_v`` beside the event, in the append's
transaction (``store/log/postgres.py``, ``store/log/memory.py``). Hashing the stored bytes, not a decoded
event, keeps a chain checkable after an encrypted payload's key is gone.

``check_task`` takes one task's stored rows (the events and the stored hashes, joined by version)
and names every fault: a version missing altogether, an event whose hash is stored but which is
gone, an event with no stored hash, an event that does not match its hash, and an event that
matches the hash of another version (moved, swapped or renumbered). Each link is checked against
the *stored* hash before it, so one altered event is one fault, not a cascade to the end.
Standard library only: an auditor's verifier can be this module alone.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from enum import StrEnum
from uuid import UUID

TAG = b"longhaul-chain-v1\n"
GENESIS = bytes(32)
"""``chain_0``: the hash the first event of every task chains to."""
MOVED_SEARCH_LIMIT = 2_000
"""A task with more rows than this is not searched for moved events (only their mismatch is named)."""


def task_uuid(originator_id: UUID | str) -> UUID:
    """A stored event's originator id as a ``UUID`` (the library types it ``UUID | str``)."""
    return originator_id if isinstance(originator_id, UUID) else UUID(originator_id)


def chain_hash(task_id: UUID, version: int, topic: str, state: bytes, previous: bytes) -> bytes:
    """``chain_v`` of the event at ``version`` of ``task_id``, chained to ``previous`` (``chain_{v-1}``)."""
    topic_bytes = topic.encode()
    return hashlib.sha256(
        b"".join(
            (
                TAG,
                task_id.bytes,
                version.to_bytes(8, "big"),
                len(topic_bytes).to_bytes(4, "big"),
                topic_bytes,
                len(state).to_bytes(4, "big"),
                state,
                previous,
            )
        )
    ).digest()


class FaultKind(StrEnum):
    """What is wrong at one version of a task's chain."""

    MISSING_VERSION = "missing-version"
    """Neither an event nor a hash at a version below the task's last."""
    EVENT_DELETED = "event-deleted"
    """The hash of the version is stored, its event is not."""
    EXTRA_EVENT = "extra-event"
    """An event with no stored hash: not appended by longhaul (or before chains existed)."""
    HASH_MISMATCH = "hash-mismatch"
    """The event does not match its stored hash (its bytes or its type were changed, or replaced)."""
    OUT_OF_ORDER = "out-of-order"
    """The event matches the stored hash of another version: moved, swapped or renumbered."""
    DUPLICATE_VERSION = "duplicate-version"
    """Two rows at one version (only a file can hold that; the store's key forbids it)."""


@dataclass(frozen=True)
class ChainRow:
    """One version of a task as stored: the event (if any) and its stored hash (if any)."""

    version: int
    topic: str | None
    state: bytes | None
    chain: bytes | None

    @property
    def has_event(self) -> bool:
        """Whether an event is stored at this version."""
        return self.topic is not None and self.state is not None


@dataclass(frozen=True)
class ChainFault:
    """One fault in a task's chain: where, what kind, and a sentence that says it."""

    task_id: UUID
    version: int
    kind: FaultKind
    detail: str

    def __str__(self) -> str:
        return f"task {self.task_id} version {self.version}: {self.kind}: {self.detail}"


def check_task(task_id: UUID, rows: Sequence[ChainRow]) -> list[ChainFault]:
    """Every fault in the chain of ``task_id`` given its stored ``rows``, by version.

    An untouched task (versions 1..n, each an event with the hash ``chain_hash`` gives it) has
    none. Deleting a task's last events together with their hashes, or a whole task, leaves a
    chain that checks: only the Merkle tree over all events can tell (``docs/audit.md``).
    """
    faults: list[ChainFault] = []

    def fault(version: int, kind: FaultKind, detail: str) -> None:
        faults.append(ChainFault(task_id, version, kind, detail))

    by_version: dict[int, ChainRow] = {}
    for row in rows:
        if row.version in by_version:
            fault(row.version, FaultKind.DUPLICATE_VERSION, "more than one event at this version")
            continue
        by_version[row.version] = row
    if not by_version:
        return faults
    stored = {v: r.chain for v, r in by_version.items() if r.chain is not None}
    recomputed: dict[int, bytes] = {}
    mismatched: list[ChainRow] = []
    for version in range(1, max(by_version) + 1):
        at = by_version.get(version)
        if at is None:
            fault(version, FaultKind.MISSING_VERSION, "no event and no hash at this version")
            continue
        row = at
        if not row.has_event:
            fault(version, FaultKind.EVENT_DELETED, "its hash is stored but the event is gone")
            continue
        # Chained to the stored hash before it; to the recomputed one where no hash is stored.
        previous = GENESIS if version == 1 else stored.get(version - 1, recomputed.get(version - 1))
        if previous is None:
            continue  # the version before is missing altogether: named above, nothing to chain to
        expected = _link(task_id, row, version, previous)
        recomputed[version] = expected
        if expected != row.chain:
            mismatched.append(row)
    faults += _mismatches(task_id, mismatched, stored, search=len(by_version) <= MOVED_SEARCH_LIMIT)
    faults.sort(key=lambda f: f.version)
    return faults


def _mismatches(
    task_id: UUID, mismatched: list[ChainRow], stored: dict[int, bytes], *, search: bool
) -> list[ChainFault]:
    """Name each event that does not match its place: moved, a copy, unchained or altered."""
    faults = []
    damaged = {row.version for row in mismatched}
    for row in mismatched:
        origin = _origin(task_id, row, stored) if search else None
        if origin is not None and origin in damaged:  # its own place holds something else: moved
            kind, detail = FaultKind.OUT_OF_ORDER, f"holds the event of version {origin}"
        elif origin is not None and row.chain is None:
            kind, detail = FaultKind.EXTRA_EVENT, f"a copy of the event of version {origin}, with no hash"
        elif origin is not None:
            kind, detail = FaultKind.HASH_MISMATCH, f"replaced by a copy of the event of version {origin}"
        elif row.chain is None:
            kind, detail = FaultKind.EXTRA_EVENT, "an event with no hash: not appended by longhaul"
        else:
            kind, detail = FaultKind.HASH_MISMATCH, "the event does not match its hash: it was altered"
        faults.append(ChainFault(task_id, row.version, kind, detail))
    return faults


def _link(task_id: UUID, row: ChainRow, version: int, previous: bytes) -> bytes:
    """The hash ``row``'s event has at ``version``, chained to ``previous``."""
    assert row.topic is not None
    assert row.state is not None
    return chain_hash(task_id, version, row.topic, row.state, previous)


def _origin(task_id: UUID, row: ChainRow, stored: dict[int, bytes]) -> int | None:
    """The other version whose stored hash ``row``'s event matches, if any."""
    for version, chain in stored.items():
        previous = GENESIS if version == 1 else stored.get(version - 1)
        if version == row.version or previous is None:
            continue
        if _link(task_id, row, version, previous) == chain:
            return version
    return None


@dataclass
class ChainReport:
    """What ``verify_chains`` checked and found."""

    tasks: int = 0
    events: int = 0
    faults: int = 0
    faulty_tasks: int = 0


def verify_chains(
    histories: Iterable[tuple[UUID, Sequence[ChainRow]]],
    on_fault: Callable[[ChainFault], None],
    on_task: Callable[[ChainReport], None] | None = None,
) -> ChainReport:
    """Check every task's chain of ``histories``, calling ``on_fault`` for each fault as it is found.

    ``on_task`` sees the report after each task (a caller's progress); the report is returned.
    """
    report = ChainReport()
    for task_id, rows in histories:
        faults = check_task(task_id, rows)
        report.tasks += 1
        report.events += sum(1 for row in rows if row.has_event)
        report.faults += len(faults)
        report.faulty_tasks += bool(faults)
        for found in faults:
            on_fault(found)
        if on_task is not None:
            on_task(report)
    return report
