"""Answers a middleware sends before any route handler runs (a missing key, too many requests).

The body is in the binding of the path: a JSON-RPC error response (``id`` null: the body was
not read) at the JSON-RPC endpoint, a ``google.rpc.Status`` everywhere else (HTTP+JSON); a page
for a browser (the audit pages) is refused with a short HTML page instead.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from litestar.types import Scope, Send

from api.agent_card import JSONRPC_PATH
from api.errors import A2AError


def refusal_body(path: str, error: A2AError) -> dict[str, Any]:
    """The body refusing a request to ``path`` with ``error``, in the path's binding."""
    if path.rstrip("/") == JSONRPC_PATH:
        return {"jsonrpc": "2.0", "id": None, "error": error.to_jsonrpc()}
    return error.to_status()


async def send_refusal(scope: Scope, send: Send, error: A2AError, headers: Mapping[str, str]) -> None:
    """Answer the request of ``scope`` with ``error`` (its HTTP status) and ``headers``."""
    body = json.dumps(refusal_body(scope["path"], error), separators=(",", ":")).encode()
    raw_headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
    raw_headers += [(name.lower().encode(), value.encode()) for name, value in headers.items()]
    await send({"type": "http.response.start", "status": error.http_status, "headers": raw_headers})
    await send({"type": "http.response.body", "body": body, "more_body": False})


PAGE_REFUSAL = (
    b'<!doctype html><html lang="en"><head><meta charset="utf-8"><title>Sign in - longhaul audit</title>'
    b"</head><body><h1>Sign in to read audit pages</h1><p>These pages need an API key: sign in with"
    b" any user name (your tenant, say) and the API key as the password.</p></body></html>"
)


async def send_page_refusal(send: Send, headers: Mapping[str, str]) -> None:
    """Answer a browser's request for a page with 401, ``headers`` (a challenge) and an HTML page."""
    raw_headers = [
        (b"content-type", b"text/html; charset=utf-8"),
        (b"content-length", str(len(PAGE_REFUSAL)).encode()),
        (b"cache-control", b"no-store"),
    ]
    raw_headers += [(name.lower().encode(), value.encode()) for name, value in headers.items()]
    await send({"type": "http.response.start", "status": 401, "headers": raw_headers})
    await send({"type": "http.response.body", "body": PAGE_REFUSAL, "more_body": False})
