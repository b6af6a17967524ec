"""Tasks that refer to stored files, for the tests of archive, purge, erase and verify.

``put`` stores bytes in a file store (a directory on the test's ``tmp_path``) and returns their
reference; ``task_with_files`` commits a task whose artifact names them (the log's form of a
stored file's part, ``domain.files.file_part``), as a worker's ``emit_file`` commits it.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import AsyncIterator, Sequence
from datetime import datetime, timedelta
from pathlib import Path
from urllib.parse import urlparse

from domain.files import FileRef, file_part
from domain.task import Task
from store.files import FileStore, address
from store.log.application import TaskApplication
from tests.support.tasks import new_task

MiB = 1 << 20


def put(files: FileStore, data: bytes, chunk: int = MiB) -> FileRef:
    """Store ``data`` (in chunks of ``chunk`` bytes); its reference."""

    async def chunks() -> AsyncIterator[bytes]:
        for start in range(0, len(data), chunk):
            yield data[start : start + chunk]

    stored = asyncio.run(files.put(chunks()))
    return FileRef(stored.sha256, stored.size)


def path_of(files: FileStore, sha256: str) -> Path:
    """Where a directory file store keeps the file (to change or delete it behind its back)."""
    return Path(urlparse(files.url).path) / address(sha256)


def change_one_byte(files: FileStore, sha256: str, at: int = 0) -> None:
    """Flip the bits of one byte of the stored file, in place."""
    path = path_of(files, sha256)
    with path.open("r+b") as file:
        file.seek(at)
        byte = file.read(1)
        file.seek(at)
        file.write(bytes([byte[0] ^ 0xFF]))
        file.flush()
        os.fsync(file.fileno())


def task_with_files(
    store: TaskApplication,
    refs: Sequence[FileRef],
    *,
    now: datetime,
    tenant: str = "acme",
    names: Sequence[str] | None = None,
    end: bool = True,
) -> Task:
    """A task whose one artifact has a file part per ref; ended (canceled) unless ``end`` is false."""
    task = new_task(now, tenant=tenant)
    epoch = task.grant_lease(worker="w-1", now=now, until=now + timedelta(minutes=5))
    parts = [
        file_part(
            ref, media_type="application/octet-stream", filename=(names[n] if names else f"file-{n}.bin")
        )
        for n, ref in enumerate(refs)
    ]
    task.append_artifact(epoch=epoch, now=now, artifact={"artifactId": "files", "parts": parts})
    if end:
        task.cancel(now=now, reason="test")
    store.save_tasks(task)
    return task
