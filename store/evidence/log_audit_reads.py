"""The live store's audit against its signed checkpoints: the reads it needs, and the one pass.

:func:`audit_store` runs the checks of ``store/evidence/log_audit.py`` over a PostgreSQL store: the stored
checkpoints, then the leaves in index order a page at a time (each page's (task, version) looked
up in the events and chain tables, and its subtrees in the stored nodes, one query each), then
the events at or below the sequencer's position that no leaf holds, then the consistency of each
consecutive pair of checkpoints. Memory is a page of leaves, plus the leaves whose events are
missing (named at the end, a task at a time).
"""

from __future__ import annotations

from collections.abc import Callable, Container, Iterator, Sequence
from dataclasses import dataclass
from typing import Any
from uuid import UUID

from psycopg.sql import SQL, Identifier

from store.evidence.log_audit import InLog, LeafPass, LogFault, checkpoint_faults, consistency_faults
from store.evidence.merkle import Node
from store.evidence.merkle_log import LEAVES_TABLE, NODES_TABLE, PAGE, Leaf, MerkleLog
from store.evidence.signed_notes import VerifierKey
from store.log.postgres import PostgresRunQueueRecorder
from store.log.reads import read_transaction


class LogAuditReads:
    """The audit's reads of one store's events, chain hashes, leaves and subtrees."""

    def __init__(self, recorder: PostgresRunQueueRecorder) -> None:
        self._datastore = recorder.datastore
        self._events = Identifier(recorder.events_table_name)
        self._chain = Identifier(recorder.chain_table)

    def _rows(self, statement: str, params: Sequence[Any]) -> list[Any]:
        query = SQL(statement).format(
            schema=Identifier(self._datastore.schema),
            events=self._events,
            chain=self._chain,
            leaves=Identifier(LEAVES_TABLE),
            nodes=Identifier(NODES_TABLE),
        )
        with read_transaction(self._datastore) as curs:
            curs.execute(query, params)
            return curs.fetchall()

    def in_log(self, leaves: Sequence[Leaf]) -> dict[tuple[UUID, int], InLog]:
        """What the log holds at each leaf's (task, version): its chain hash, and whether an event."""
        rows = self._rows(
            "SELECT k.t, k.v, c.hash, e.originator_id IS NOT NULL AS has_event"
            " FROM unnest(%s::uuid[], %s::bigint[]) k(t, v)"
            " LEFT JOIN {schema}.{chain} c ON c.task_id = k.t AND c.version = k.v"
            " LEFT JOIN {schema}.{events} e ON e.originator_id = k.t AND e.originator_version = k.v",
            ([leaf.task_id for leaf in leaves], [leaf.version for leaf in leaves]),
        )
        return {
            (row["t"], row["v"]): InLog(None if row["hash"] is None else bytes(row["hash"]), row["has_event"])
            for row in rows
        }

    def stored_nodes(self, nodes: Sequence[Node]) -> dict[Node, bytes]:
        """The stored hashes of those of ``nodes`` that are stored."""
        if not nodes:
            return {}
        rows = self._rows(
            "SELECT n.level, n.position, n.hash FROM unnest(%s::smallint[], %s::bigint[]) k(l, p)"
            " JOIN {schema}.{nodes} n ON n.level = k.l AND n.position = k.p",
            ([node.level for node in nodes], [node.position for node in nodes]),
        )
        return {Node(row["level"], row["position"]): bytes(row["hash"]) for row in rows}

    def present(self, task_ids: Sequence[UUID]) -> set[UUID]:
        """Those of ``task_ids`` with any event or chain hash in the log."""
        if not task_ids:
            return set()
        rows = self._rows(
            "SELECT t FROM unnest(%s::uuid[]) k(t) WHERE"
            " EXISTS (SELECT 1 FROM {schema}.{events} e WHERE e.originator_id = k.t)"
            " OR EXISTS (SELECT 1 FROM {schema}.{chain} c WHERE c.task_id = k.t)",
            (list(task_ids),),
        )
        return {row["t"] for row in rows}

    def unleafed(self, position: int, page: int = PAGE) -> Iterator[tuple[int, UUID, int]]:
        """Events at or below log ``position`` whose (task, version) no leaf holds, in log order."""
        after = -(2**63)
        while True:
            rows = self._rows(
                "SELECT e.notification_id, e.originator_id, e.originator_version FROM {schema}.{events} e"
                " WHERE e.notification_id > %s AND e.notification_id <= %s AND NOT EXISTS"
                " (SELECT 1 FROM {schema}.{leaves} l"
                " WHERE l.task_id = e.originator_id AND l.version = e.originator_version)"
                " ORDER BY e.notification_id LIMIT %s",
                (after, position, page),
            )
            for row in rows:
                yield row["notification_id"], row["originator_id"], row["originator_version"]
            if len(rows) < page:
                return
            after = rows[-1]["notification_id"]

    def unsequenced(self, position: int) -> int:
        """How many events are above log ``position``: not yet sequenced."""
        rows = self._rows(
            "SELECT count(*) AS n FROM {schema}.{events} WHERE notification_id > %s", (position,)
        )
        return int(rows[0]["n"])


@dataclass
class LogReport:
    """What :func:`audit_store` checked and found."""

    leaves: int = 0
    checkpoints: int = 0
    purged: int = 0
    unsequenced: int = 0
    faults: int = 0


def audit_store(
    log: MerkleLog,
    reads: LogAuditReads,
    keys: Sequence[VerifierKey],
    *,
    named: Container[tuple[UUID, int]],
    on_fault: Callable[[LogFault], None],
    on_page: Callable[[LogReport], None] | None = None,
    page: int = PAGE,
) -> LogReport:
    """Check the store's Merkle log against its signed checkpoints, calling ``on_fault`` per fault.

    ``named``: the (task, version) pairs the chain check already named (not named again);
    ``on_page`` sees the report after each page of leaves (a caller's progress).
    """
    checkpoints = log.checkpoints()
    purged = log.purged_tasks()
    report = LogReport(checkpoints=len(checkpoints), purged=len(purged))

    def fault(found: LogFault) -> None:
        report.faults += 1
        on_fault(found)

    for found in checkpoint_faults(checkpoints, keys):
        fault(found)
    audit = LeafPass(checkpoints, purged, named)
    batch: list[Leaf] = []
    for leaf in log.leaves(0, page):
        batch.append(leaf)
        if len(batch) == page:
            _page(audit, batch, reads, fault, report, on_page)
            batch = []
    if batch:
        _page(audit, batch, reads, fault, report, on_page)
    for found in audit.finish(reads.present(audit.missing_tasks())):
        fault(found)
    position = log.position()
    for at, task_id, version in reads.unleafed(position, page) if position else ():
        if (task_id, version) not in named:
            fault(
                LogFault(
                    f"task {task_id} version {version}",
                    "not-in-tree",
                    f"at log position {at}, at or below the sequencer's {position}, but in no leaf:"
                    " inserted behind longhaul's back",
                )
            )
    report.unsequenced = reads.unsequenced(position)
    for found in consistency_faults(checkpoints, log.consistency_proof):
        fault(found)
    return report


def _page(
    audit: LeafPass,
    batch: Sequence[Leaf],
    reads: LogAuditReads,
    fault: Callable[[LogFault], None],
    report: LogReport,
    on_page: Callable[[LogReport], None] | None,
) -> None:
    for found in audit.page(batch, reads.in_log(batch), reads.stored_nodes):
        fault(found)
    report.leaves = audit.leaves
    if on_page is not None:
        on_page(report)
