"""What both bindings read of a request before its method: the body (size, media type, JSON), the version.

The size is checked while the body is read (``read_body``), the media type before a byte of it
is parsed (``check_content_type``: the TCK's JSONRPC-SSE-002 wants ContentTypeNotSupported, not a
parse error, for a ``text/plain`` body), then the JSON (``parse_json``). Each failure is the
``A2AError`` both bindings answer with, in their own shape. ``requested_version`` is the
``A2A-Version`` the request asks for, which ``api.jsonrpc.check_version`` checks.
"""

from __future__ import annotations

import json
import re
from typing import Any, NoReturn

from litestar import Request
from litestar.exceptions import ClientException
from litestar.exceptions.http_exceptions import RequestEntityTooLarge

from api.errors import ContentTypeNotSupportedError, InvalidRequestError, JSONParseError, RequestTooLargeError

MEBIBYTE = 1024 * 1024
DEFAULT_MAX_BODY_BYTES = MEBIBYTE
"""The default of ``LONGHAUL_MAX_BODY_BYTES``: the largest request body the gateway reads."""

JSON_MEDIA_TYPE = re.compile(r"application/([\w.+-]+\+)?json", re.IGNORECASE)

MAY_HOLD_A_SURROGATE = re.compile(rb"\\u[dD][89a-fA-F]|\xed[\xa0-\xbf]|\x00")
"""What a body holding a UTF-16 surrogate must contain: an escape ``\\uD800``-``\\uDFFF``, a
surrogate encoded as UTF-8 bytes (``ED A0``-``ED BF``, which ``json.loads`` reads), or, in
UTF-16 or UTF-32, a NUL byte (UTF-8 JSON has none). A body without any is Unicode text."""


async def read_body(request: Request[Any, Any, Any], *, limit: int) -> bytes:
    """The request's body, at most ``limit`` bytes (the app's ``request_max_body_size``)."""
    try:
        return await request.body()
    except RequestEntityTooLarge:
        raise RequestTooLargeError(f"request body is larger than {size_text(limit)}") from None
    except ClientException as error:  # e.g. an invalid Content-Length
        raise InvalidRequestError(f"unreadable request: {error.detail}") from None


def requested_version(request: Request[Any, Any, Any]) -> str | None:
    """The ``A2A-Version`` header, else the ``A2A-Version`` query parameter (ADR 0006)."""
    return request.headers.get("a2a-version") or request.query_params.get("A2A-Version")


def size_text(limit: int) -> str:
    """``1048576 bytes (1 MiB)``: a byte count as people read it."""
    if limit % MEBIBYTE == 0:
        return f"{limit} bytes ({limit // MEBIBYTE} MiB)"
    return f"{limit} bytes"


def check_content_type(content_type: str | None) -> None:
    """JSON media types only (``application/json``, ``application/a2a+json``...); absent is JSON."""
    if content_type is None or not content_type.strip():
        return
    media_type = content_type.split(";", 1)[0].strip()
    if not JSON_MEDIA_TYPE.fullmatch(media_type):
        raise ContentTypeNotSupportedError(
            f"Content-Type {media_type!r} is not supported; send application/json"
        )


def parse_json(body: bytes) -> Any:
    r"""The body's JSON document, all of it Unicode text.

    ``NaN`` and ``Infinity`` are not JSON; a string escaping half of a UTF-16 surrogate pair
    (``"\ud800"``) is JSON's syntax but no Unicode text (I-JSON, RFC 7493, forbids it), and
    nothing could store or answer it.
    """
    try:
        document = json.loads(body, parse_constant=_refuse_constant)
        if MAY_HOLD_A_SURROGATE.search(body):  # paired surrogates are text, a lone one is not
            json.dumps(document, ensure_ascii=False).encode()
    except UnicodeEncodeError:
        raise JSONParseError(
            "invalid JSON: a string holds a lone UTF-16 surrogate (not Unicode text)"
        ) from None
    except (ValueError, RecursionError) as error:  # JSONDecodeError and UnicodeDecodeError are ValueErrors
        raise JSONParseError(f"invalid JSON: {error}") from None
    return document


def _refuse_constant(name: str) -> NoReturn:
    raise ValueError(f"{name} is not JSON")
