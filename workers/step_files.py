"""Files a step writes and reads: kept in the file store by reference, in constant memory.

``StepFiles.keep`` streams a step's bytes (an async iterator of chunks, a path, or ``bytes``)
into the file store and returns the part that names them in the log's form
(``domain.files.file_part``: hash, size, media type, file name). A file of at most
``inline_max_bytes`` stays inline instead (a ``raw`` part: the bytes in the event). The caller
commits the part (``DurableStepContext.emit_file``): until then no task refers to the bytes, so
a worker killed mid-file leaves no reference, and a re-run stores the same bytes at the same
address, once.

``StepFiles.open`` gives the bytes of a part a client sent: a stored file (an upload), inline
``raw`` bytes, or an outside ``http(s)`` URL fetched through the webhooks' SSRF guard (the
connection goes only to public addresses unless ``allow_private``).
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import os
from collections.abc import AsyncIterator
from pathlib import Path

import aiohttp

from domain.files import FileRef, UnreadableFileError, file_part, stored_file
from domain.skill import JSON, FileContent
from store.deliveries import check_push_url
from store.files import FileStore
from store.log import PushUrlRefusedError
from workers.webhook_resolver import PublicOnlyResolver, refused_by_resolver

CHUNK_BYTES = 1 << 20
"""How much of a file is read at once (a path, an outside URL)."""


class StepFiles:
    """The worker's file store, and how large a file may be to stay inline in its event."""

    def __init__(
        self, store: FileStore, *, inline_max_bytes: int = 16384, allow_private: bool = False
    ) -> None:
        self.store = store
        self.inline_max_bytes = inline_max_bytes
        self.allow_private = allow_private

    async def keep(self, content: FileContent, *, media_type: str, filename: str | None) -> JSON:
        """Store ``content`` (or keep it inline when small) and return its part, in the log's form."""
        chunks = aiter(_chunks(content))
        head = bytearray()
        async for chunk in chunks:
            head += chunk
            if len(head) > self.inline_max_bytes:
                break
        else:
            part: JSON = {"raw": base64.b64encode(head).decode("ascii"), "mediaType": media_type}
            if filename is not None:
                part["filename"] = filename
            return part

        async def everything() -> AsyncIterator[bytes]:
            yield bytes(head)
            async for chunk in chunks:
                yield chunk

        stored = await self.store.put(everything())
        return file_part(FileRef(stored.sha256, stored.size), media_type=media_type, filename=filename)

    async def open(self, part: JSON) -> AsyncIterator[bytes]:
        """The bytes of ``part``, streamed.

        Raises:
            UnreadableFileError: The part holds no file, or an outside URL the SSRF guard
                refuses (not http(s), or an address that is not public).
            store.files.FileNotStoredError: A stored file is missing from the store.
            aiohttp.ClientError: Fetching an outside URL failed (a step's error: retried).
        """
        ref = stored_file(part)
        if ref is not None:
            async for chunk in self.store.read(ref.sha256):
                yield chunk
            return
        raw, url = part.get("raw"), part.get("url")
        if isinstance(raw, str):
            try:
                yield base64.b64decode(raw, validate=True)
            except binascii.Error as error:
                raise UnreadableFileError(f"the part's raw bytes are not base64: {error}") from None
            return
        if isinstance(url, str):
            async for chunk in self._fetch(url):
                yield chunk
            return
        raise UnreadableFileError("the part holds no file (no raw bytes and no url)")

    async def _fetch(self, url: str) -> AsyncIterator[bytes]:
        """An outside URL's body, through the SSRF guard (the resolver checks what it connects to)."""
        try:
            check_push_url(url, allow_private=self.allow_private, resolve=False)
        except PushUrlRefusedError as error:
            raise UnreadableFileError(str(error).replace("push URL", "file URL")) from None
        resolver = None if self.allow_private else PublicOnlyResolver()
        connector = aiohttp.TCPConnector(resolver=resolver)
        try:
            async with (
                aiohttp.ClientSession(connector=connector) as session,
                # No redirects: one to a literal private address would pass no resolver.
                session.get(url, raise_for_status=True, allow_redirects=False) as response,
            ):
                async for chunk in response.content.iter_chunked(CHUNK_BYTES):
                    yield chunk
        except aiohttp.ClientError as error:
            refused = refused_by_resolver(error)
            if refused is None:
                raise
            raise UnreadableFileError(f"file URL {url!r}: {refused}") from None


async def _chunks(content: FileContent) -> AsyncIterator[bytes]:
    """``content`` as chunks: an async iterator's own, a path's read a MiB at a time, or ``bytes``."""
    if isinstance(content, bytes | bytearray | memoryview):
        yield bytes(content)
    elif isinstance(content, os.PathLike):
        file = await asyncio.to_thread(Path(content).open, "rb")  # in a thread: the loop never waits
        try:
            while chunk := await asyncio.to_thread(file.read, CHUNK_BYTES):
                yield chunk
        finally:
            file.close()
    else:
        async for chunk in content:
            yield bytes(chunk)
