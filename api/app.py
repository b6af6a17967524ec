"""The Litestar gateway: the agent card, the A2A JSON-RPC and HTTP+JSON bindings, the audit pages.

The app holds no task state: every request reads and appends through the event store, so any
number of gateways can serve the same store.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Sequence
from datetime import timedelta
from typing import Any

from litestar import Litestar, Request, Response, get, post
from litestar.datastructures import State
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
    build_agent_card,
    card_document,
    package_version,
)
from api.api_keys import KeyRing
from api.audit import AUDIT_PATH, AuditReads, audit_route_error, audit_router
from api.audit_pages import audit_pages_router, is_audit_path, template_config
from api.audit_pages import route_error as audit_page_error
from api.authentication import PUBLIC, Authenticate, caller_tenant
from api.bodies import DEFAULT_MAX_BODY_BYTES, read_body, requested_version
from api.errors import A2AError
from api.hand_off import HandOff
from api.jsonrpc import RpcAnswer, RpcStream, error_answer, handle_jsonrpc
from api.metrics import GatewayLoadCollector, gateway_registry
from api.overload import DEFAULT_LIMIT, DEFAULT_TARGET_S, UNLIMITED, LimitInFlight
from api.rest import RestOpenAPI, RestSettings, rest_router, route_error, route_verbs
from api.service import A2AService
from api.sse import jsonrpc_envelope, sse_response
from api.streams import DEFAULT_MAX_PENDING, TaskStreams
from api.task_feed import StoreLog, TaskFeed
from api.waiting import PollingWaiter, TaskWaiter
from domain.clock import Clock
from domain.skill import SkillRegistry
from projections.task_view import open_view
from store.evidence import VerifierKey
from store.log import TaskApplication

JSON_MEDIA_TYPE = "application/json"

OPEN_ROUTE = {PUBLIC: True, UNLIMITED: True}
"""The ``opt`` of routes anyone may call, at any load: no key checked, not counted in flight."""

DEFAULT_KEEPALIVE_S = 15.0
"""Seconds an idle stream waits before a ``: keepalive`` comment (``LONGHAUL_STREAM_KEEPALIVE_SECONDS``)."""


@get("/.well-known/agent-card.json", operation_id="get_agent_card", sync_to_thread=False, opt=OPEN_ROUTE)
def get_agent_card(request: Request[object, object, State]) -> Response[bytes]:
    """The agent card, revalidated with ``If-None-Match``."""
    card: CardDocument = request.app.state.card
    headers = {"Cache-Control": CACHE_CONTROL, "ETag": card.etag, "Last-Modified": card.last_modified}
    if card.matches(request.headers.get("if-none-match")):
        return Response(content=b"", status_code=304, headers=headers)
    return Response(content=card.body, media_type=JSON_MEDIA_TYPE, headers=headers)


@post(JSONRPC_PATH, operation_id="jsonrpc")
async def jsonrpc(request: Request[object, object, State]) -> Response[bytes] | Stream:
    """One A2A JSON-RPC call; the streaming methods answer ``text/event-stream`` (``api.sse``)."""
    service: A2AService = request.app.state.service
    rest: RestSettings = request.app.state.rest
    try:
        body = await read_body(request, limit=rest.max_body_bytes)
    except A2AError as error:  # too large, or unreadable (an invalid Content-Length)
        return _respond(error_answer(error))
    answer = await handle_jsonrpc(
        service,
        body=body,
        content_type=request.headers.get("content-type"),
        a2a_version=requested_version(request),
        tenant_of=functools.partial(caller_tenant, request),
        streams=request.app.state.streams,
        last_event_id=request.headers.get("last-event-id"),
    )
    if isinstance(answer, RpcStream):
        return sse_response(answer.frames, jsonrpc_envelope(answer.request_id), request.app.state.keepalive_s)
    return _respond(answer)


@get("/metrics", operation_id="metrics", sync_to_thread=True, opt=OPEN_ROUTE)
def metrics(request: Request[object, object, State]) -> Response[bytes]:
    """The deployment's metrics in the Prometheus text format (``api/metrics.py``)."""
    registry: CollectorRegistry = request.app.state.metrics
    return Response(content=generate_latest(registry), media_type=CONTENT_TYPE_LATEST)


def _respond(answer: RpcAnswer) -> Response[bytes]:
    body = json.dumps(answer.body, separators=(",", ":"), ensure_ascii=False).encode()
    return Response(content=body, status_code=answer.http_status, media_type=JSON_MEDIA_TYPE)


def create_app(
    *,
    store: TaskApplication,
    registry: SkillRegistry,
    clock: Clock,
    default_skill: str,
    max_pause: timedelta,
    retention: timedelta,
    public_url: str,
    waiter: TaskWaiter | None = None,
    blocking_timeout_s: float = 600,
    relay_stream: str | None = None,
    process_metrics: CollectorRegistry | None = None,
    allow_private_webhooks: bool = False,
    retention_overridden: bool = False,
    api_keys: KeyRing | None = None,
    max_in_flight: int = DEFAULT_LIMIT,
    overload_target_s: float = DEFAULT_TARGET_S,
    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES,
    rest_media_type: str = JSON_MEDIA_TYPE,
    feed: TaskFeed | None = None,
    stream_keepalive_s: float = DEFAULT_KEEPALIVE_S,
    stream_max_pending: int = DEFAULT_MAX_PENDING,
    audit_verifier_keys: Sequence[VerifierKey] = (),
    hand_off: HandOff | None = None,
) -> Litestar:
    """The gateway app over ``store``.

    ``waiter`` wakes blocking SendMessage calls when their task changes (default: polling the
    log). ``blocking_timeout_s`` bounds how long a blocking call waits before answering with the
    task as it is. ``max_pause`` is the deadline of pauses that name none; the workers apply it,
    the gateway declares it on the card, with ``retention`` (the default retention;
    ``retention_overridden`` when per-tenant or per-skill overrides exist). ListTasks reads the
    current-task view in ``store``'s schema (through ``store``'s pool); over a memory store it is
    unsupported.
    ``/metrics`` reports the relay's lag for ``relay_stream`` (and any stream the relay's position
    table names), and the metrics of ``process_metrics`` (this process's worker, say) besides.
    ``allow_private_webhooks`` lets push notification URLs point at non-public addresses.
    ``api_keys`` are the bearer keys callers authenticate with, each mapped to its tenant
    (``api.authentication``); without them every caller is the open development tenant.
    Past ``max_in_flight`` requests in flight a request is answered 429 (``api.overload``), and
    past fewer while the shortest sojourn of the gateway's requests exceeds ``overload_target_s``.
    ``max_body_bytes`` bounds a request body on both bindings; ``rest_media_type`` is the
    Content-Type of the HTTP+JSON binding's answers.
    With a task ``feed`` (NATS, over a PostgreSQL store) the gateway streams
    (``api.streams``): a comment every ``stream_keepalive_s`` on an idle stream, and a stream
    closed when more than ``stream_max_pending`` events wait for its reader.
    ``audit_verifier_keys`` are the keys the log's checkpoints verify with (the current one
    first): ``/audit/v1/log-key`` serves them, the timeline page verifies receipts with them.
    ``hand_off`` is this process's worker, which takes blocking sends' new tasks into a free slot
    (``api.hand_off``; ``longhaul up``).
    """
    service = A2AService(
        store=store,
        registry=registry,
        clock=clock,
        default_skill=default_skill,
        waiter=waiter if waiter is not None else PollingWaiter(store),
        blocking_timeout_s=blocking_timeout_s,
        task_view=open_view(store),
        allow_private_webhooks=allow_private_webhooks,
        hand_off=hand_off,
    )
    metrics_registry = gateway_registry(store, relay_stream=relay_stream, extra=process_metrics)
    streams = TaskStreams(
        service,
        feed,
        StoreLog(store) if feed is not None else None,
        max_pending=stream_max_pending,
        metrics=metrics_registry,
    )
    policy = DurabilityPolicy(
        retention=retention,
        max_pause=max_pause,
        retention_overridden=retention_overridden,
        streaming=streams.available,
    )
    card = card_document(
        build_agent_card(registry, public_url, policy, bearer=api_keys is not None), modified=clock()
    )
    limit, authenticate = LimitInFlight(max_in_flight, overload_target_s), Authenticate(api_keys)
    metrics_registry.register(GatewayLoadCollector(limit, authenticate))
    rest = RestSettings(media_type=rest_media_type, max_body_bytes=max_body_bytes)
    state = State(
        {
            "service": service,
            "streams": streams,
            "keepalive_s": stream_keepalive_s,
            "card": card,
            "max_pause": max_pause,
            "metrics": metrics_registry,
            "rest": rest,
            "audit": AuditReads(service, store, tuple(audit_verifier_keys)),
            "store": store,
        }
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
        ],
        middleware=[limit, authenticate],
        state=state,
        debug=False,
        logging_config=None,
        request_max_body_size=max_body_bytes,
        template_config=template_config(),
        exception_handlers={HTTPException: _http_error},
        openapi_config=OpenAPIConfig(
            title="longhaul", version=package_version(), path="/schema", render_plugins=[RestOpenAPI()]
        ),
    )
    app.asgi_handler = route_verbs(app.asgi_handler)
    return app


def _http_error(request: Request[Any, Any, State], error: HTTPException) -> Response[Any]:
    """Litestar's refusals (no such route, method not allowed), in the shape of the path.

    Status bodies on the HTTP+JSON binding and the audit reads (``/audit/v1``), HTML pages under
    the rest of ``/audit``, else Litestar's JSON.
    """
    if request.url.path.startswith(REST_PATH + "/"):
        return route_error(request, error)
    if request.url.path.startswith(AUDIT_PATH + "/"):
        return audit_route_error(request, error)
    if is_audit_path(request.url.path):
        return audit_page_error(request, error)
    return Response(
        content={"status_code": error.status_code, "detail": error.detail},
        status_code=error.status_code,
        headers=error.headers,
    )
