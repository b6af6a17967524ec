"""HTTP range requests (RFC 9110, section 14) for the file downloads: which bytes a ``Range`` asks for.

One range of the ``bytes`` unit is served: ``bytes=a-b`` (``b`` past the end means the end),
``bytes=a-`` and ``bytes=-n`` (the last ``n`` bytes). Anything else, which a server may ignore
(another unit, several ranges, a malformed header, an ``If-Range`` that does not name the
current ETag), is ignored: the whole file is sent. A range that starts past the end (or a
suffix of length 0, or any range of an empty file) is unsatisfiable: HTTP 416.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

_RANGE = re.compile(r"bytes=([0-9]*)-([0-9]*)", re.ASCII)
_MAX_DIGITS = 19
"""A position longer than this is past any file (and never parsed as a huge number)."""
_PAST_ANY_END = 10**_MAX_DIGITS


@dataclass(frozen=True)
class ByteRange:
    """The bytes ``start`` to ``end`` inclusive, as ``Content-Range`` names them."""

    start: int
    end: int

    @property
    def length(self) -> int:
        """How many bytes the range holds."""
        return self.end - self.start + 1

    def content_range(self, size: int) -> str:
        """``bytes start-end/size``."""
        return f"bytes {self.start}-{self.end}/{size}"


class UnsatisfiableError(Exception):
    """The range asks for no byte of the file (HTTP 416 with ``Content-Range: bytes */size``)."""


def requested_range(
    header: str | None, size: int, *, if_range: str | None = None, etag: str = ""
) -> ByteRange | None:
    """The one range ``header`` asks for in a file of ``size`` bytes, or ``None`` for the whole file.

    ``if_range`` (the ``If-Range`` header) sends the range only when it names ``etag``.

    Raises:
        UnsatisfiableError: The range starts past the end of the file.
    """
    if header is None or (if_range is not None and if_range.strip() != etag):
        return None
    match = _RANGE.fullmatch(header.strip())
    if match is None:
        return None  # another unit, several ranges or no range at all: ignored
    first, last = match[1], match[2]
    if first:
        start = _position(first)
        if last and _position(last) < start:
            return None  # invalid (last before first): ignored
        if start >= size:
            raise UnsatisfiableError(header)
        end = min(_position(last), size - 1) if last else size - 1
        return ByteRange(start, end)
    if not last:
        return None  # "bytes=-": no range at all
    suffix = _position(last)
    if suffix == 0 or size == 0:
        raise UnsatisfiableError(header)
    return ByteRange(max(0, size - suffix), size - 1)


def _position(digits: str) -> int:
    """A byte position; one of more than ``_MAX_DIGITS`` digits is past the end of any file."""
    return int(digits) if len(digits) <= _MAX_DIGITS else _PAST_ANY_END
