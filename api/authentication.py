"""Who is calling: the bearer API key of a request, resolved to its tenant before any handler runs.

``Authenticate`` is the gateway's middleware. With keys configured, a request without
``Authorization: Bearer <key>``, or with a key no ``KeyRing`` entry matches, is answered 401
with ``WWW-Authenticate: Bearer`` and an error body in its binding's shape
(``api.early_answers``); with none configured every caller is the open development tenant.
Routes whose handler has ``opt={"public": True}`` (the agent card, ``/metrics``) are not checked.
Pages for a browser (``opt={"browser_page": True}``: the audit pages of ``api.audit_pages``) also
take the key as the password of HTTP Basic, which a browser asks for and sends by itself, and are
refused with an HTML page and a Basic challenge (ADR 0028).

``caller_tenant`` is the one function every binding calls to learn the tenant a method runs as.
"""

from __future__ import annotations

import base64
import binascii
import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from litestar.connection import ASGIConnection
from litestar.middleware import ASGIMiddleware
from litestar.types import ASGIApp, Receive, Scope, Send

from api.api_keys import CALLER_KEY_ID, KeyRing
from api.early_answers import send_page_refusal, send_refusal
from api.errors import InvalidParamsError, UnauthenticatedError
from api.service import DEFAULT_TENANT

log = logging.getLogger(__name__)

CALLER = "longhaul.caller"
"""The key of the request's ``Caller`` in the ASGI scope's ``state``."""

PUBLIC = "public"
"""The route handler ``opt`` key of routes anyone may call without a key."""

BROWSER_PAGE = "browser_page"
"""The route handler ``opt`` key of pages for a browser: HTTP Basic accepted, HTML refusals."""

CHALLENGE = {"WWW-Authenticate": 'Bearer realm="longhaul"'}
PAGE_CHALLENGE = {"WWW-Authenticate": 'Basic realm="longhaul audit", charset="UTF-8"'}


@dataclass(frozen=True)
class Caller:
    """The authenticated caller: its tenant and key id (``key_id_of``), or ``None`` for both (open)."""

    tenant: str | None
    key_id: str | None = None


OPEN = Caller(tenant=None)
"""The caller of a gateway with no keys: it may name any tenant (``DEFAULT_TENANT`` if none)."""


class Authenticate(ASGIMiddleware):
    """Resolve the caller of every non-public request from its bearer key, or refuse it with 401."""

    exclude_opt_key = PUBLIC

    def __init__(self, keys: KeyRing | None) -> None:
        self.keys = keys
        self.refused = 0
        """Requests answered 401 so far (``/metrics``): one app, one event loop, so a plain count."""

    async def handle(self, scope: Scope, receive: Receive, send: Send, next_app: ASGIApp) -> None:
        """Store the caller in the scope and go on, or answer 401."""
        if self.keys is None:
            caller = OPEN
        else:
            presented = _bearer_token(scope) or (_basic_password(scope) if _is_browser_page(scope) else None)
            key = self.keys.find(presented or "")
            if key is None:
                self.refused += 1
                log.debug("refused %s %s: no known API key", scope.get("method", ""), scope["path"])
                if _is_browser_page(scope):
                    await send_page_refusal(send, PAGE_CHALLENGE)
                else:
                    await send_refusal(scope, send, UnauthenticatedError(), CHALLENGE)
                return
            caller = Caller(tenant=key.tenant, key_id=key.key_id)
        scope.setdefault("state", {})[CALLER] = caller
        key_id = CALLER_KEY_ID.set(caller.key_id)
        try:
            await next_app(scope, receive, send)
        finally:
            CALLER_KEY_ID.reset(key_id)


TenantOf = Callable[[str | None], str]
"""The tenant a method runs as, given the tenant its params name (``caller_tenant`` of a request)."""


def caller_tenant(connection: ASGIConnection[Any, Any, Any, Any], named: str | None) -> str:
    """The tenant a method of this request runs as; ``named`` is the request's ``tenant`` field.

    With API keys, the key's tenant: a request that names another one is refused (InvalidParams
    on ``tenant``), so a task can only ever be read or written by its own tenant. Without keys
    (open dev mode), the tenant named, or ``DEFAULT_TENANT``. A request the middleware did not
    see (a route wired without it) is refused as unauthenticated: the wall fails closed.
    """
    caller = connection.scope.get("state", {}).get(CALLER)
    if not isinstance(caller, Caller):
        raise UnauthenticatedError()
    if caller.tenant is None:
        return named or DEFAULT_TENANT
    if named and named != caller.tenant:
        rule = "must be empty or the tenant of the API key"
        raise InvalidParamsError.with_violations(f"invalid params: tenant {rule}", [("tenant", rule)])
    return caller.tenant


def key_tenant(connection: ASGIConnection[Any, Any, Any, Any]) -> str | None:
    """The tenant of the request's API key; ``None`` on an open gateway (no keys, so no walls).

    For routes that name no tenant of their own (the file downloads): with keys, the caller
    reaches its key's tenant only; without, whatever a caller could name.
    """
    caller = connection.scope.get("state", {}).get(CALLER)
    if not isinstance(caller, Caller):
        raise UnauthenticatedError()
    return caller.tenant


def _bearer_token(scope: Scope) -> str | None:
    """The token of the request's ``Authorization: Bearer`` header, if it has one."""
    for name, value in scope["headers"]:
        if name == b"authorization":
            scheme, _, token = value.decode("latin-1").strip().partition(" ")
            if scheme.lower() == "bearer" and token.strip():
                return token.strip()
    return None


def _is_browser_page(scope: Scope) -> bool:
    handler = scope.get("route_handler")
    return bool(handler is not None and handler.opt.get(BROWSER_PAGE))


def _basic_password(scope: Scope) -> str | None:
    """The password of the request's ``Authorization: Basic`` header (the user name is not used)."""
    for name, value in scope["headers"]:
        if name == b"authorization":
            scheme, _, encoded = value.decode("latin-1").strip().partition(" ")
            if scheme.lower() != "basic":
                return None
            try:
                decoded = base64.b64decode(encoded.strip(), validate=True).decode("utf-8")
            except (binascii.Error, UnicodeDecodeError):
                return None
            _, colon, password = decoded.partition(":")
            return password if colon and password else None
    return None
