"""File parts kept by reference: the form a stored file takes in the log, and how to find it.

A file in the object store is an A2A file part whose ``url`` is ``longhaul-file:sha256:<hex>``
and whose ``metadata`` says the hash and the size:

    {"url": "longhaul-file:sha256:9f86…", "mediaType": "application/pdf", "filename": "report.pdf",
     "metadata": {"sha256": "9f86…", "size": 52311}}

That is the log's form: the event holds the hash, so the task's hash chain and the signed
checkpoints cover the file's bytes. No client ever sees it: every answer, stream frame and webhook
carries the part with a URL the client can fetch in its place (``with_urls``), and a client's
message never brings one in (``refers_to_stored``: the gateway refuses it).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

JSON = dict[str, Any]

SCHEME = "longhaul-file:sha256:"
"""The ``url`` prefix of a stored file's part in the log."""

_HEX = re.compile(r"[0-9a-f]{64}")


class UnreadableFileError(ValueError):
    """A file part a step cannot read: no bytes, no file, or a URL the SSRF guard refuses."""


@dataclass(frozen=True)
class FileRef:
    """A stored file, as a part names it."""

    sha256: str
    size: int


def file_part(ref: FileRef, *, media_type: str, filename: str | None = None) -> JSON:
    """The log form of a stored file's part."""
    part: JSON = {"url": SCHEME + ref.sha256, "mediaType": media_type}
    if filename is not None:
        part["filename"] = filename
    part["metadata"] = {"sha256": ref.sha256, "size": ref.size}
    return part


def stored_file(part: object) -> FileRef | None:
    """The stored file a part (in the log's form) names, or None for any other part."""
    if not isinstance(part, dict):
        return None
    url = part.get("url")
    if not isinstance(url, str) or not url.startswith(SCHEME):
        return None
    sha256 = url.removeprefix(SCHEME)
    metadata = part.get("metadata")
    size = metadata.get("size") if isinstance(metadata, dict) else None
    if not _HEX.fullmatch(sha256) or not isinstance(size, int) or isinstance(size, bool) or size < 0:
        return None
    return FileRef(sha256, size)


def parts_of(value: object) -> Iterator[JSON]:
    """Every part (a dict in a ``parts`` list) anywhere in a task, message, artifact or frame."""
    if isinstance(value, dict):
        for key, item in value.items():
            if key == "parts" and isinstance(item, list):
                yield from (p for p in item if isinstance(p, dict))
            else:
                yield from parts_of(item)
    elif isinstance(value, list):
        for item in value:
            yield from parts_of(item)


def files_in(value: object) -> list[FileRef]:
    """The stored files ``value`` refers to, each once, in the order they first appear."""
    seen: dict[str, FileRef] = {}
    for part in parts_of(value):
        ref = stored_file(part)
        if ref is not None:
            seen.setdefault(ref.sha256, ref)
    return list(seen.values())


def refers_to_stored(value: object) -> bool:
    """Whether any object in ``value`` has a ``url`` in the log's form of a stored file.

    A quick walk (exact types, no copy): every answer passes it on its way out, and an answer
    without a stored file costs only this.
    """
    if type(value) is dict:
        url = value.get("url")
        if type(url) is str and url.startswith(SCHEME):
            return True
        items: Any = value.values()
    elif type(value) is list:
        items = value
    else:
        return False
    for item in items:
        kind = type(item)
        if (kind is dict or kind is list) and refers_to_stored(item):
            return True
    return False


def with_urls(value: Any, locate: Callable[[FileRef], str]) -> Any:
    """``value`` with every stored file's part given the URL ``locate`` names for it.

    Returns ``value`` itself (no copy) when it holds no stored file, so an answer without files
    costs one walk of its parts.
    """
    if not files_in(value):
        return value
    return _replaced(value, locate)


def _replaced(value: Any, locate: Callable[[FileRef], str]) -> Any:
    if isinstance(value, dict):
        ref = stored_file(value)
        if ref is not None:
            return {**value, "url": locate(ref)}
        return {key: _replaced(item, locate) for key, item in value.items()}
    if isinstance(value, list):
        return [_replaced(item, locate) for item in value]
    return value
