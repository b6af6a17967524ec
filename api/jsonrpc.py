"""The A2A 1.0 JSON-RPC binding: checks, envelope, dispatch and error answers.

``handle_jsonrpc`` turns one HTTP request (content type, version header, body) into one JSON-RPC
response and never raises: every failure becomes an error object (``code``, ``message``,
``data``), an unexpected one a logged ``-32603`` whose message carries no internals. Checks run
in this order: content type, JSON, envelope, A2A version, method, params.
"""

from __future__ import annotations

import logging
import re
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from typing import Any, TypeVar

from pydantic import ValidationError

from api.authentication import TenantOf
from api.bodies import check_content_type, parse_json
from api.errors import (
    A2AError,
    InternalError,
    InvalidRequestError,
    MethodNotFoundError,
    UnsupportedOperationError,
    VersionNotSupportedError,
)
from api.service import A2AService
from api.sse import Frame
from api.streams import STREAM_METHODS, TaskStreams
from api.wire import (
    CancelTaskRequest,
    DeleteTaskPushNotificationConfigRequest,
    GetTaskPushNotificationConfigRequest,
    GetTaskRequest,
    JsonRpcRequest,
    ListTaskPushNotificationConfigsRequest,
    ListTasksRequest,
    SendMessageRequest,
    TaskPushNotificationConfig,
    WireModel,
    parse_params,
)

JSON = dict[str, Any]
RequestId = str | int | None
Params = JSON | list[Any] | None

log = logging.getLogger(__name__)

SUPPORTED_VERSION = re.compile(r"1\.0(\.\d+)?")

UNSUPPORTED_METHODS: dict[str, str] = {
    "GetExtendedAgentCard": "GetExtendedAgentCard is not supported: this agent has no extended agent card",
}


@dataclass(frozen=True)
class RpcAnswer:
    """One JSON-RPC response and the HTTP status it is sent with."""

    body: JSON
    http_status: int = 200


@dataclass(frozen=True)
class RpcStream:
    """A streaming method's answer: its frames, each to be sent as a JSON-RPC response over SSE."""

    request_id: RequestId
    frames: AsyncIterator[Frame]


def check_version(value: str | None) -> None:
    """Accept A2A 1.0 (any 1.0.x patch); refuse every other version.

    A missing or empty ``A2A-Version`` is accepted as 1.0. The specification says an absent
    header means 0.3; we are lenient on purpose because this server speaks only 1.0, every 1.0
    client we know (the a2a-sdk, the TCK) sends the header, and a plain ``curl`` without it
    should get a 1.0 answer rather than a refusal. An explicit other version (``0.3``,
    ``99.0``) is refused with VersionNotSupported.
    """
    if value is None or not value.strip():
        return
    requested = value.strip()
    if not SUPPORTED_VERSION.fullmatch(requested):
        raise VersionNotSupportedError(f"A2A version {requested!r} is not supported; this agent speaks 1.0")


async def handle_jsonrpc(
    service: A2AService,
    *,
    body: bytes,
    content_type: str | None,
    a2a_version: str | None,
    tenant_of: TenantOf,
    streams: TaskStreams | None = None,
    last_event_id: str | None = None,
) -> RpcAnswer | RpcStream:
    """Answer one JSON-RPC request, as the tenant ``tenant_of`` gives. Never raises.

    The streaming methods (with ``streams``) answer an ``RpcStream`` once the request passed
    every check and its first commit is made; ``last_event_id`` is the ``Last-Event-ID``
    header of a reconnecting client (``api.streams``). Without ``streams`` they are
    UnsupportedOperation.
    """
    request_id: RequestId = None
    try:
        check_content_type(content_type)
        document = parse_json(body)
        request_id = _usable_id(document)
        envelope = _envelope(document)
        check_version(a2a_version)
        if envelope.method in STREAM_METHODS:
            if streams is None:
                raise UnsupportedOperationError(
                    f"{envelope.method} is not available on this gateway (capabilities.streaming is false)"
                )
            return RpcStream(
                request_id, await streams.open(envelope.method, envelope.params, last_event_id, tenant_of)
            )
        result = await _dispatch(service, envelope.method, envelope.params, tenant_of)
    except A2AError as error:
        return RpcAnswer({"jsonrpc": "2.0", "id": request_id, "error": error.to_jsonrpc()})
    except Exception:
        log.exception("JSON-RPC request %r failed", request_id)
        return RpcAnswer({"jsonrpc": "2.0", "id": request_id, "error": InternalError().to_jsonrpc()})
    return RpcAnswer({"jsonrpc": "2.0", "id": request_id, "result": result})


def error_answer(error: A2AError) -> RpcAnswer:
    """An answer for an error found before the body was read (size, transport)."""
    return RpcAnswer({"jsonrpc": "2.0", "id": None, "error": error.to_jsonrpc()}, error.http_status)


def _usable_id(document: Any) -> RequestId:
    """The request's id if it is a valid JSON-RPC id, for use in the answer (else null)."""
    if isinstance(document, dict):
        value = document.get("id")
        if isinstance(value, str) or (isinstance(value, int) and not isinstance(value, bool)):
            return value
    return None


def _envelope(document: Any) -> JsonRpcRequest:
    if isinstance(document, list):
        raise InvalidRequestError("batch requests are not supported; send one request per HTTP request")
    if not isinstance(document, dict):
        raise InvalidRequestError("a JSON-RPC request is a JSON object")
    if "id" not in document:
        raise InvalidRequestError("a request needs an id (A2A defines no notifications)")
    try:
        return JsonRpcRequest.model_validate(document)
    except ValidationError as error:
        fields = sorted({str(e["loc"][0]) for e in error.errors(include_url=False) if e["loc"]})
        raise InvalidRequestError(
            "invalid JSON-RPC 2.0 request: check "
            + ", ".join(fields)
            + ' (jsonrpc must be "2.0", id a string, number or null, method a string, params an object)'
        ) from None


Handler = Callable[[A2AService, Params, TenantOf], Awaitable[JSON]]
M = TypeVar("M", bound=WireModel)


def _method(model: type[M], name: str) -> Handler:
    """A JSON-RPC method: its params validated as ``model``, then ``service.<name>`` of them.

    The params' ``tenant`` is replaced by the tenant the caller runs as (``tenant_of``).
    """

    async def handle(service: A2AService, params: Params, tenant_of: TenantOf) -> JSON:
        use: Callable[[M], Awaitable[JSON]] = getattr(service, name)
        request = parse_params(model, params)
        tenant = tenant_of(getattr(request, "tenant", None))
        return await use(request.model_copy(update={"tenant": tenant}))

    return handle


METHODS: dict[str, Handler] = {
    "SendMessage": _method(SendMessageRequest, "send_message"),
    "GetTask": _method(GetTaskRequest, "get_task"),
    "CancelTask": _method(CancelTaskRequest, "cancel_task"),
    "ListTasks": _method(ListTasksRequest, "list_tasks"),
    "CreateTaskPushNotificationConfig": _method(TaskPushNotificationConfig, "create_push_config"),
    "GetTaskPushNotificationConfig": _method(GetTaskPushNotificationConfigRequest, "get_push_config"),
    "ListTaskPushNotificationConfigs": _method(ListTaskPushNotificationConfigsRequest, "list_push_configs"),
    "DeleteTaskPushNotificationConfig": _method(
        DeleteTaskPushNotificationConfigRequest, "delete_push_config"
    ),
}


async def _dispatch(service: A2AService, method: str, params: Params, tenant_of: TenantOf) -> JSON:
    handler = METHODS.get(method)
    if handler is not None:
        return await handler(service, params, tenant_of)
    if method in UNSUPPORTED_METHODS:
        raise UnsupportedOperationError(UNSUPPORTED_METHODS[method])
    raise MethodNotFoundError(f"method {method!r} not found; this agent serves A2A 1.0 methods")
