"""The stored files of an archive run: their bytes in a tar beside the archive, or named by reference.

``longhaul archive`` writes, beside ``longhaul-archive-<schema>-<time>.jsonl.gz``, a plain tar
``longhaul-archive-<schema>-<time>.files.tar`` whose members are ``files/<sha256>``: the bytes of
every stored file the archived events refer to, each once, streamed from the file store a chunk at
a time (constant memory, whatever the size), hashed as they go. With ``--files-by-reference`` there
is no tar: the archive names each file's hash and the file store that keeps it, and the purge
records the files as kept for that archive (``store.evidence.file_retention``).

``FileArchiver.admit`` looks at one task's files before its events are written: a file the store
lacks refuses the task (it stays in the store, named on stderr), unless the task was erased
(``longhaul erase``): then the archive says so (``kept: erased``). The archive's ``file`` lines
(one per file: hash, size, where it is kept) come before its trailer, so its checksum covers them;
the events' own parts name each hash, so the chains and receipts cover the bytes.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterable
from pathlib import Path
from typing import Any, BinaryIO
from uuid import UUID

from store.evidence.blocking_files import BlockingFiles
from store.evidence.chain import ChainRow
from store.evidence.file_checks import ArchivedFile, ReferencedFiles, end_tar, stream_member

ARCHIVE_SUFFIX = ".jsonl.gz"
FILES_SUFFIX = ".files.tar"


class FileArchiveError(Exception):
    """A file's bytes could not be written to the archive as the log names them."""


def files_tar(archive: Path) -> Path:
    """The companion tar of the archive file ``archive``."""
    return archive.with_name(archive.name.removesuffix(ARCHIVE_SUFFIX) + FILES_SUFFIX)


def file_line(file: ArchivedFile) -> dict[str, Any]:
    """The archive line of ``file``."""
    line: dict[str, Any] = {"type": "file", "sha256": file.sha256, "size": file.size, "kept": file.kept}
    if file.where is not None:
        line["in"] = file.where
    return line


def parsed_file_line(obj: dict[str, Any]) -> ArchivedFile:
    """The file of an archive's ``file`` line (``ValueError`` for a malformed one)."""
    sha256, size, kept, where = obj["sha256"], obj["size"], obj["kept"], obj.get("in")
    if not isinstance(sha256, str) or not isinstance(size, int) or kept not in ArchivedFile.KEPT:
        raise ValueError(f"a malformed file line: {obj!r}")
    if where is not None and not isinstance(where, str):
        raise ValueError(f"a malformed file line: {obj!r}")
    return ArchivedFile(sha256, size, kept, where)


class FileArchiver:
    """The files of one archive run: admitted per task, written to the tar (or named), then listed."""

    def __init__(
        self,
        archive: Path,
        files: BlockingFiles | None,
        *,
        by_reference: bool = False,
        erased: Iterable[UUID] = (),
    ) -> None:
        self.tar = files_tar(archive)
        self.partial = self.tar.with_name(self.tar.name + ".partial")
        self.files = files
        self.by_reference = by_reference
        self.erased = set(erased)
        self.lines: dict[str, ArchivedFile] = {}
        """Every file admitted, by hash, in the order first admitted."""
        self.task_files: dict[UUID, list[str]] = {}
        """The hashes of each admitted task's files."""
        self._sizes: dict[str, int | None] = {}
        self._out: BinaryIO | None = None

    def admit(self, task_id: UUID, rows: Iterable[ChainRow]) -> list[str]:
        """Admit one task's files (their bytes go to the tar now); the reasons to refuse it, if any.

        Raises:
            FileArchiveError: A file's bytes in the store are not what its hash says.
        """
        found = ReferencedFiles()
        hashes = found.add(task_id, rows)
        if not hashes:
            self.task_files[task_id] = []
            return []
        if self.files is None:
            return [f"task {task_id}: refers to {len(hashes)} stored files, and no file store was given"]
        erased = task_id in self.erased
        faults = []
        for sha256 in hashes:
            ref = found.files[sha256]
            size = self._size(sha256)
            if size is None and not erased and self._kept(sha256) != "erased":
                faults.append(f"task {task_id}: file sha256:{sha256} is missing from the file store")
            elif size is not None and size != ref.size:
                faults.append(
                    f"task {task_id}: file sha256:{sha256} holds {size} bytes in the file store,"
                    f" its part says {ref.size}"
                )
        if faults:
            return faults
        for sha256 in hashes:
            if sha256 not in self.lines:
                self.lines[sha256] = self._keep(sha256, found.files[sha256].size)
        self.task_files[task_id] = hashes
        return []

    def finish(self) -> None:
        """End the tar (if any file went into it), sync it and give it its name."""
        if self._out is None:
            return
        end_tar(self._out)
        self._out.flush()
        os.fsync(self._out.fileno())
        self._out.close()
        self._out = None
        self.partial.replace(self.tar)

    def abandon(self) -> None:
        """Close and remove a tar that will not be finished."""
        if self._out is not None:
            self._out.close()
            self._out = None
        with contextlib.suppress(FileNotFoundError):
            self.partial.unlink()

    def _kept(self, sha256: str) -> str | None:
        line = self.lines.get(sha256)
        return line.kept if line is not None else None

    def _size(self, sha256: str) -> int | None:
        if sha256 not in self._sizes:
            assert self.files is not None
            self._sizes[sha256] = self.files.size(sha256)
        return self._sizes[sha256]

    def _keep(self, sha256: str, size: int) -> ArchivedFile:
        files = self.files
        assert files is not None
        if self._size(sha256) is None:
            return ArchivedFile(sha256, size, "erased")
        if self.by_reference:
            return ArchivedFile(sha256, size, "store", files.url)
        if self._out is None:
            self._out = self.partial.open("wb")
        out = self._out
        written = stream_member(out, sha256, size, lambda to: files.copy(sha256, to))
        if not written.found or written.digest != sha256 or written.size != size:
            what = (
                "is gone" if not written.found else f"hash to sha256:{written.digest} ({written.size} bytes)"
            )
            raise FileArchiveError(
                f"file sha256:{sha256} ({size} bytes): its bytes in the file store {what}; nothing purged"
                " (run longhaul verify)"
            )
        return ArchivedFile(sha256, size, "archive", self.tar.name)
