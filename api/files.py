"""The files a task refers to, served by the gateway; and the uploads of a client's large inputs.

- ``GET``/``HEAD /a2a/files/{task id}/{sha256}``: a stored file that the task's artifacts,
  history or status message refer to (the URL every answer gives for it: ``api.file_parts``).
  The same API key and tenant wall as every method: a task of another tenant, an unknown task, a
  hash the task does not refer to all answer the same 404. The bytes stream from the file store
  in constant memory, with ``ETag: "<sha256>"`` (``If-None-Match`` answers 304), one ``Range``
  (206, or 416 when unsatisfiable: ``api.byte_ranges``), the part's media type and a
  ``Content-Disposition`` with its name.
- ``POST /a2a/files``: the request's body, streamed (not bounded by the JSON body limit but by
  ``max_upload_bytes``: 413, and nothing kept), into the file store; the caller's tenant is
  recorded as its uploader (``store.files.uploads``). The answer (201) gives the URL a message's
  file part names it by, ``/a2a/files/uploads/{sha256}``; the body's media type is the request's
  ``Content-Type``, its name the ``filename`` query parameter or ``Content-Disposition``'s. An
  upload that breaks (the client goes away, the limit) leaves no file and no record.
- ``GET``/``HEAD /a2a/files/uploads/{sha256}``: an upload, to the tenant that uploaded it.

A gateway without a file store answers 404 to all of them. Error bodies are
``google.rpc.Status``, as the HTTP+JSON binding's.
"""

from __future__ import annotations

import asyncio
import json
import logging
import re
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote, unquote

from litestar import HttpMethod, Request, Response, Router, post, route
from litestar.datastructures import State
from litestar.params import FromPath
from litestar.response import Stream

from api.authentication import caller_tenant, key_tenant
from api.byte_ranges import UnsatisfiableError, requested_range
from api.config import DEFAULT_MAX_UPLOAD_BYTES, JSON_MEDIA_TYPE, Injected
from api.errors import A2AError, InternalError, InvalidRequestError, RequestTooLargeError, TaskNotFoundError
from api.service import A2AService
from domain.clock import Clock
from domain.files import parts_of, stored_file
from domain.task import Task
from store.files import FileNotStoredError, FileStore, StoredFile, Upload, Uploads
from store.public_form import FILES_PATH, UPLOADS, FileLinks

log = logging.getLogger(__name__)

JSON = dict[str, Any]
AnyRequest = Request[Any, Any, State]
PathText = FromPath[str]

OCTET_STREAM = "application/octet-stream"
MEDIA_TYPE = re.compile(r"[\w!#$&^.+-]+/[\w!#$&^.+-]+(\s*;[ -~]*)?", re.ASCII)
"""A media type that may go in a header as it is (no control character, nothing but ASCII)."""
SHA256 = re.compile(r"[0-9a-f]{64}")
CACHE_CONTROL = "private, max-age=3600"
"""A file at a URL never changes (its hash is in the URL); a shared cache must not keep it (a tenant's)."""
SAFE_HEADERS = {
    "X-Content-Type-Options": "nosniff",
    "Content-Security-Policy": "sandbox",
}
"""A file is whatever a skill or a client made (HTML too): never run as a page of the gateway."""


class ClientGoneError(Exception):
    """The client went away before its upload's body ended."""


@dataclass(frozen=True)
class Files:
    """What the file routes need, injected by name as ``files`` (``api.app``)."""

    service: A2AService
    store: FileStore | None
    uploads: Uploads | None
    links: FileLinks
    clock: Clock
    max_upload_bytes: int = DEFAULT_MAX_UPLOAD_BYTES


# ------------------------------------------------------------------ the routes


@route(FILES_PATH + "/{task_id:str}/{sha256:str}", http_method=[HttpMethod.GET, HttpMethod.HEAD])
async def task_file(
    request: AnyRequest, files: Injected[Files], task_id: PathText, sha256: PathText
) -> Response[bytes] | Stream:
    """A file a task refers to (the caller's tenant's task only)."""
    try:
        if files.store is None:
            raise _not_found(task_id, sha256)
        part = await _referred(files.service, request, task_id, sha256)
        missing = _not_found(task_id, sha256)
        media_type, filename = part.get("mediaType"), part.get("filename")
        return await _serve(request, files.store, sha256, media_type, filename, missing)
    except A2AError as error:
        return _error(error)
    except Exception:
        log.exception("%s %s failed", request.method, request.url.path)
        return _error(InternalError())


@route(FILES_PATH + "/" + UPLOADS + "/{sha256:str}", http_method=[HttpMethod.GET, HttpMethod.HEAD])
async def uploaded_file(
    request: AnyRequest, files: Injected[Files], sha256: PathText
) -> Response[bytes] | Stream:
    """A file the caller's tenant uploaded."""
    try:
        tenant = caller_tenant(request, request.query_params.get("tenant"))
        upload = None
        if files.store is not None and files.uploads is not None and SHA256.fullmatch(sha256):
            upload = await asyncio.to_thread(files.uploads.find, tenant, sha256)
        missing = _not_found(UPLOADS, sha256)
        if files.store is None or upload is None:
            raise missing
        return await _serve(request, files.store, sha256, upload.media_type, upload.filename, missing)
    except A2AError as error:
        return _error(error)
    except Exception:
        log.exception("%s %s failed", request.method, request.url.path)
        return _error(InternalError())


@post(FILES_PATH, status_code=201)
async def upload_file(request: AnyRequest, files: Injected[Files]) -> Response[bytes]:
    """Store the body as a file of the caller's tenant; answer its URL, hash, size and media type."""
    try:
        if files.store is None or files.uploads is None:
            raise TaskNotFoundError("this gateway keeps no files")
        tenant = caller_tenant(request, request.query_params.get("tenant"))
        try:
            declared = request.content_length
        except Exception as error:  # noqa: BLE001 - Litestar's ClientException: an invalid Content-Length
            raise InvalidRequestError(f"unreadable request: {error}") from None
        limit = files.max_upload_bytes
        if declared is not None and declared > limit:
            raise _too_large(limit)
        media_type = _media_type(request.headers.get("content-type"))
        filename = request.query_params.get("filename") or _disposition_name(
            request.headers.get("content-disposition")
        )
        stored = await files.store.put(_body(request, limit))
        upload = Upload(tenant, stored.sha256, stored.size, media_type, filename or None)
        await asyncio.to_thread(files.uploads.record, upload, now=files.clock())
    except A2AError as error:
        return _error(error)
    except ClientGoneError:
        return Response(content=b"", status_code=400)  # nobody reads it; nothing was kept
    except Exception:
        log.exception("%s %s failed", request.method, request.url.path)
        return _error(InternalError())
    return _json(_upload_answer(files.links, stored, upload), 201)


def files_router() -> Router:
    """The file routes (``FILES_PATH``)."""
    return Router(path="/", route_handlers=[task_file, uploaded_file, upload_file], tags=["Files"])


# ------------------------------------------------------------------ downloads


async def _referred(service: A2AService, request: AnyRequest, task_id: str, sha256: str) -> JSON:
    """The part of the caller's task that refers to the stored file ``sha256``; else the 404."""
    tenant = key_tenant(request)
    try:
        task = await service.visible_task(task_id, tenant, any_tenant=tenant is None)
    except A2AError:
        raise _not_found(task_id, sha256) from None
    part = referring_part(task, sha256)
    if part is None:
        raise _not_found(task_id, sha256)
    return part


def referring_part(task: Task, sha256: str) -> JSON | None:
    """The first part of ``task`` (artifacts, history, status message) naming the stored file ``sha256``."""
    for part in parts_of([list(task.artifacts.values()), task.history, task.status_message]):
        ref = stored_file(part)
        if ref is not None and ref.sha256 == sha256:
            return part
    return None


async def _serve(
    request: AnyRequest,
    store: FileStore,
    sha256: str,
    media_type: object,
    filename: object,
    missing: A2AError,
) -> Response[bytes] | Stream:
    """The file's bytes (all, or the requested range) or its headers alone, as the request asks.

    A file referred to but not (or no longer) in the store is ``missing``.
    """
    size = await store.size(sha256) if SHA256.fullmatch(sha256) else None
    if size is None:
        raise missing
    etag = f'"{sha256}"'
    headers = {
        "ETag": etag,
        "Accept-Ranges": "bytes",
        "Cache-Control": CACHE_CONTROL,
        "Content-Disposition": content_disposition(filename if isinstance(filename, str) else None),
        **SAFE_HEADERS,
    }
    if _matches(request.headers.get("if-none-match"), etag):
        return Response(content=b"", status_code=304, headers=headers)
    try:
        wanted = requested_range(
            request.headers.get("range"), size, if_range=request.headers.get("if-range"), etag=etag
        )
    except UnsatisfiableError:
        headers["Content-Range"] = f"bytes */{size}"
        return Response(content=b"", status_code=416, headers=headers)
    status, start, length = 200, 0, size
    if wanted is not None:
        status, start, length = 206, wanted.start, wanted.length
        headers["Content-Range"] = wanted.content_range(size)
    headers["Content-Length"] = str(length)
    content_type = OCTET_STREAM
    if isinstance(media_type, str) and MEDIA_TYPE.fullmatch(media_type):
        content_type = media_type
    if request.method == HttpMethod.HEAD:
        return Response(content=b"", status_code=status, headers=headers, media_type=content_type)
    chunks = store.read(sha256, start, start + length)
    try:
        first = await anext(chunks, b"")  # a file gone from the store is a 404 before any header
    except FileNotStoredError:
        raise missing from None
    return Stream(_then(first, chunks), status_code=status, headers=headers, media_type=content_type)


async def _then(first: bytes, rest: AsyncIterator[bytes]) -> AsyncIterator[bytes]:
    try:
        if first:
            yield first
        async for chunk in rest:
            yield chunk
    finally:
        close = getattr(rest, "aclose", None)
        if close is not None:
            await close()


def _matches(if_none_match: str | None, etag: str) -> bool:
    """Whether ``If-None-Match`` names ``etag`` (compared weakly, as RFC 9110 says) or is ``*``."""
    if not if_none_match:
        return False
    tags = {tag.strip().removeprefix("W/") for tag in if_none_match.split(",")}
    return "*" in tags or etag in tags


def content_disposition(filename: str | None) -> str:
    """``attachment`` with the file's name: ``filename`` in ASCII, and ``filename*`` (RFC 6266) if not."""
    if not filename:
        return "attachment"
    plain = "".join(c if " " <= c <= "~" and c not in '"\\' else "_" for c in filename)
    value = f'attachment; filename="{plain}"'
    if plain != filename:
        value += "; filename*=UTF-8''" + quote(filename, safe="")
    return value


def _not_found(task_id: str, sha256: str) -> TaskNotFoundError:
    """The one answer to a file the caller may not read, whatever the reason (no task, not its, no file)."""
    return TaskNotFoundError(f"no file {sha256!r} in {task_id!r}")


# ------------------------------------------------------------------ uploads


async def _body(request: AnyRequest, limit: int) -> AsyncIterator[bytes]:
    """The request's body as it arrives, at most ``limit`` bytes (``RequestTooLargeError`` past it)."""
    received = 0
    while True:
        message = await request.receive()
        if message["type"] != "http.request":  # http.disconnect
            raise ClientGoneError
        chunk = message.get("body", b"")
        received += len(chunk)
        if received > limit:
            raise _too_large(limit)
        if chunk:
            yield chunk
        if not message.get("more_body", False):
            return


def _too_large(limit: int) -> RequestTooLargeError:
    return RequestTooLargeError(
        f"upload is larger than {limit} bytes (LONGHAUL_MAX_UPLOAD_BYTES); nothing was kept"
    )


def _media_type(content_type: str | None) -> str:
    """The upload's media type: its ``Content-Type`` when it is one, else ``application/octet-stream``."""
    if content_type and MEDIA_TYPE.fullmatch(content_type.strip()):
        return content_type.strip()
    return OCTET_STREAM


_FILENAME_STAR = re.compile(r"""filename\*\s*=\s*UTF-8''([^;\s]+)""", re.IGNORECASE)
_FILENAME = re.compile(r"""filename\s*=\s*(?:"((?:[^"\\]|\\.)*)"|([^;\s]+))""", re.IGNORECASE)


def _disposition_name(header: str | None) -> str | None:
    """The file name a ``Content-Disposition`` header gives (``filename*`` first), or ``None``."""
    if not header:
        return None
    star = _FILENAME_STAR.search(header)
    if star is not None:
        try:
            return unquote(star[1], errors="strict") or None
        except UnicodeDecodeError:
            pass
    plain = _FILENAME.search(header)
    if plain is None:
        return None
    name = plain[1] if plain[1] is not None else plain[2]
    return re.sub(r"\\(.)", r"\1", name) or None


def _upload_answer(links: FileLinks, stored: StoredFile, upload: Upload) -> JSON:
    answer: JSON = {
        "url": links.upload_url(stored.sha256),
        "sha256": stored.sha256,
        "size": stored.size,
        "mediaType": upload.media_type,
    }
    if upload.filename:
        answer["filename"] = upload.filename
    return answer


# ------------------------------------------------------------------ answers


def _json(document: JSON, status_code: int) -> Response[bytes]:
    content = json.dumps(document, separators=(",", ":"), ensure_ascii=False).encode()
    return Response(content=content, status_code=status_code, media_type=JSON_MEDIA_TYPE)


def _error(error: A2AError) -> Response[bytes]:
    return _json(error.to_status(), error.http_status)
