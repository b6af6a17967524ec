"""File parts on their way out of the gateway and into it.

Out: every answer and stream frame of the A2A methods goes through ``FileParts.public``
(``store.public_form.FileLinks.public``, which the webhook dispatcher uses too): a stored file's
part carries the URL a client fetches it at, never the log's form (``domain.files``).

In: a client's message may refer to a file it uploaded (``POST /a2a/files``, ``api.files``) by the
upload's URL; ``FileParts.inbound`` turns such a part into the log's form before the message is
submitted, once it checked that the caller's tenant uploaded it. A part already in the log's form
is refused (only the gateway and the steps write it), as is an upload URL of another tenant or
of no upload. Any other URL passes as the client sent it (a step fetches it, through the SSRF
guard).
"""

from __future__ import annotations

import asyncio
from typing import Any, TypeVar
from uuid import UUID

from api.errors import InvalidParamsError
from domain.files import FileRef, file_part, refers_to_stored
from store.files import Upload, Uploads
from store.public_form import FileLinks, NotAnUploadError

JSON = dict[str, Any]
T = TypeVar("T")


class FileParts:
    """The gateway's file parts: ``links`` make the URLs, ``uploads`` say who uploaded what."""

    def __init__(self, links: FileLinks, uploads: Uploads | None = None) -> None:
        self.links = links
        self._uploads = uploads

    async def public(self, value: T, task_id: UUID | str) -> T:
        """``value`` (an answer or frame of the task ``task_id``) as a client sees it."""
        return await self.links.public(value, task_id)

    async def inbound(self, message: JSON, tenant: str) -> JSON:
        """``message`` (a client's, as wire JSON) as the log keeps it: its uploads' parts in the log's form.

        Raises:
            InvalidParamsError: A part in the log's form, or an upload URL that names no upload
                of ``tenant``.
        """
        parts = message.get("parts")
        if refers_to_stored(message):
            where = "message"
            if isinstance(parts, list):
                stored = (i for i, part in enumerate(parts) if refers_to_stored({"parts": [part]}))
                where = next((f"message.parts[{i}]" for i in stored), where)
            raise _refused(where, "must not use the longhaul-file: scheme (upload the file instead)")
        if not isinstance(parts, list) or not any(_has_url(part) for part in parts):
            return message
        rewritten = list(parts)
        for index, part in enumerate(parts):
            if not _has_url(part):
                continue
            field = f"message.parts[{index}].url"
            try:
                sha256 = self.links.uploaded(part["url"])
            except NotAnUploadError as error:
                raise _refused(field, str(error)) from None
            if sha256 is None:
                continue  # another URL: the step fetches it
            upload = await self._upload(tenant, sha256)
            if upload is None:
                raise _refused(field, f"names no upload of this tenant ({part['url']})")
            rewritten[index] = _stored_part(part, upload)
        return {**message, "parts": rewritten}

    async def _upload(self, tenant: str, sha256: str) -> Upload | None:
        if self._uploads is None:
            return None
        return await asyncio.to_thread(self._uploads.find, tenant, sha256)


def _has_url(part: object) -> bool:
    return isinstance(part, dict) and isinstance(part.get("url"), str)


def _stored_part(part: JSON, upload: Upload) -> JSON:
    """The log's form of a client's part naming ``upload``: its media type and name, else the upload's."""
    media_type = part.get("mediaType") or upload.media_type
    filename = part.get("filename") or upload.filename
    stored = file_part(FileRef(upload.sha256, upload.size), media_type=media_type, filename=filename)
    metadata = part.get("metadata")
    if isinstance(metadata, dict):
        stored["metadata"] = {**metadata, **stored["metadata"]}
    return stored


def _refused(field: str, rule: str) -> InvalidParamsError:
    return InvalidParamsError.with_violations(f"invalid params: {field} {rule}", [(field, rule)])
