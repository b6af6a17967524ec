"""The Litestar gateway: the agent card, the A2A JSON-RPC and HTTP+JSON bindings, the audit pages.

The app holds no task state: every request reads and appends through the event store, so any
number of gateways can serve the same store.
"""

from __future__ import annotations

import functools
import json
from datetime import timedelta
from typing import Any

from litestar import Litestar, Request, Response, get, post
from litestar.datastructures import State
from litestar.di import Provide
from litestar.exceptions import HTTPException
from litestar.openapi import OpenAPIConfig
from litestar.response import Stream
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest

from api.agent_card import (
    CACHE_CONTROL,
    JSONRPC_PATH,
    REST_PATH,
    CardDocument,
    DurabilityPolicy,
    FilesPolicy,
    build_agent_card,
    card_document,
    package_version,
)
from api.audit import AUDIT_PATH, AuditReads, audit_route_error, audit_router
from api.audit_pages import audit_pages_router, is_audit_path, template_config
from api.audit_pages import route_error as audit_page_error
from api.authentication import PUBLIC, Authenticate, caller_tenant
from api.bodies import read_body, requested_version
from api.config import JSON_MEDIA_TYPE, GatewayConfig, Injected
from api.errors import A2AError
from api.file_parts import FileParts
from api.files import Files, files_router
from api.jsonrpc import RpcAnswer, RpcStream, error_answer, handle_jsonrpc
from api.metrics import GatewayLoadCollector, gateway_registry
from api.overload import UNLIMITED, LimitInFlight
from api.rest import Binding, RestOpenAPI, rest_router, route_error, route_verbs
from api.service import A2AService
from api.sse import jsonrpc_envelope, sse_response
from api.streams import TaskStreams
from api.task_feed import StoreLog
from api.waiting import PollingWaiter
from projections.task_view import open_view
from store.files import FileStore, open_uploads
from store.public_form import FileLinks, Sign

OPEN_ROUTE = {PUBLIC: True, UNLIMITED: True}
"""The ``opt`` of routes anyone may call, at any load: no key checked, not counted in flight."""


@get("/.well-known/agent-card.json", operation_id="get_agent_card", sync_to_thread=False, opt=OPEN_ROUTE)
def get_agent_card(request: Request[object, object, State], card: Injected[CardDocument]) -> Response[bytes]:
    """The agent card, revalidated with ``If-None-Match``."""
    headers = {"Cache-Control": CACHE_CONTROL, "ETag": card.etag, "Last-Modified": card.last_modified}
    if card.matches(request.headers.get("if-none-match")):
        return Response(content=b"", status_code=304, headers=headers)
    return Response(content=card.body, media_type=JSON_MEDIA_TYPE, headers=headers)


@post(JSONRPC_PATH, operation_id="jsonrpc")
async def jsonrpc(
    request: Request[object, object, State], binding: Injected[Binding]
) -> Response[bytes] | Stream:
    """One A2A JSON-RPC call; the streaming methods answer ``text/event-stream`` (``api.sse``)."""
    try:
        body = await read_body(request, limit=binding.max_body_bytes)
    except A2AError as error:  # too large, or unreadable (an invalid Content-Length)
        return _respond(error_answer(error))
    answer = await handle_jsonrpc(
        binding.service,
        body=body,
        content_type=request.headers.get("content-type"),
        a2a_version=requested_version(request),
        tenant_of=functools.partial(caller_tenant, request),
        streams=binding.streams,
        last_event_id=request.headers.get("last-event-id"),
    )
    if isinstance(answer, RpcStream):
        return sse_response(answer.frames, jsonrpc_envelope(answer.request_id), binding.keepalive_s)
    return _respond(answer)


@get("/metrics", operation_id="metrics", sync_to_thread=True, opt=OPEN_ROUTE)
def metrics(prometheus: Injected[CollectorRegistry]) -> Response[bytes]:
    """The deployment's metrics in the Prometheus text format (``api/metrics.py``)."""
    return Response(content=generate_latest(prometheus), media_type=CONTENT_TYPE_LATEST)


def _respond(answer: RpcAnswer) -> Response[bytes]:
    body = json.dumps(answer.body, separators=(",", ":"), ensure_ascii=False).encode()
    return Response(content=body, status_code=answer.http_status, media_type=JSON_MEDIA_TYPE)


def create_app(config: GatewayConfig) -> Litestar:
    """The gateway app that ``config`` describes (``api.config.GatewayConfig``).

    The handlers get the gateway's parts by name through Litestar's dependency injection, each
    handler one: ``card`` (the agent card), ``binding`` (``api.rest.Binding``: the service and
    streams both A2A bindings call), ``audit`` (``api.audit.AuditReads``), ``files``
    (``api.files.Files``: downloads and uploads) and ``prometheus`` (the metrics registry).
    Each is a value made once here, so a request resolves it without a call on
    a thread or a task group (Litestar runs a handler's dependencies concurrently when it has more
    than one).
    """
    store = config.store
    links = FileLinks(config.public_url, sign=_signer(config.files, config.file_url_expiry))
    uploads = open_uploads(store) if config.files is not None else None
    service = A2AService(
        store=store,
        registry=config.registry,
        clock=config.clock,
        default_skill=config.default_skill,
        waiter=config.waiter if config.waiter is not None else PollingWaiter(store),
        blocking_timeout_s=config.blocking_timeout_s,
        task_view=open_view(store),
        allow_private_webhooks=config.allow_private_webhooks,
        hand_off=config.hand_off,
        files=FileParts(links, uploads),
    )
    metrics_registry = gateway_registry(store, relay_stream=config.relay_stream, extra=config.process_metrics)
    streams = TaskStreams(
        service,
        config.feed,
        StoreLog(store) if config.feed is not None else None,
        max_pending=config.stream_max_pending,
        metrics=metrics_registry,
    )
    policy = DurabilityPolicy(
        retention=config.retention,
        max_pause=config.max_pause,
        retention_overridden=config.retention_overridden,
        streaming=streams.available,
    )
    files_policy = None
    if config.files is not None:
        files_policy = FilesPolicy(config.max_upload_bytes, config.files.signs, config.file_url_expiry)
    card = card_document(
        build_agent_card(
            config.registry,
            config.public_url,
            policy,
            bearer=config.api_keys is not None,
            files=files_policy,
        ),
        modified=config.clock(),
    )
    limit = LimitInFlight(config.max_in_flight, config.overload_target_s)
    authenticate = Authenticate(config.api_keys)
    metrics_registry.register(GatewayLoadCollector(limit, authenticate))
    binding = Binding(
        service=service,
        streams=streams,
        media_type=config.rest_media_type,
        max_body_bytes=config.max_body_bytes,
        keepalive_s=config.stream_keepalive_s,
    )
    audit = AuditReads(service, store, tuple(config.audit_verifier_keys))
    files = Files(
        service=service,
        store=config.files,
        uploads=uploads,
        links=links,
        clock=config.clock,
        max_upload_bytes=config.max_upload_bytes,
    )
    # logging_config=None: the process (the CLI) configures logging; Litestar must not restyle it.
    app = Litestar(
        route_handlers=[
            get_agent_card,
            jsonrpc,
            metrics,
            rest_router(),
            audit_router(),
            audit_pages_router(),
            files_router(),
        ],
        middleware=[limit, authenticate],
        dependencies={
            "card": _value(card),
            "binding": _value(binding),
            "audit": _value(audit),
            "prometheus": _value(metrics_registry),
            "files": _value(files),
        },
        debug=False,
        logging_config=None,
        request_max_body_size=config.max_body_bytes,
        template_config=template_config(),
        exception_handlers={HTTPException: functools.partial(_http_error, config.rest_media_type)},
        openapi_config=OpenAPIConfig(
            title="longhaul", version=package_version(), path="/schema", render_plugins=[RestOpenAPI()]
        ),
    )
    app.asgi_handler = route_verbs(app.asgi_handler)
    return app


def _signer(files: FileStore | None, expiry: timedelta) -> Sign | None:
    """Pre-signed URLs of ``files`` valid for ``expiry`` (None: no store; a directory gives none)."""
    if files is None:
        return None
    return functools.partial(files.signed_url, expires=expiry)


def _value(value: object) -> Provide:
    """``value`` as a dependency: made once, so resolving it is a cached read (no call, no thread)."""

    def made() -> object:
        return value

    return Provide(made, use_cache=True, sync_to_thread=False)


def _http_error(
    rest_media_type: str, request: Request[Any, Any, State], error: HTTPException
) -> Response[Any]:
    """Litestar's refusals (no such route, method not allowed), in the shape of the path.

    Status bodies on the HTTP+JSON binding (as ``rest_media_type``) and the audit reads
    (``/audit/v1``), HTML pages under the rest of ``/audit``, else Litestar's JSON.
    """
    if request.url.path.startswith(REST_PATH + "/"):
        return route_error(request, error, rest_media_type)
    if request.url.path.startswith(AUDIT_PATH + "/"):
        return audit_route_error(request, error)
    if is_audit_path(request.url.path):
        return audit_page_error(request, error)
    return Response(
        content={"status_code": error.status_code, "detail": error.detail},
        status_code=error.status_code,
        headers=error.headers,
    )
