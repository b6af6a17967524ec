"""The file index: per task that refers to stored files, the hashes of those files.

``FileIndexRecorder`` is a ``FoldedView`` (``projections.folded_view``) kept by the projector
beside the current-task view and the retention index: each event applied exactly once, the rows
and the index's position in one transaction. A task gets a row with the first event that names a
stored file (``domain.files.files_in``: a message's or an artifact's file part in the log's form,
wherever it is in the event), and each later one adds the hashes it names; tasks that never refer
to a stored file have no row.

What it answers is ``store.evidence.file_retention``'s question, "does any task still refer to
this file?": one lookup of a GIN index over the hashes (``store/log/migrations/0013_file_references.sql``).
A task's row goes with the task when it is purged (``longhaul archive``) and when its tenant is
erased (``longhaul erase``). The index trails the log by the projector's lag, so whoever deletes
a file first waits until the index has caught up (``file_retention.wait_for_index``).
"""

from __future__ import annotations

from dataclasses import dataclass
from uuid import UUID

from typing_extensions import override

from domain.files import files_in
from domain.task import Task
from projections.folded_view import FoldedView
from store.evidence import FILE_INDEX_TABLE
from store.log import PostgresRunQueueRecorder, StoreConfig, TaskApplication


@dataclass(frozen=True)
class FileIndexRow:
    """One task's stored files: their hashes, in the order the task first named them."""

    task_id: UUID
    files: list[str]
    position: int
    """The log position of the event that last changed the row."""


def named_files(event: Task.Event) -> list[str]:
    """The hashes of the stored files ``event`` names (each once), wherever its parts are."""
    return [ref.sha256 for ref in files_in(vars(event))]


def next_file_row(row: FileIndexRow | None, event: Task.Event, position: int) -> FileIndexRow | None:
    """The row after ``event``, or ``None`` if it names no file the row does not hold yet."""
    named = named_files(event)
    held = row.files if row is not None else []
    new = [sha256 for sha256 in named if sha256 not in held]
    if not new:
        return None
    return FileIndexRow(event.originator_id, [*held, *new], position)


class FileIndexRecorder(FoldedView[FileIndexRow]):
    """The index's table and position (``<schema>.longhaul_file_index``, ``..._tracking``)."""

    view_table = FILE_INDEX_TABLE
    row_type = FileIndexRow
    columns = ("task_id", "files", "position")

    @override
    def next_row(self, row: FileIndexRow | None, event: Task.Event, position: int) -> FileIndexRow | None:
        """See ``next_file_row``."""
        return next_file_row(row, event, position)

    @override
    def reads_row(self, event: Task.Event) -> bool:
        """Only an event that names a stored file reads the row (any other changes nothing)."""
        return bool(named_files(event))

    def files_of(self, task_id: UUID) -> list[str]:
        """The hashes of the files the task refers to, as the index holds them (none: no row)."""
        row = self.row(task_id)
        return row.files if row is not None else []


def open_file_index(app: TaskApplication) -> FileIndexRecorder | None:
    """The index over ``app``'s database and pool; ``None`` for a memory store."""
    if not isinstance(app.config, StoreConfig):
        return None
    recorder = app.recorder
    assert isinstance(recorder, PostgresRunQueueRecorder)
    return FileIndexRecorder(recorder.datastore)
