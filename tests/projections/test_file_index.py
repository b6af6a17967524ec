"""The file index: per task that refers to stored files, their hashes, following the log.

The projector runs in a thread on the real PostgreSQL (``tests.support.projector``); a rebuild
equals the live index, and a task's row goes with its purge (``tests/store/test_file_retention.py``).
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any, cast

import pytest

from domain.files import FileRef, file_part
from domain.task import Task
from projections.file_index import FileIndexRecorder, FileIndexRow, next_file_row, open_file_index
from store.log.application import TaskApplication
from store.log.config import StoreConfig
from tests.support.projector import projector_running
from tests.support.tasks import new_task

NOW = datetime(2026, 5, 1, 9, 0, tzinfo=UTC)
A, B, C = (FileRef(digit * 64, 10) for digit in "abc")


def _part(ref: FileRef) -> dict[str, Any]:
    return file_part(ref, media_type="text/plain", filename=f"{ref.sha256[0]}.txt")


def _with_files(store: TaskApplication, *batches: list[FileRef], tenant: str = "acme") -> Any:
    """A task whose first message names no file, then one artifact chunk per batch."""
    task = new_task(NOW, tenant=tenant)
    epoch = task.grant_lease(worker="w", now=NOW, until=NOW + timedelta(minutes=5))
    for n, batch in enumerate(batches):
        artifact = {"artifactId": "out", "parts": [_part(ref) for ref in batch] or [{"text": "no file"}]}
        task.append_artifact(epoch=epoch, now=NOW, artifact=artifact, append=n > 0)
    store.save_tasks(task)
    return task


@pytest.fixture
def index(postgres_store: TaskApplication) -> FileIndexRecorder:
    opened = open_file_index(postgres_store)
    assert opened is not None
    return opened


@pytest.fixture
def projector(store_config: StoreConfig, postgres_store: TaskApplication) -> Iterator[Any]:
    with projector_running(store_config) as runner:
        yield runner


def test_a_row_holds_each_hash_the_events_name_once_in_order() -> None:
    task = new_task(NOW)
    epoch = task.grant_lease(worker="w", now=NOW, until=NOW + timedelta(minutes=5))
    task.append_artifact(epoch=epoch, now=NOW, artifact={"artifactId": "x", "parts": [_part(B), _part(A)]})
    task.append_artifact(epoch=epoch, now=NOW, artifact={"artifactId": "x", "parts": [_part(A), _part(C)]})
    submitted, granted, first, second = (cast("Task.Event", event) for event in task.collect_events())

    assert next_file_row(None, submitted, 1) is None  # a text message names no file
    assert next_file_row(None, granted, 2) is None
    row = next_file_row(None, first, 3)
    assert row == FileIndexRow(task.id, [B.sha256, A.sha256], 3)
    assert next_file_row(row, second, 4) == FileIndexRow(task.id, [B.sha256, A.sha256, C.sha256], 4)
    assert next_file_row(FileIndexRow(task.id, [A.sha256, C.sha256], 3), second, 4) is None  # nothing new


def test_the_index_follows_the_log_and_a_rebuild_equals_it(
    postgres_store: TaskApplication, index: FileIndexRecorder, projector: Any
) -> None:
    one = _with_files(postgres_store, [A], [B, A])
    two = _with_files(postgres_store, [B, C], tenant="globex")
    _with_files(postgres_store, [])  # no file: no row

    projector.wait(postgres_store.recorder.max_notification_id(), 20)

    live = {row.task_id: row.files for row in index.rows()}
    assert live == {one.id: [A.sha256, B.sha256], two.id: [B.sha256, C.sha256]}
    assert index.files_of(one.id) == [A.sha256, B.sha256]
    rebuilt = index.rebuild(postgres_store)
    assert rebuilt.tasks == 2
    assert {row.task_id: row.files for row in index.rows()} == live
