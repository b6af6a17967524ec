"""Where a client fetches a stored file: the URL every answer, stream frame and webhook gives it.

The log keeps a stored file's part in its own form (``domain.files``: ``longhaul-file:sha256:…``);
a client never sees that form. ``FileLinks.public`` is the one function every answer goes
through on its way out (the gateway's answers and streams, the dispatcher's webhooks): each
stored file's part gets a URL in place of the log's,

- the gateway's, ``{public_url}/a2a/files/{task id}/{sha256}``, served with the same API keys and
  tenant walls as every method (``api.files``); or
- on a store that signs (S3), a pre-signed GET URL that expires soon (``sign``).

An answer without a stored file is returned as it is (one walk of its parts, no copy).

A client uploads a file to ``POST /a2a/files`` and gets ``{public_url}/a2a/files/uploads/{sha256}``
to put in a message's file part (``uploaded`` recognises it).
"""

from __future__ import annotations

import json
import re
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar
from uuid import UUID

from domain.files import SCHEME, FileRef, files_in, refers_to_stored, with_urls

FILES_PATH = "/a2a/files"
"""Where the gateway serves files (``api.files``)."""

UPLOADS = "uploads"
"""The path segment of uploaded files: ``/a2a/files/uploads/{sha256}``."""

_SHA256 = re.compile(r"[0-9a-f]{64}")

Sign = Callable[[str], Awaitable[str | None]]
"""A pre-signed URL for the file with this hash, or ``None`` (the store cannot sign)."""

T = TypeVar("T")


class NotAnUploadError(ValueError):
    """A URL under this gateway's uploads that names no file (no SHA-256 after ``uploads/``)."""


class FileLinks:
    """The URLs of stored files for clients, under the gateway's ``public_url``.

    ``sign`` (``store.files.FileStore.signed_url`` with its expiry) makes pre-signed URLs where
    the file store can; without it, or where it gives ``None``, the gateway's URL is given.
    """

    def __init__(self, public_url: str, sign: Sign | None = None) -> None:
        self.base = public_url.rstrip("/") + FILES_PATH
        self._sign = sign
        self._uploads = self.base + "/" + UPLOADS + "/"

    def download_url(self, task_id: UUID | str, sha256: str) -> str:
        """The gateway's URL of a file the task refers to."""
        return f"{self.base}/{task_id}/{sha256}"

    def upload_url(self, sha256: str) -> str:
        """The gateway's URL of an uploaded file, which a client puts in a message's file part."""
        return self._uploads + sha256

    def uploaded(self, url: str) -> str | None:
        """The hash of the upload ``url`` names, or ``None`` when ``url`` is not under this gateway's uploads.

        Raises:
            NotAnUploadError: ``url`` is under the uploads but names no SHA-256.
        """
        if not url.startswith(self._uploads):
            return None
        sha256 = url.removeprefix(self._uploads)
        if not _SHA256.fullmatch(sha256):
            expected = f"{self._uploads}<sha256 in lower-case hex>"
            raise NotAnUploadError(f"{url!r} names no upload: expected {expected}")
        return sha256

    async def public(self, value: T, task_id: UUID | str) -> T:
        """``value`` (a task, message, artifact, frame or answer of the task ``task_id``) as a client sees it.

        Every stored file's part carries the URL a client fetches it at; ``value`` itself when it
        holds none.
        """
        if not refers_to_stored(value):
            return value  # the common case, in a few microseconds
        found = files_in(value)
        if not found:
            return value
        urls = {ref.sha256: await self._url(task_id, ref) for ref in found}
        located: T = with_urls(value, lambda ref: urls[ref.sha256])
        return located

    async def public_text(self, text: str, task_id: UUID | str) -> str:
        """A JSON document's text (a webhook's body) as ``public`` gives it; ``text`` itself if no file."""
        if SCHEME not in text:
            return text
        document: Any = json.loads(text)
        located = await self.public(document, task_id)
        if located is document:
            return text
        return json.dumps(located, separators=(",", ":"), ensure_ascii=False)

    async def _url(self, task_id: UUID | str, ref: FileRef) -> str:
        if self._sign is not None:
            signed = await self._sign(ref.sha256)
            if signed is not None:
                return signed
        return self.download_url(task_id, ref.sha256)
