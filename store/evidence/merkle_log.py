"""The sequencer's Merkle log in PostgreSQL: leaves in commit order, their subtrees, signed checkpoints.

One leaf per event, in the log's order (notification ids follow commit order): leaf ``i`` is
``event_leaf(task_id, version, chain hash)`` of the i-th event the sequencer took from the log
(``store/evidence/merkle.py``; the chain hash is the one the append wrote, ``store/evidence/chain.py``). The
perfect subtrees the append-only tree completes are kept, so every proof reads its O(log n)
nodes with one query (:meth:`MerkleLog.subtree_hashes`). Leaves, nodes and the sequencer's log
position are written in one transaction (:meth:`MerkleLog.append`): a sequencer stopped anywhere
resumes at a consistent tree. Checkpoints are C2SP signed notes of the tree's size and root
(:meth:`MerkleLog.sign`), one row per size. Tasks purged after archiving are recorded
(:data:`PURGED_TABLE`) so that ``verify`` tells a purge from a deletion.

The tables come from migration ``0008_merkle_log``; the format is in ``docs/audit.md``.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any
from uuid import UUID

from eventsourcing.postgres import PostgresDatastore
from psycopg.sql import SQL, Identifier

from store.evidence.chain import task_uuid
from store.evidence.checkpoints import Checkpoint
from store.evidence.merkle import MerkleTree, Node, consistency_proof, event_leaf, hash_leaf, inclusion_proof
from store.evidence.receipts import Receipt
from store.evidence.signed_notes import SignerKey, sign_note
from store.log.binary_arrays import byteas, int2s, int8s, uuids
from store.log.reads import read_statement

LEAVES_TABLE = "longhaul_merkle_leaves"
NODES_TABLE = "longhaul_merkle_nodes"
CHECKPOINTS_TABLE = "longhaul_checkpoints"
PURGED_TABLE = "longhaul_purged_tasks"
POSITION_TABLE = "longhaul_sequencer_position"
PAGE = 5_000
"""Leaves read per query when the whole log is read (``verify``)."""


@dataclass(frozen=True)
class Leaf:
    """One leaf of the tree: the event of ``task_id`` at ``version``, at log position ``position``."""

    index: int
    position: int
    task_id: UUID
    version: int
    chain_hash: bytes

    @property
    def leaf_hash(self) -> bytes:
        """The RFC 9162 leaf hash of the event's 56-byte leaf data."""
        return hash_leaf(event_leaf(self.task_id, self.version, self.chain_hash))


@dataclass(frozen=True)
class StoredCheckpoint:
    """A signed checkpoint as stored: the tree size and root it signs, the note text, when."""

    size: int
    root_hash: bytes
    note: str
    signed_at: datetime


@dataclass(frozen=True)
class PurgedTask:
    """A task purged after its archive file verified: its last version and the file's name."""

    task_id: UUID
    last_version: int
    archive_file: str
    purged_at: datetime


@dataclass(frozen=True)
class Unchained:
    """An event the sequencer passed over: not appended by longhaul, so not a leaf of the tree."""

    position: int
    task_id: UUID
    version: int
    reason: str = "it has no chain hash"
    """Why: it has no chain hash, or its task and version are a leaf already (deleted and re-inserted)."""


class MerkleLog:
    """The Merkle log's tables in one schema.

    Also the :class:`store.evidence.merkle.SubtreeHashes` of its proofs.
    """

    def __init__(self, datastore: PostgresDatastore, *, chain_table: str) -> None:
        self._datastore = datastore
        self._schema = Identifier(datastore.schema)
        self._chain = Identifier(chain_table)
        self._rendered: dict[str, str] = {}
        """Each statement's text on these tables, rendered once (psycopg renders a ``Composed``
        again on every execute); the statements are this module's constants."""

    def _sql(self, statement: str) -> str:
        rendered = self._rendered.get(statement)
        if rendered is None:
            rendered = self._rendered[statement] = (
                SQL(statement)
                .format(
                    schema=self._schema,
                    leaves=Identifier(LEAVES_TABLE),
                    nodes=Identifier(NODES_TABLE),
                    checkpoints=Identifier(CHECKPOINTS_TABLE),
                    purged=Identifier(PURGED_TABLE),
                    position=Identifier(POSITION_TABLE),
                    chain=self._chain,
                )
                .as_string()
            )
        return rendered

    def _rows(self, statement: str, params: Sequence[Any] = ()) -> list[Any]:
        return read_statement(self._datastore, self._sql(statement), params)

    # ------------------------------------------------------------------ the sequencer's writes

    def position(self) -> int:
        """The last log position sequenced (0 before the first)."""
        rows = self._rows("SELECT log_position FROM {schema}.{position} WHERE id = 1")
        return int(rows[0]["log_position"]) if rows else 0

    def size(self) -> int:
        """How many leaves the tree has."""
        rows = self._rows("SELECT coalesce(max(leaf_index) + 1, 0) AS n FROM {schema}.{leaves}")
        return int(rows[0]["n"])

    def tree(self) -> MerkleTree:
        """The stored tree, its right edge read from the stored subtrees."""
        return MerkleTree.resume(self.size(), self)

    def append(
        self, tree: MerkleTree, events: Sequence[tuple[int, UUID, int]]
    ) -> tuple[MerkleTree, list[Unchained]]:
        """Append the leaves of ``events`` (log position, task id, version; in log order) to ``tree``.

        Reads the events' chain hashes, then writes the leaves, the completed subtrees and the new
        position in one transaction, which fails if another sequencer moved the position since
        ``tree`` was read (its leaf indexes are taken). Returns the tree after the append (``tree``
        itself is left as it was) and the events passed over for having no chain hash.

        Raises:
            ValueError: ``events`` do not follow the stored position in increasing order.
        """
        if not events:
            return tree, []
        positions = [position for position, _, _ in events]
        if positions != sorted(set(positions)):
            raise ValueError("events are appended in increasing log order")
        grown = MerkleTree(tree.size, [node_hash for _, node_hash in tree.edge])
        leaves: list[Leaf] = []
        passed: list[Unchained] = []
        with self._datastore.transaction(commit=True) as curs:
            curs.execute(self._sql("SELECT log_position FROM {schema}.{position} WHERE id = 1 FOR UPDATE"))
            found = curs.fetchall()
            stored = int(found[0]["log_position"]) if found else 0
            if positions[0] <= stored:
                raise ValueError(f"the log is sequenced up to {stored}, not below {positions[0]}")
            keys = (uuids([t for _, t, _ in events]), int8s([v for _, _, v in events]))
            curs.execute(
                self._sql(
                    "SELECT c.task_id, c.version, c.hash FROM unnest(%b::uuid[], %b::bigint[]) k(t, v)"
                    " JOIN {schema}.{chain} c ON c.task_id = k.t AND c.version = k.v"
                ),
                keys,
            )
            hashes = {(row["task_id"], row["version"]): bytes(row["hash"]) for row in curs.fetchall()}
            curs.execute(
                self._sql(
                    "SELECT l.task_id, l.version, l.leaf_index FROM unnest(%b::uuid[], %b::bigint[]) k(t, v)"
                    " JOIN {schema}.{leaves} l ON l.task_id = k.t AND l.version = k.v"
                ),
                keys,  # the same events' keys, encoded once
            )
            leafed = {(row["task_id"], row["version"]): row["leaf_index"] for row in curs.fetchall()}
            nodes: list[tuple[Node, bytes]] = []
            for position, task_id, version in events:
                key = (task_uuid(task_id), version)
                chain_hash = hashes.get(key)
                if chain_hash is None:
                    passed.append(Unchained(position, key[0], version))
                    continue
                if key in leafed:
                    reason = f"its task and version are leaf {leafed[key]} already (deleted and re-inserted)"
                    passed.append(Unchained(position, key[0], version, reason))
                    continue
                leaf = Leaf(grown.size, position, task_uuid(task_id), version, chain_hash)
                leaves.append(leaf)
                nodes += grown.append(leaf.leaf_hash)
            if leaves:
                curs.execute(
                    self._sql(
                        "INSERT INTO {schema}.{leaves}"
                        " (leaf_index, log_position, task_id, version, chain_hash) SELECT * FROM"
                        " unnest(%b::bigint[], %b::bigint[], %b::uuid[], %b::bigint[], %b::bytea[])"
                    ),
                    (
                        int8s([leaf.index for leaf in leaves]),
                        int8s([leaf.position for leaf in leaves]),
                        uuids([leaf.task_id for leaf in leaves]),
                        int8s([leaf.version for leaf in leaves]),
                        byteas([leaf.chain_hash for leaf in leaves]),
                    ),
                )
                curs.execute(
                    self._sql(
                        "INSERT INTO {schema}.{nodes} (level, position, hash)"
                        " SELECT * FROM unnest(%b::smallint[], %b::bigint[], %b::bytea[])"
                    ),
                    (
                        int2s([n.level for n, _ in nodes]),
                        int8s([n.position for n, _ in nodes]),
                        byteas([h for _, h in nodes]),
                    ),
                )
            curs.execute(
                self._sql(
                    "INSERT INTO {schema}.{position} (id, log_position) VALUES (1, %s)"
                    " ON CONFLICT (id) DO UPDATE SET log_position = excluded.log_position"
                ),
                (positions[-1],),
            )
        return grown, passed

    def sign(self, tree: MerkleTree, signer: SignerKey, now: datetime) -> StoredCheckpoint | None:
        """Sign and store a checkpoint of ``tree`` (stored leaves only) if it grew since the latest one."""
        latest = self.latest_checkpoint()
        if tree.size == 0 or (latest is not None and latest.size >= tree.size):
            return None
        root = tree.root()
        note = sign_note(Checkpoint(signer.name, tree.size, root).body(), signer)
        with self._datastore.transaction(commit=True) as curs:
            curs.execute(
                self._sql(
                    "INSERT INTO {schema}.{checkpoints} (tree_size, root_hash, note, signed_at)"
                    " VALUES (%s, %s, %s, %s)"
                ),
                (tree.size, root, note, now),
            )
        return StoredCheckpoint(tree.size, root, note, now)

    # ------------------------------------------------------------------ reads

    def subtree_hashes(self, nodes: Sequence[Node]) -> list[bytes]:
        """The stored hashes of ``nodes``, in their order, with one query; ``KeyError`` for one not stored."""
        if not nodes:
            return []
        rows = self._rows(
            "SELECT n.level, n.position, n.hash FROM unnest(%b::smallint[], %b::bigint[]) k(l, p)"
            " JOIN {schema}.{nodes} n ON n.level = k.l AND n.position = k.p",
            (int2s([node.level for node in nodes]), int8s([node.position for node in nodes])),
        )
        found = {Node(row["level"], row["position"]): bytes(row["hash"]) for row in rows}
        return [found[node] for node in nodes]

    def checkpoints(self, after: int = 0) -> list[StoredCheckpoint]:
        """Every stored checkpoint of a tree larger than ``after`` leaves, smallest tree first."""
        rows = self._rows(
            "SELECT tree_size, root_hash, note, signed_at FROM {schema}.{checkpoints}"
            " WHERE tree_size > %s ORDER BY tree_size",
            (after,),
        )
        return [_checkpoint(row) for row in rows]

    def latest_checkpoint(self) -> StoredCheckpoint | None:
        """The checkpoint of the largest tree, if any was signed."""
        rows = self._rows(
            "SELECT tree_size, root_hash, note, signed_at FROM {schema}.{checkpoints}"
            " ORDER BY tree_size DESC LIMIT 1"
        )
        return _checkpoint(rows[0]) if rows else None

    def leaves(self, start: int = 0, page: int = PAGE) -> Iterator[Leaf]:
        """Every leaf from index ``start``, in order, a page per query."""
        while True:
            rows = self._rows(
                "SELECT * FROM {schema}.{leaves} WHERE leaf_index >= %s ORDER BY leaf_index LIMIT %s",
                (start, page),
            )
            yield from (_leaf(row) for row in rows)
            if len(rows) < page:
                return
            start = rows[-1]["leaf_index"] + 1

    def leaves_of(self, task_id: UUID) -> list[Leaf]:
        """The leaves of one task's events, by version."""
        rows = self._rows("SELECT * FROM {schema}.{leaves} WHERE task_id = %s ORDER BY version", (task_id,))
        return [_leaf(row) for row in rows]

    def inclusion_proof(self, index: int, size: int) -> list[bytes]:
        """The RFC 9162 inclusion proof of leaf ``index`` in the tree of ``size`` leaves."""
        return inclusion_proof(index, size, self)

    def consistency_proof(self, size1: int, size2: int) -> list[bytes]:
        """The RFC 9162 consistency proof between the trees of ``size1`` and ``size2`` leaves."""
        return consistency_proof(size1, size2, self)

    def receipt(self, task_id: UUID) -> Receipt | None:
        """The latest checkpoint and the inclusion proof of the task's last event it covers.

        ``None`` when no checkpoint covers any event of the task yet (or the task has none).
        """
        latest = self.latest_checkpoint()
        if latest is None:
            return None
        rows = self._rows(
            "SELECT * FROM {schema}.{leaves} WHERE task_id = %s AND leaf_index < %s"
            " ORDER BY version DESC LIMIT 1",
            (task_id, latest.size),
        )
        if not rows:
            return None
        leaf = _leaf(rows[0])
        return Receipt(
            checkpoint=latest.note,
            task_id=leaf.task_id,
            version=leaf.version,
            chain_hash=leaf.chain_hash,
            leaf_index=leaf.index,
            inclusion_proof=tuple(self.inclusion_proof(leaf.index, latest.size)),
        )

    def purged_tasks(self) -> dict[UUID, PurgedTask]:
        """Every task purged after archiving, by id."""
        rows = self._rows("SELECT * FROM {schema}.{purged}")
        return {
            row["task_id"]: PurgedTask(
                row["task_id"], row["last_version"], row["archive_file"], row["purged_at"]
            )
            for row in rows
        }


def _leaf(row: Any) -> Leaf:
    return Leaf(
        row["leaf_index"], row["log_position"], row["task_id"], row["version"], bytes(row["chain_hash"])
    )


def _checkpoint(row: Any) -> StoredCheckpoint:
    return StoredCheckpoint(row["tree_size"], bytes(row["root_hash"]), row["note"], row["signed_at"])


def catch_up(
    log: MerkleLog, select: Any, signer: SignerKey, now: datetime, *, batch: int = 500
) -> StoredCheckpoint | None:
    """Sequence every event after the stored position, then sign a checkpoint if the tree grew.

    ``select`` is the recorder's ``select_notifications``. For one-shot use (tests, tools): the
    running sequencer (``workers/sequencer.py``) follows the log instead of polling it.
    """
    tree = log.tree()
    while True:
        found = select(log.position(), batch, inclusive_of_start=False)
        if not found:
            break
        tree, _ = log.append(tree, [(n.id, task_uuid(n.originator_id), n.originator_version) for n in found])
    return log.sign(tree, signer, now)
