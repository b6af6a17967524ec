"""Which stored files are still held, and deleting those nothing holds: the purge and erase of files.

A file in the file store (``store.files``, content-addressed by SHA-256, one copy however many
tasks refer to it) is **held** while

- a task in the store refers to it, and its tenant was not erased: the file index
  (``longhaul_file_index``, kept by the projector, ``projections.file_index``) has one row per
  task with the hashes its events name, and a GIN index answers "does any task refer to this
  file" in one lookup. A row counts only while its task is in the run queue: a row the projector
  wrote for a task purged meanwhile (it read the events before the purge) holds nothing;
- a client uploaded it less than ``UPLOAD_HOLD`` ago (``longhaul_uploads``): the message that
  will refer to it may be on its way;
- an archive names it by reference only (``longhaul_archived_files``,
  ``longhaul archive --files-by-reference``): the archive counts on the store to keep it.

Letting go records the file as a deletion candidate (``longhaul_file_deletions``): the purge of a
task (``store.evidence.archive``) removes its index row and records its files **in the purge's
transaction**, so a run killed after the purge loses no candidate; ``longhaul erase`` removes the
index rows of the tenant's tasks and records their files; ``expire_uploads`` lets go of old
uploads. ``sweep_files`` then looks at each candidate: one nothing holds is deleted from the file
store, one still held is dropped from the candidates (whatever holds it records it again when it
lets go). A file two tasks share stays until both are gone.

The index trails the log by the projector's lag: a task that has just committed a reference to a
file may not be in it yet. So ``sweep_files`` first waits until the index has applied the log as
far as it reached when the sweep began (a projector must run); if it does not within the wait,
nothing is deleted and the candidates stay for the next run. What is left is a race of an
instant: a step that stores bytes the store already holds (the write finds them there) and
commits its reference between the sweep's check and its delete; that file is then missing, and
``longhaul verify`` names it.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any
from uuid import UUID

from psycopg.sql import SQL, Composed, Identifier

from store.evidence.blocking_files import BlockingFiles
from store.evidence.file_checks import ReferencedFiles
from store.log.application import TaskApplication
from store.log.postgres import PostgresRunQueueRecorder
from store.log.reads import read_transaction

log = logging.getLogger(__name__)

FILE_INDEX_TABLE = "longhaul_file_index"
"""The file index's table (``projections.file_index``; its position in ``<name>_tracking``)."""
DELETIONS_TABLE = "longhaul_file_deletions"
ARCHIVED_FILES_TABLE = "longhaul_archived_files"
ERASED_TASKS_TABLE = "longhaul_erased_tasks"
UPLOADS_TABLE = "longhaul_uploads"
"""Which tenant uploaded which file (``store.files.uploads``, migration 0012)."""
UPLOAD_HOLD = timedelta(days=1)
"""How long an upload holds its file without a task that refers to it."""
INCOMING_AGE = timedelta(days=1)
"""A temporary object of an unfinished write (``incoming/``) older than this is removed."""
INDEX_WAIT_S = 30.0
"""How long a sweep waits for the file index to catch up with the log before it deletes anything."""
INDEX_STALL_S = 5.0
"""A sweep stops waiting for the file index once it has not moved for this long (no projector)."""
PAGE = 500

Statement = tuple[Composed, tuple[Any, ...]]
"""One SQL statement and its parameters, for a transaction of someone else's (the purge's)."""


@dataclass
class FileSweep:
    """What one ``sweep_files`` did."""

    deleted: int = 0
    """Files deleted from the file store: nothing held them."""
    held: int = 0
    """Candidates still held (by a task, a recent upload or an archive): they stay."""
    waiting: int = 0
    """Candidates not looked at: the file index had not caught up with the log (a projector runs?)."""
    uploads_expired: int = 0
    """Uploads older than ``UPLOAD_HOLD`` let go of (their files became candidates)."""
    incoming_removed: int = 0
    """Temporary objects of writes that never finished, removed."""


@dataclass(frozen=True)
class ErasedFiles:
    """What ``erase_tenant_files`` let go of."""

    tasks: int
    """The tenant's tasks recorded as erased."""
    files: int
    """The stored files their events refer to (the tenant's uploads besides), now deletion candidates."""


class FileRetention:
    """The tables that say which files are held, on the store's database."""

    def __init__(self, store: TaskApplication) -> None:
        recorder = store.recorder
        if not isinstance(recorder, PostgresRunQueueRecorder):
            raise TypeError("the file index and its tables are on PostgreSQL")
        self.store = store
        self.recorder = recorder
        self.datastore = recorder.datastore
        schema = self.datastore.schema
        self._index = Identifier(schema, FILE_INDEX_TABLE)
        self._tracking = Identifier(schema, FILE_INDEX_TABLE + "_tracking")
        self._deletions = Identifier(schema, DELETIONS_TABLE)
        self._archived = Identifier(schema, ARCHIVED_FILES_TABLE)
        self._erased = Identifier(schema, ERASED_TASKS_TABLE)
        self._uploads = Identifier(schema, UPLOADS_TABLE)
        self._run_queue = Identifier(schema, recorder.run_queue_table)

    # ------------------------------------------------------------------ letting go

    def purge_statements(
        self, files: Sequence[str], *, now: datetime, kept_by: str | None = None
    ) -> list[Statement]:
        """What the purge of a task referring to ``files`` writes in its transaction.

        The files become deletion candidates; or, with ``kept_by`` (an archive's file name, which
        names them by reference), they are recorded as kept for that archive.
        """
        if not files:
            return []
        if kept_by is not None:
            statement = SQL(
                "INSERT INTO {} (sha256, archive_file, archived_at) SELECT unnest(%s::text[]), %s, %s"
                " ON CONFLICT DO NOTHING"
            ).format(self._archived)
            return [(statement, (list(files), kept_by, now))]
        statement = SQL(
            "INSERT INTO {} (sha256, since) SELECT unnest(%s::text[]), %s ON CONFLICT DO NOTHING"
        ).format(self._deletions)
        return [(statement, (list(files), now))]

    def erase_tenant_files(self, tenant: str, *, now: datetime) -> ErasedFiles:
        """Record every task of ``tenant`` as erased and let go of their files and its uploads.

        The files are read from the tasks' events (the log, not the index: nothing waits for a
        projector). Then one transaction: the tasks go into ``longhaul_erased_tasks``, their
        index rows and the tenant's uploads are deleted, and the hashes of both become deletion
        candidates (``sweep_files`` deletes those no other tenant's task holds).
        """
        hashes: set[str] = set()
        after: UUID | None = None
        while page := self._tenant_tasks(tenant, after=after):
            found = ReferencedFiles()
            for task_id, rows in self.recorder.chain_rows(page).items():
                hashes.update(found.add(task_id, rows))
            after = page[-1]
        with self.datastore.transaction(commit=True) as curs:
            curs.execute(
                SQL(
                    "INSERT INTO {} (task_id, tenant, erased_at) SELECT task_id, tenant, %s FROM {}"
                    " WHERE tenant = %s ON CONFLICT (task_id) DO NOTHING"
                ).format(self._erased, self._run_queue),
                (now, tenant),
            )
            curs.execute(
                SQL("DELETE FROM {} i USING {} e WHERE i.task_id = e.task_id AND e.tenant = %s").format(
                    self._index, self._erased
                ),
                (tenant,),
            )
            curs.execute(
                SQL(
                    "WITH uploads AS (DELETE FROM {} WHERE tenant = %s RETURNING sha256),"
                    " hashes AS (SELECT sha256 FROM uploads UNION SELECT unnest(%s::text[]))"
                    " INSERT INTO {} (sha256, since) SELECT sha256, %s FROM hashes"
                    " ON CONFLICT (sha256) DO NOTHING"
                ).format(self._uploads, self._deletions),
                (tenant, sorted(hashes), now),
            )
            curs.execute(
                SQL("SELECT count(*) AS n FROM {} WHERE tenant = %s").format(self._erased), (tenant,)
            )
            counted = curs.fetchone()
        return ErasedFiles(tasks=int(counted["n"]) if counted else 0, files=len(hashes))

    def _tenant_tasks(self, tenant: str, *, after: UUID | None) -> list[UUID]:
        with read_transaction(self.datastore) as curs:
            curs.execute(
                SQL(
                    "SELECT task_id FROM {} WHERE tenant = %s AND (%s::uuid IS NULL OR task_id > %s::uuid)"
                    " ORDER BY task_id LIMIT %s"
                ).format(self._run_queue),
                (tenant, after, after, PAGE),
            )
            return [row["task_id"] for row in curs.fetchall()]

    def expire_uploads(self, now: datetime) -> int:
        """Let go of the uploads older than ``UPLOAD_HOLD`` (their files become candidates); how many."""
        with self.datastore.transaction(commit=True) as curs:
            curs.execute(
                SQL(
                    "WITH old AS (DELETE FROM {} WHERE uploaded_at < %s RETURNING sha256)"
                    " INSERT INTO {} (sha256, since) SELECT DISTINCT sha256, %s FROM old"
                    " ON CONFLICT (sha256) DO NOTHING"
                ).format(self._uploads, self._deletions),
                (now - UPLOAD_HOLD, now),
            )
            return curs.rowcount

    # ------------------------------------------------------------------ what is held

    def index_position(self) -> int:
        """The log position the file index has applied (0: none yet)."""
        with read_transaction(self.datastore) as curs:
            curs.execute(
                SQL("SELECT max(notification_id) AS n FROM {} WHERE application_name = %s").format(
                    self._tracking
                ),
                (self.store.name,),
            )
            found = curs.fetchone()
        return int(found["n"]) if found and found["n"] is not None else 0

    def wait_for_index(self, timeout_s: float, *, stall_s: float = INDEX_STALL_S) -> bool:
        """Whether the file index reaches the log's position of now within ``timeout_s``.

        Gives up early when the index does not move for ``stall_s``: no projector runs.
        """
        target = self.recorder.max_notification_id() or 0
        start = time.monotonic()
        moved, position = start, self.index_position()
        while position < target:
            now = time.monotonic()
            if now - start >= timeout_s or now - moved >= stall_s:
                return False
            time.sleep(0.05)
            if (next_position := self.index_position()) != position:
                moved, position = time.monotonic(), next_position
        return True

    def sweep_page(
        self, *, after: str | None, now: datetime, delete: Callable[[list[str]], None]
    ) -> tuple[list[str], set[str]]:
        """Look at one page of deletion candidates after ``after``: ``delete`` those nothing holds.

        One transaction: the page's rows are locked (``FOR UPDATE``), the ones nothing holds
        deleted from the file store by ``delete`` while the lock is held, and the rows removed at
        the commit. A purge that lets go of one of them meanwhile waits, and records it again
        after the commit; a sweep killed midway leaves every row for the next.
        Returns the page (empty: no candidates left) and those of it still held.
        """
        with self.datastore.transaction(commit=True) as curs:
            curs.execute(
                SQL(
                    "SELECT sha256 FROM {} WHERE (%s::text IS NULL OR sha256 > %s)"
                    " ORDER BY sha256 LIMIT %s FOR UPDATE SKIP LOCKED"
                ).format(self._deletions),
                (after, after, PAGE),
            )
            page = [row["sha256"] for row in curs.fetchall()]
            if not page:
                return [], set()
            curs.execute(
                SQL(
                    "SELECT c.sha256 FROM unnest(%s::text[]) AS c(sha256)"
                    " WHERE EXISTS (SELECT FROM {} i WHERE i.files @> ARRAY[c.sha256]"
                    " AND EXISTS (SELECT FROM {} q WHERE q.task_id = i.task_id)"
                    " AND NOT EXISTS (SELECT FROM {} e WHERE e.task_id = i.task_id))"
                    " OR EXISTS (SELECT FROM {} u WHERE u.sha256 = c.sha256 AND u.uploaded_at >= %s)"
                    " OR EXISTS (SELECT FROM {} a WHERE a.sha256 = c.sha256)"
                ).format(self._index, self._run_queue, self._erased, self._uploads, self._archived),
                (page, now - UPLOAD_HOLD),
            )
            held = {row["sha256"] for row in curs.fetchall()}
            delete([sha256 for sha256 in page if sha256 not in held])
            curs.execute(SQL("DELETE FROM {} WHERE sha256 = ANY(%s)").format(self._deletions), (page,))
        return page, held

    def pending(self) -> int:
        """How many deletion candidates wait."""
        with read_transaction(self.datastore) as curs:
            curs.execute(SQL("SELECT count(*) AS n FROM {}").format(self._deletions))
            found = curs.fetchone()
        return int(found["n"]) if found else 0

    def erased(self, task_ids: Iterable[UUID] | None = None) -> set[UUID]:
        """Which of ``task_ids`` (``None``: every task) were erased with their tenant."""
        with read_transaction(self.datastore) as curs:
            if task_ids is None:
                curs.execute(SQL("SELECT task_id FROM {}").format(self._erased))
            else:
                curs.execute(
                    SQL("SELECT task_id FROM {} WHERE task_id = ANY(%s)").format(self._erased),
                    (list(task_ids),),
                )
            return {row["task_id"] for row in curs.fetchall()}


def sweep_files(
    store: TaskApplication, files: BlockingFiles, *, now: datetime, wait_s: float = INDEX_WAIT_S
) -> FileSweep:
    """Delete from the file store every deletion candidate nothing holds; see the module's doc.

    Also lets go of old uploads (``expire_uploads``) and removes the temporary objects of writes
    that never finished (``FileStore.remove_incoming``, older than ``INCOMING_AGE``).
    """
    retention = FileRetention(store)
    sweep = FileSweep()
    sweep.uploads_expired = retention.expire_uploads(now)
    sweep.incoming_removed = files.remove_incoming(now - INCOMING_AGE)
    if not retention.pending():
        return sweep
    if not retention.wait_for_index(wait_s):
        sweep.waiting = retention.pending()
        log.warning(
            "the file index trails the log (is a projector running?): %d files wait for the next run",
            sweep.waiting,
        )
        return sweep
    after: str | None = None

    def delete(hashes: list[str]) -> None:
        for sha256 in hashes:
            files.delete(sha256)
        sweep.deleted += len(hashes)

    while True:
        page, held = retention.sweep_page(after=after, now=now, delete=delete)
        if not page:
            break
        sweep.held += len(held)
        after = page[-1]
    if sweep.deleted or sweep.held:
        log.info("deleted %d files nothing held; %d still held", sweep.deleted, sweep.held)
    return sweep
