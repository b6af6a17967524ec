"""Files kept by reference: content-addressed by SHA-256 in an object store.

One ``obstore`` store serves every backend: a directory (``file:///...``, what ``longhaul up``
uses) or any S3-compatible bucket (``s3://bucket/prefix``, credentials and endpoint the usual AWS
way: ``AWS_ACCESS_KEY_ID``, ``AWS_SECRET_ACCESS_KEY``, ``AWS_REGION``, ``AWS_ENDPOINT_URL``).

A file is written in constant memory: its bytes stream to a temporary object under ``incoming/``
while their hash is computed, and only then move to their address ``sha256/<2 hex>/<64 hex>``. A
writer that dies mid-upload leaves no file at any address (at most a temporary object, which
``remove_incoming`` deletes once it is old); a file already stored is not stored again.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import os
import re
from collections.abc import AsyncIterable, AsyncIterator
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any, BinaryIO
from urllib.parse import urlsplit
from urllib.request import url2pathname
from uuid import uuid4

import obstore
from obstore.store import AzureStore, GCSStore, ObjectStore, S3Store, from_url

if TYPE_CHECKING:
    from obstore import GetOptions

SHA256 = re.compile(r"^[0-9a-f]{64}$")
READ_CHUNK = 1 << 20
"""Bytes read from, or written to, a directory store at once."""
INCOMING = "incoming"
STORED = "sha256"


class FileNotStoredError(LookupError):
    """No file with this hash is in the store."""


@dataclass(frozen=True)
class StoredFile:
    """A file in the store: the SHA-256 of its bytes (hex) and their count."""

    sha256: str
    size: int


def address(sha256: str) -> str:
    """Where a file with this hash is kept: ``sha256/ab/ab12...``."""
    if not SHA256.match(sha256):
        raise ValueError(f"{sha256!r} is not a SHA-256 in lower-case hex")
    return f"{STORED}/{sha256[:2]}/{sha256}"


class FileStore:
    """Content-addressed files in one object store (``from_url``)."""

    def __init__(self, store: ObjectStore, url: str, directory: Path | None = None) -> None:
        self.store = store
        self.url = url
        self.directory = directory
        """The directory of a ``file://`` store, which ``read`` reads straight from (see there)."""

    @classmethod
    def from_url(cls, url: str, **config: Any) -> FileStore:
        """The store at ``url``: ``file:///abs/dir`` (created if missing) or ``s3://bucket/prefix``."""
        directory = None
        if url.startswith("file://"):
            config = {"mkdir": True, **config}
            directory = Path(url2pathname(urlsplit(url).path))
        return cls(from_url(url, **config), url, directory)

    async def put(self, chunks: AsyncIterable[bytes]) -> StoredFile:
        """Store the bytes ``chunks`` yields, in constant memory; their hash is their address."""
        if self.directory is not None:
            return await _put_directory(self.directory, chunks)
        digest = hashlib.sha256()
        size = 0

        async def hashed() -> AsyncIterator[bytes]:
            nonlocal size
            async for chunk in chunks:
                digest.update(chunk)
                size += len(chunk)
                yield bytes(chunk)

        temporary = f"{INCOMING}/{uuid4().hex}"
        try:
            await obstore.put_async(self.store, temporary, hashed())
            stored = StoredFile(digest.hexdigest(), size)
            if await self.size(stored.sha256) is None:
                await obstore.rename_async(self.store, temporary, address(stored.sha256))
                return stored
        except BaseException:
            await self._forget(temporary)
            raise
        await self._forget(temporary)  # the same bytes were stored before: keep one copy
        return stored

    async def read(self, sha256: str, start: int = 0, end: int | None = None) -> AsyncIterator[bytes]:
        """The file's bytes from ``start`` up to ``end`` (exclusive; ``None``: its end), streamed.

        Raises:
            FileNotStoredError: No such file.
        """
        if self.directory is not None:
            async for chunk in _read_directory(self.directory / address(sha256), sha256, start, end):
                yield chunk
            return
        options: GetOptions | None = None
        if end is not None:
            options = {"range": (start, end)}
        elif start:
            options = {"range": {"offset": start}}
        try:
            result = await obstore.get_async(self.store, address(sha256), options=options)
        except FileNotFoundError as error:
            raise FileNotStoredError(sha256) from error
        async for chunk in result.stream():
            yield bytes(chunk)

    async def size(self, sha256: str) -> int | None:
        """The file's size, or ``None`` when it is not stored."""
        try:
            meta = await obstore.head_async(self.store, address(sha256))
        except FileNotFoundError:
            return None
        return int(meta["size"])

    async def signed_url(self, sha256: str, expires: timedelta) -> str | None:
        """A URL that reads the file without credentials until ``expires`` from now (a GET).

        ``None`` for a store that cannot sign (a directory): its files are served by the gateway.
        The URL is made from the store's credentials alone (no request): it does not say whether
        the file is stored.
        """
        if not isinstance(self.store, S3Store | GCSStore | AzureStore):
            return None
        return await obstore.sign_async(self.store, "GET", address(sha256), expires)

    @property
    def signs(self) -> bool:
        """Whether ``signed_url`` gives URLs (an object store in the cloud; not a directory)."""
        return isinstance(self.store, S3Store | GCSStore | AzureStore)

    async def delete(self, sha256: str) -> None:
        """Remove the file (nothing happens when it is not stored)."""
        await self._forget(address(sha256))

    async def hashes(self) -> AsyncIterator[str]:
        """The hash of every stored file, in no particular order."""
        async for batch in obstore.list(self.store, prefix=STORED):
            for meta in batch:
                name = str(meta["path"]).rsplit("/", 1)[-1]
                if SHA256.match(name):
                    yield name

    async def remove_incoming(self, older_than: datetime) -> int:
        """Delete the temporary objects of uploads that began before ``older_than``; returns how many."""
        old = []
        async for batch in obstore.list(self.store, prefix=INCOMING):
            old += [str(meta["path"]) for meta in batch if meta["last_modified"] < older_than]
        for path in old:
            await self._forget(path)
        return len(old)

    async def _forget(self, path: str) -> None:
        with contextlib.suppress(FileNotFoundError):
            await obstore.delete_async(self.store, path)


async def _read_directory(path: Path, sha256: str, start: int, end: int | None) -> AsyncIterator[bytes]:
    """``read`` from a directory: a MiB at a time, each read in a thread.

    obstore's local stream crosses into its runtime for every small chunk; plain reads run at the
    disk's (or the page cache's) speed, in the same constant memory (ADR 0062).
    """
    try:
        file = await asyncio.to_thread(path.open, "rb")
    except FileNotFoundError as error:
        raise FileNotStoredError(sha256) from error
    try:
        left = None if end is None else max(0, end - start)
        await asyncio.to_thread(file.seek, start)
        while left is None or left > 0:
            chunk = await asyncio.to_thread(file.read, READ_CHUNK if left is None else min(READ_CHUNK, left))
            if not chunk:
                return
            if left is not None:
                left -= len(chunk)
            yield chunk
    finally:
        file.close()


async def _put_directory(directory: Path, chunks: AsyncIterable[bytes]) -> StoredFile:
    """``put`` into a directory: a MiB at a time, hashed and written in a thread, then renamed.

    The same steps as on any store (a temporary file under ``incoming/``, renamed to its address
    once whole), with plain file writes instead of obstore's (slow from many small chunks, ADR
    0062). One MiB is written while the next arrives (never more: the memory stays constant, and
    a sender waits for the disk). The file and its directory are synced before the rename: a
    file a commit refers to survives a power cut.
    """
    temporary = directory / INCOMING / uuid4().hex
    await asyncio.to_thread(temporary.parent.mkdir, parents=True, exist_ok=True)
    digest, size, pending = hashlib.sha256(), 0, bytearray()
    file = await asyncio.to_thread(temporary.open, "wb")
    writing: asyncio.Future[None] | None = None

    async def write(block: bytes) -> None:
        nonlocal writing
        if writing is not None:
            await writing  # in order: the hash sees the bytes as the file does
        writing = asyncio.ensure_future(asyncio.to_thread(_write, file, digest, block))

    try:
        async for chunk in chunks:
            pending += chunk
            if len(pending) >= READ_CHUNK:
                size += len(pending)
                await write(bytes(pending))
                pending.clear()
        size += len(pending)
        await write(bytes(pending))
        assert writing is not None
        await writing
        await asyncio.to_thread(_synced, file)
        stored = StoredFile(digest.hexdigest(), size)
        await asyncio.to_thread(_moved, temporary, directory / address(stored.sha256))
    except BaseException:
        file.close()
        temporary.unlink(missing_ok=True)
        raise
    return stored


def _write(file: BinaryIO, digest: Any, block: bytes) -> None:
    digest.update(block)
    file.write(block)


def _synced(file: BinaryIO) -> None:
    file.flush()
    os.fsync(file.fileno())
    file.close()


def _moved(temporary: Path, target: Path) -> None:
    """Move the whole file to its address, or drop it when the same bytes are there already."""
    if target.exists():
        temporary.unlink()
        return
    target.parent.mkdir(parents=True, exist_ok=True)
    temporary.replace(target)
    folder = os.open(target.parent, os.O_RDONLY)
    try:
        os.fsync(folder)
    finally:
        os.close(folder)
