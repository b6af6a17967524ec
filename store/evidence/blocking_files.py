"""The file store's async calls, made from the synchronous commands (archive, verify, erase).

``BlockingFiles`` runs one event loop in a thread of its own for as long as it is open, and each
method waits there for one call of the ``FileStore`` (``store.files``): the commands stay
synchronous and read a file of any size in constant memory, a chunk at a time. The store is
opened at its first use (given as a function): a command that meets no stored file never opens
it (nor makes its directory).
"""

from __future__ import annotations

import asyncio
import hashlib
import threading
from collections.abc import Callable, Coroutine, Iterable, Iterator
from dataclasses import dataclass
from datetime import datetime
from types import TracebackType
from typing import Any, BinaryIO, TypeVar

from store.files import FileNotStoredError, FileStore

T = TypeVar("T")

REHASH_CONCURRENCY = 8
"""Files read at once by ``rehash_each`` (an object store serves several reads at a time)."""


@dataclass(frozen=True)
class Rehashed:
    """What the file store holds under one hash: the SHA-256 of its bytes and their count."""

    sha256: str
    """The hash the file was asked for."""
    found: bool
    """Whether the store holds a file under that hash."""
    digest: str | None = None
    """The SHA-256 of the bytes read (``None``: no file)."""
    size: int | None = None


class BlockingFiles:
    """A ``FileStore`` called from synchronous code: use it in a ``with`` block."""

    def __init__(self, files: FileStore | Callable[[], FileStore]) -> None:
        self._files = files if isinstance(files, FileStore) else None
        self._open = files if not isinstance(files, FileStore) else None
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="file-store", daemon=True)

    def __enter__(self) -> BlockingFiles:
        self._thread.start()
        return self

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, trace: TracebackType | None
    ) -> None:
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join()
        self._loop.close()

    @property
    def files(self) -> FileStore:
        """The file store (opened now, if this is its first use)."""
        if self._files is None:
            assert self._open is not None
            self._files = self._open()
        return self._files

    @property
    def url(self) -> str:
        """The file store's URL."""
        return self.files.url

    def run(self, call: Coroutine[Any, Any, T]) -> T:
        """Run ``call`` on the store's loop and wait for its result."""
        return asyncio.run_coroutine_threadsafe(call, self._loop).result()

    def size(self, sha256: str) -> int | None:
        """The stored file's size, or ``None`` when the store does not hold it."""
        return self.run(self.files.size(sha256))

    def delete(self, sha256: str) -> None:
        """Remove the file (nothing happens when it is not stored)."""
        self.run(self.files.delete(sha256))

    def remove_incoming(self, older_than: datetime) -> int:
        """Delete the temporary objects of uploads begun before ``older_than``; how many."""
        return self.run(self.files.remove_incoming(older_than))

    def copy(self, sha256: str, out: BinaryIO) -> Rehashed:
        """Write the file's bytes to ``out`` a chunk at a time; what was read (hash, size)."""
        return self.run(self._read(sha256, out))

    def rehash(self, sha256: str) -> Rehashed:
        """Read the whole file and hash it (constant memory)."""
        return self.run(self._read(sha256, None))

    def rehash_each(self, hashes: Iterable[str], batch: int = 64) -> Iterator[Rehashed]:
        """``rehash`` of every hash, ``REHASH_CONCURRENCY`` files at a time, in the order given."""
        pending: list[str] = []
        for sha256 in hashes:
            pending.append(sha256)
            if len(pending) >= batch:
                yield from self.run(self._rehash_all(pending))
                pending = []
        if pending:
            yield from self.run(self._rehash_all(pending))

    async def _rehash_all(self, hashes: list[str]) -> list[Rehashed]:
        limit = asyncio.Semaphore(REHASH_CONCURRENCY)

        async def one(sha256: str) -> Rehashed:
            async with limit:
                return await self._read(sha256, None)

        return list(await asyncio.gather(*(one(sha256) for sha256 in hashes)))

    async def _read(self, sha256: str, out: BinaryIO | None) -> Rehashed:
        digest = hashlib.sha256()
        size = 0
        try:
            async for chunk in self.files.read(sha256):
                digest.update(chunk)
                size += len(chunk)
                if out is not None:
                    out.write(chunk)
        except FileNotStoredError:
            return Rehashed(sha256, found=False)
        return Rehashed(sha256, found=True, digest=digest.hexdigest(), size=size)
