"""The in-memory recorder: the library's POPO recorder plus the run queue, in this process only.

For tests and single-process runs without PostgreSQL. Nothing outlives the process, and no other
process sees it. It keeps the PostgreSQL recorder's contract (``RunQueue``, checked by
``tests/store/test_recorder_contract.py``): appends are version-checked, the run-queue rows are
written under the same lock as the events and only when the append succeeds, and a row is only
replaced by a row of a newer version; each event's chain hash (``store/evidence/chain.py``) is kept beside
it, computed as the PostgreSQL recorder computes it. Queries scan the rows (there are no indexes): fine for
tests and demos, not for a million paused tasks.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import Callable, Sequence
from datetime import datetime
from typing import Any
from uuid import UUID

from eventsourcing.persistence import AggregateRecorder, ApplicationRecorder, StoredEvent
from eventsourcing.popo import POPOAggregateRecorder, POPOApplicationRecorder, POPOFactory

from domain.states import INTERRUPTED, RUNNABLE, TERMINAL
from store.evidence.chain import GENESIS, ChainRow, chain_hash, task_uuid
from store.log.run_queue import EachAppended, RunQueueRow, StoredHistory
from store.secrets.task_keys import KeyChanges, MemoryTaskKeys


class MemoryRunQueueRecorder(POPOApplicationRecorder):
    """The POPO application recorder that also keeps the run queue, under its database lock."""

    def __init__(self) -> None:
        super().__init__()
        self._rows: dict[UUID, RunQueueRow] = {}
        self._chains: dict[UUID, dict[int, bytes]] = {}
        self._append_callbacks: set[Callable[[], None]] = set()
        self._callbacks_lock = threading.Lock()
        self.task_keys = MemoryTaskKeys(self._database_lock)
        """The tasks' secret keys (``store.secrets.task_keys``), changed with the appends that need it."""
        self.snapshots: POPOAggregateRecorder | None = None
        """The snapshot recorder of the same application (set by ``MemoryFactory``)."""

    def _update_table(self, stored_events: Sequence[StoredEvent], **kwargs: Any) -> Sequence[int] | None:
        # Called under the database lock, after the version check passed: the rows are written
        # exactly when the events are.
        rows: Sequence[RunQueueRow] = kwargs.get("run_queue", ())
        keys = KeyChanges.of(kwargs)
        self.task_keys.check(keys)
        notification_ids = super()._update_table(stored_events, **kwargs)
        for event in sorted(stored_events, key=lambda e: (str(e.originator_id), e.originator_version)):
            task_id, version = task_uuid(event.originator_id), event.originator_version
            chain = self._chains.setdefault(task_id, {})
            previous = GENESIS if version == 1 else chain[version - 1]
            chain[version] = chain_hash(task_id, version, event.topic, event.state, previous)
        self.task_keys.write(keys)
        for row in rows:
            current = self._rows.get(row.task_id)
            if current is None or current.version < row.version:
                self._rows[row.task_id] = row
        return notification_ids

    def insert_events_each(self, stored_events: Sequence[StoredEvent], **kwargs: Any) -> EachAppended:
        """Append a group, leaving out the tasks that lost a race (see ``RunQueue.insert_events_each``)."""
        rows: Sequence[RunQueueRow] = kwargs.get("run_queue", ())
        keys = KeyChanges.of(kwargs)
        with self._database_lock:
            lost = frozenset(
                {
                    task_uuid(e.originator_id)
                    for e in stored_events
                    if e.originator_version in self._stored_events_index[str(e.originator_id)]
                }
                | {key.task_id for key in keys.new if self.task_keys.get(key.task_id) is not None}
            )
            kept = [e for e in stored_events if task_uuid(e.originator_id) not in lost]
            ids = self._insert_events(
                kept,
                run_queue=[r for r in rows if r.task_id not in lost],
                task_keys=[k for k in keys.new if k.task_id not in lost],
                task_keys_destroyed=[t for t in keys.destroyed if t not in lost],
            )
        if kept:
            self._notify_listeners()
        return EachAppended(ids=list(ids or ()), lost=lost)

    def _notify_listeners(self) -> None:
        super()._notify_listeners()
        with self._callbacks_lock:
            callbacks = list(self._append_callbacks)
        for callback in callbacks:
            callback()

    # ------------------------------------------------------------------ queries

    def _select(self, keep: Callable[[RunQueueRow], bool]) -> list[RunQueueRow]:
        with self._database_lock:
            return [row for row in self._rows.values() if keep(row)]

    def claimable(self, now: datetime, limit: int, skills: Sequence[tuple[str, int]]) -> list[UUID]:
        """Tasks a worker may claim at ``now`` (see ``RunQueue.claimable``)."""
        wanted = set(skills)
        rows = self._select(
            lambda r: (
                r.state in RUNNABLE
                and (r.lease_until is None or r.lease_until <= now)
                and (r.skill, r.skill_version) in wanted
            )
        )
        rows.sort(key=lambda r: (r.lease_until is not None, r.lease_until or r.updated_at, r.updated_at))
        return [r.task_id for r in rows[:limit]]

    def next_lease_end(self, skills: Sequence[tuple[str, int]]) -> datetime | None:
        """The earliest lease end among runnable tasks of ``skills`` (when a claim may be next)."""
        wanted = set(skills)
        rows = self._select(lambda r: r.state in RUNNABLE and (r.skill, r.skill_version) in wanted)
        return min((r.lease_until for r in rows if r.lease_until is not None), default=None)

    def due_pauses(self, now: datetime, limit: int) -> list[UUID]:
        """Paused tasks whose deadline passed at ``now``."""
        rows = self._select(lambda r: r.state in INTERRUPTED and r.deadline is not None and r.deadline <= now)
        rows.sort(key=lambda r: r.deadline or now)
        return [r.task_id for r in rows[:limit]]

    def due_expiries(
        self, ended_before: datetime, limit: int, *, after: tuple[datetime, UUID] | None = None
    ) -> list[UUID]:
        """Terminal, not yet expired tasks that ended at or before ``ended_before``."""
        rows = self._select(
            lambda r: (
                r.state in TERMINAL
                and not r.expired
                and r.updated_at <= ended_before
                and (after is None or (r.updated_at, r.task_id) > after)
            )
        )
        rows.sort(key=lambda r: (r.updated_at, r.task_id))
        return [r.task_id for r in rows[:limit]]

    def live_versions(self) -> list[tuple[str, int, int]]:
        """``(skill, version, live task count)`` for every version non-terminal tasks use."""
        counts: dict[tuple[str, int], int] = {}
        for row in self._select(lambda r: r.state not in TERMINAL):
            key = (row.skill, row.skill_version)
            counts[key] = counts.get(key, 0) + 1
        return [(skill, version, n) for (skill, version), n in sorted(counts.items())]

    def live_tasks_of(self, skill: str, version: int, limit: int = 20) -> list[UUID]:
        """Some non-terminal tasks pinned to ``skill`` at ``version``."""
        rows = self._select(
            lambda r: r.skill == skill and r.skill_version == version and r.state not in TERMINAL
        )
        rows.sort(key=lambda r: r.updated_at)
        return [r.task_id for r in rows[:limit]]

    def state_counts(self) -> dict[str, int]:
        """``state -> task count`` of the tasks not expired."""
        counts: dict[str, int] = {}
        for row in self._select(lambda r: not r.expired):
            counts[row.state] = counts.get(row.state, 0) + 1
        return counts

    def row(self, task_id: UUID) -> RunQueueRow | None:
        """The stored row of one task."""
        with self._database_lock:
            return self._rows.get(task_id)

    def owners(self, task_ids: Sequence[UUID]) -> dict[UUID, tuple[str, str | None]]:
        """``task_id -> (state, lease owner)`` for ``task_ids``."""
        with self._database_lock:
            rows = [self._rows[i] for i in task_ids if i in self._rows]
        return {r.task_id: (r.state, r.lease_owner) for r in rows}

    def tenants(self, task_ids: Sequence[UUID]) -> dict[UUID, str]:
        """``task_id -> tenant`` for ``task_ids``."""
        with self._database_lock:
            rows = [self._rows[i] for i in task_ids if i in self._rows]
        return {r.task_id: r.tenant for r in rows}

    def select_histories(self, task_ids: Sequence[UUID]) -> dict[UUID, StoredHistory]:
        """The latest snapshot and the events after it, for each of ``task_ids`` that exists."""
        histories: dict[UUID, StoredHistory] = {}
        for task_id in dict.fromkeys(task_ids):
            latest = self.snapshots.select_events(task_id, desc=True, limit=1) if self.snapshots else []
            snapshot = latest[0] if latest else None
            events = list(self.select_events(task_id, gt=snapshot.originator_version if snapshot else None))
            if snapshot is not None or events:
                histories[task_id] = StoredHistory(snapshot=snapshot, events=events)
        return histories

    def chain_rows(self, task_ids: Sequence[UUID]) -> dict[UUID, list[ChainRow]]:
        """Each task's events with their chain hashes, in version order (as the PostgreSQL recorder)."""
        found: dict[UUID, list[ChainRow]] = {}
        with self._database_lock:
            for task_id in task_ids:
                chain = self._chains.get(task_id, {})
                rows = [
                    ChainRow(e.originator_version, e.topic, e.state, chain.get(e.originator_version))
                    for e in self.select_events(task_id)
                ]
                if rows:
                    found[task_id] = rows
        return found

    # ------------------------------------------------------------------ wake-ups

    async def follow_appends(self, event: asyncio.Event) -> None:
        """Set ``event`` (in this event loop) after every append, from whichever thread appends."""
        loop = asyncio.get_running_loop()

        def appended() -> None:
            with contextlib.suppress(RuntimeError):  # the loop closed
                loop.call_soon_threadsafe(event.set)

        with self._callbacks_lock:
            self._append_callbacks.add(appended)
        try:
            event.set()
            await asyncio.Event().wait()  # until cancelled
        finally:
            with self._callbacks_lock:
                self._append_callbacks.discard(appended)


class MemoryFactory(POPOFactory):
    """The POPO factory, making a ``MemoryRunQueueRecorder`` that can read its own snapshots."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._application_recorder: MemoryRunQueueRecorder | None = None

    def application_recorder(self) -> ApplicationRecorder:
        """The application recorder, with the run queue."""
        self._application_recorder = MemoryRunQueueRecorder()
        return self._application_recorder

    def aggregate_recorder(self, purpose: str = "events") -> AggregateRecorder:
        """A plain POPO recorder; the snapshots' one is also handed to the application recorder."""
        recorder = POPOAggregateRecorder()
        if purpose == "snapshots" and self._application_recorder is not None:
            self._application_recorder.snapshots = recorder
        return recorder
