"""The A2A 1.0 HTTP+JSON binding: Litestar routes under ``/a2a/rest``, each also under ``/{tenant}``.

Every route builds the params of its method from the path, the query and the body, validates
them into the same wire model (``api.wire``) and calls the same ``A2AService`` method as the
JSON-RPC binding; its errors are the same ``A2AError``s, answered as ``google.rpc.Status`` bodies
with their HTTP status. Checks run in the order JSON-RPC runs them: body size, content type,
JSON, A2A version, then the params.

Routes ending in a ``:verb`` (``/message:send``, ``/tasks/{id}:cancel``) cannot be Litestar
paths, whose parameters are whole segments, so ``route_verbs`` turns the request's last segment
``<name>:<verb>`` into ``<name>/:<verb>`` before Litestar routes it, and the handlers are mounted
at the second form; ``described`` writes the OpenAPI paths back in the first form, with
the request bodies and query parameters the wire models define.

Longer than 500 lines on purpose: one short handler per HTTP+JSON route, each only translating to
the one implementation in ``api/service.py``, and the OpenAPI description of the same routes.
"""

from __future__ import annotations

import copy
import functools
import json
import logging
import re
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, Literal

from litestar import Request, Response, Router, delete, get, post
from litestar.datastructures import State
from litestar.enums import ScopeType
from litestar.exceptions import HTTPException, MethodNotAllowedException, NotFoundException
from litestar.openapi.plugins import JsonRenderPlugin
from litestar.params import FromPath
from litestar.response import Stream
from litestar.types import ASGIApp, Receive, Scope, Send

from api.agent_card import REST_PATH
from api.audit import describe_audit_paths
from api.authentication import caller_tenant
from api.bodies import check_content_type, parse_json, read_body, requested_version
from api.config import Injected
from api.errors import (
    A2AError,
    InternalError,
    InvalidParamsError,
    InvalidRequestError,
    MethodNotAllowedError,
    MethodNotFoundError,
    UnsupportedOperationError,
)
from api.jsonrpc import UNSUPPORTED_METHODS, check_version
from api.service import A2AService
from api.sse import rest_envelope, sse_response
from api.streams import TaskStreams
from api.wire import (
    CancelTaskRequest,
    DeleteTaskPushNotificationConfigRequest,
    GetTaskPushNotificationConfigRequest,
    GetTaskRequest,
    ListTaskPushNotificationConfigsRequest,
    ListTasksRequest,
    SendMessageRequest,
    TaskPushNotificationConfig,
    WireModel,
    parse_params,
)

JSON = dict[str, Any]
AnyRequest = Request[Any, Any, State]
Tenant = FromPath[str | None]
"""The ``/{tenant}`` prefix of a route's tenant variant (None on the plain route)."""
PathText = FromPath[str]

log = logging.getLogger(__name__)

VERB = re.compile(r"[a-z][A-Za-z]*")
BOOLEAN_QUERY_PARAMS = frozenset({"includeArtifacts"})
QUERY_BOOLEANS = {"true": True, "false": False}
"""A query string carries text; a boolean parameter is ``true`` or ``false``, nothing else."""

Source = Literal["query", "body", "optional body"]
"""Where a route's params are: the query, or the body (a JSON object; an empty optional one is ``{}``)."""


@dataclass(frozen=True, slots=True)
class Binding:
    """What the two bindings' handlers need of the gateway, injected by name as ``binding`` (``api.app``).

    The ``service`` they call, the ``streams`` they open (a comment every ``keepalive_s`` on an
    idle one), the bound of a request body, and the Content-Type of the HTTP+JSON binding's answers.
    """

    service: A2AService
    streams: TaskStreams
    media_type: str
    max_body_bytes: int
    keepalive_s: float


# ------------------------------------------------------------------ the routes


def routes(path: str) -> list[str]:
    """``path`` and its tenant variant ``/{tenant}`` + ``path``."""
    return [path, "/{tenant:str}" + path]


@post(routes("/message/:send"))
async def send_message(
    request: AnyRequest, binding: Injected[Binding], tenant: Tenant = None
) -> Response[bytes]:
    """SendMessage: the body is a ``SendMessageRequest``."""
    return await _serve(request, binding, tenant, SendMessageRequest, "send_message", source="body")


@get(routes("/tasks/{task_id:str}"))
async def get_task(
    request: AnyRequest, binding: Injected[Binding], task_id: PathText, tenant: Tenant = None
) -> Response[bytes]:
    """GetTask: ``historyLength`` in the query."""
    return await _serve(request, binding, tenant, GetTaskRequest, "get_task", path={"id": task_id})


@get(routes("/tasks"))
async def list_tasks(
    request: AnyRequest, binding: Injected[Binding], tenant: Tenant = None
) -> Response[bytes]:
    """ListTasks: every filter in the query."""
    return await _serve(request, binding, tenant, ListTasksRequest, "list_tasks")


@post(routes("/tasks/{task_id:str}/:cancel"))
async def cancel_task(
    request: AnyRequest, binding: Injected[Binding], task_id: PathText, tenant: Tenant = None
) -> Response[bytes]:
    """CancelTask: the body (``metadata``) may be empty."""
    return await _serve(
        request,
        binding,
        tenant,
        CancelTaskRequest,
        "cancel_task",
        path={"id": task_id},
        source="optional body",
    )


@post(routes("/tasks/{task_id:str}/pushNotificationConfigs"))
async def create_push_config(
    request: AnyRequest, binding: Injected[Binding], task_id: PathText, tenant: Tenant = None
) -> Response[bytes]:
    """CreateTaskPushNotificationConfig: the body is the config; its task is the path's."""
    return await _serve(
        request,
        binding,
        tenant,
        TaskPushNotificationConfig,
        "create_push_config",
        path={"taskId": task_id},
        source="body",
    )


@get(routes("/tasks/{task_id:str}/pushNotificationConfigs/{config_id:str}"))
async def get_push_config(
    request: AnyRequest,
    binding: Injected[Binding],
    task_id: PathText,
    config_id: PathText,
    tenant: Tenant = None,
) -> Response[bytes]:
    """GetTaskPushNotificationConfig."""
    path = {"taskId": task_id, "id": config_id}
    return await _serve(
        request, binding, tenant, GetTaskPushNotificationConfigRequest, "get_push_config", path=path
    )


@get(routes("/tasks/{task_id:str}/pushNotificationConfigs"))
async def list_push_configs(
    request: AnyRequest, binding: Injected[Binding], task_id: PathText, tenant: Tenant = None
) -> Response[bytes]:
    """ListTaskPushNotificationConfigs: ``pageSize`` and ``pageToken`` in the query."""
    path = {"taskId": task_id}
    return await _serve(
        request, binding, tenant, ListTaskPushNotificationConfigsRequest, "list_push_configs", path=path
    )


@delete(
    routes("/tasks/{task_id:str}/pushNotificationConfigs/{config_id:str}"),
    status_code=200,
)
async def delete_push_config(
    request: AnyRequest,
    binding: Injected[Binding],
    task_id: PathText,
    config_id: PathText,
    tenant: Tenant = None,
) -> Response[bytes]:
    """DeleteTaskPushNotificationConfig: answers ``{}``."""
    path = {"taskId": task_id, "id": config_id}
    model = DeleteTaskPushNotificationConfigRequest
    return await _serve(request, binding, tenant, model, "delete_push_config", path=path)


@get(routes("/extendedAgentCard"))
async def get_extended_agent_card(
    request: AnyRequest, binding: Injected[Binding], tenant: Tenant = None
) -> Response[bytes]:
    """GetExtendedAgentCard: this agent has none."""
    return await _unsupported(request, binding, "GetExtendedAgentCard")


# The streaming methods answer ``text/event-stream`` (``api.sse``), the same streams as JSON-RPC's.


@post(routes("/message/:stream"))
async def send_streaming_message(
    request: AnyRequest, binding: Injected[Binding], tenant: Tenant = None
) -> Response[bytes] | Stream:
    """SendStreamingMessage: the body is a SendMessageRequest; the task's events as SSE."""
    return await _stream(request, binding, tenant, "SendStreamingMessage", source="body")


@get(routes("/tasks/{task_id:str}/:subscribe"))
async def subscribe_get(
    request: AnyRequest, binding: Injected[Binding], task_id: PathText, tenant: Tenant = None
) -> Response[bytes] | Stream:
    """SubscribeToTask (GET, as the proto annotates it)."""
    return await _stream(request, binding, tenant, "SubscribeToTask", path={"id": task_id})


@post(routes("/tasks/{task_id:str}/:subscribe"))
async def subscribe_post(
    request: AnyRequest, binding: Injected[Binding], task_id: PathText, tenant: Tenant = None
) -> Response[bytes] | Stream:
    """SubscribeToTask (POST, as the prose specification and the SDK client send it; any body)."""
    return await _stream(
        request, binding, tenant, "SubscribeToTask", path={"id": task_id}, source="optional body"
    )


HANDLERS = [
    send_message,
    get_task,
    list_tasks,
    cancel_task,
    create_push_config,
    get_push_config,
    list_push_configs,
    delete_push_config,
    get_extended_agent_card,
    send_streaming_message,
    subscribe_get,
    subscribe_post,
]


def rest_router() -> Router:
    """The binding's routes under ``REST_PATH``."""
    return Router(path=REST_PATH, route_handlers=HANDLERS, tags=["HTTP+JSON"])


# ------------------------------------------------------------------ serving one call


async def _serve(
    request: AnyRequest,
    binding: Binding,
    tenant: str | None,
    model: type[WireModel],
    method: str,
    *,
    path: JSON | None = None,
    source: Source = "query",
) -> Response[bytes]:
    """Answer one call: params from ``source``, with the ``path``'s over them, and the tenant.

    Never raises: every failure is a Status body; an unexpected one is a logged 500 without internals.
    """
    try:
        params = await _params(request, binding, tenant, path, source)
        use: Callable[[WireModel], Awaitable[JSON]] = getattr(binding.service, method)
        result = await use(parse_params(model, params))
    except A2AError as error:
        return error_response(binding.media_type, error)
    except Exception:
        log.exception("HTTP+JSON %s %s failed", request.method, request.url.path)
        return error_response(binding.media_type, InternalError())
    return _respond(binding.media_type, result, 200)


async def _stream(
    request: AnyRequest,
    binding: Binding,
    tenant: str | None,
    method: str,
    *,
    path: JSON | None = None,
    source: Source = "query",
) -> Response[bytes] | Stream:
    """Open one streaming method (``api.streams``): refusals are Status bodies, then SSE frames."""
    try:
        params = await _params(request, binding, tenant, path, source)
        last_event_id = request.headers.get("last-event-id")
        tenant_of = functools.partial(caller_tenant, request)
        frames = await binding.streams.open(method, params, last_event_id, tenant_of)
    except A2AError as error:
        return error_response(binding.media_type, error)
    except Exception:
        log.exception("HTTP+JSON %s %s failed", request.method, request.url.path)
        return error_response(binding.media_type, InternalError())
    envelope = rest_envelope(lambda error: error.to_status())
    return sse_response(frames, envelope, binding.keepalive_s)


async def _params(
    request: AnyRequest, binding: Binding, tenant: str | None, path: JSON | None, source: Source
) -> JSON:
    """A call's params: from ``source``, the ``path``'s over them, the caller's tenant; version checked."""
    if source == "query":
        params = _query(request)
    else:
        params = await _body(request, binding.max_body_bytes, optional=source != "body")
    params.update(path or {})
    named = tenant if tenant is not None else params.get("tenant")
    if named is None or isinstance(named, str):  # else the model refuses it
        params["tenant"] = caller_tenant(request, named)
    check_version(requested_version(request))
    return params


async def _unsupported(request: AnyRequest, binding: Binding, method: str) -> Response[bytes]:
    try:
        check_version(requested_version(request))
    except A2AError as error:
        return error_response(binding.media_type, error)
    return error_response(binding.media_type, UnsupportedOperationError(UNSUPPORTED_METHODS[method]))


async def _body(request: AnyRequest, max_body_bytes: int, *, optional: bool) -> JSON:
    """The body's JSON object; an empty body is ``{}`` where the body is optional."""
    raw = await read_body(request, limit=max_body_bytes)
    if optional and not raw.strip():
        return {}
    check_content_type(request.headers.get("content-type"))
    document = parse_json(raw)
    if not isinstance(document, dict):
        raise InvalidParamsError.with_violations(
            "invalid params: the body must be a JSON object", [("body", "must be a JSON object")]
        )
    return document


def _query(request: AnyRequest) -> JSON:
    """The query's parameters (the last value of a repeated one), booleans read as ``true``/``false``."""
    params: JSON = {}
    for name, value in request.query_params.items():
        params[name] = QUERY_BOOLEANS.get(value, value) if name in BOOLEAN_QUERY_PARAMS else value
    return params


def _respond(media_type: str, document: JSON, status_code: int) -> Response[bytes]:
    content = json.dumps(document, separators=(",", ":"), ensure_ascii=False).encode()
    return Response(content=content, status_code=status_code, media_type=media_type)


def error_response(media_type: str, error: A2AError) -> Response[bytes]:
    """``error`` as a ``google.rpc.Status`` body with its HTTP status, as ``media_type``."""
    return _respond(media_type, error.to_status(), error.http_status)


def route_error(request: AnyRequest, error: HTTPException, media_type: str) -> Response[Any]:
    """Litestar's own refusals (no route, wrong method) under ``REST_PATH`` as Status bodies.

    An exception handler gets no dependencies: ``api.app`` binds the binding's ``media_type``.
    """
    if isinstance(error, MethodNotAllowedException):
        allowed = (error.headers or {}).get("allow", "")
        route = request.url.path.replace("/:", ":")
        text = f"{request.method} is not allowed on {route}; allowed: {allowed}"
        return error_response(media_type, MethodNotAllowedError(text))
    if isinstance(error, NotFoundException):
        route = request.url.path.replace("/:", ":")
        return error_response(media_type, MethodNotFoundError(f"no A2A 1.0 HTTP+JSON route {route}"))
    return error_response(media_type, InvalidRequestError(str(error.detail)))


# ------------------------------------------------------------------ ``:verb`` routes and their OpenAPI


def route_verbs(app: ASGIApp) -> ASGIApp:
    """Route ``REST_PATH/…/<name>:<verb>`` as ``REST_PATH/…/<name>/:<verb>``."""

    async def routed(scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == ScopeType.HTTP:
            scope["path"] = verb_path(scope["path"])
        await app(scope, receive, send)

    return routed


def verb_path(path: str) -> str:
    """``/a2a/rest/tasks/7:cancel`` -> ``/a2a/rest/tasks/7/:cancel``; any other path unchanged."""
    if not path.startswith(REST_PATH + "/"):
        return path
    head, _, last = path.rpartition("/")
    name, colon, verb = last.rpartition(":")
    if not colon or not name or not VERB.fullmatch(verb):
        return path
    return f"{head}/{name}/:{verb}"


BODIES: dict[str, type[WireModel]] = {
    "/message/:send": SendMessageRequest,
    "/message/:stream": SendMessageRequest,
    "/tasks/{task_id}/:cancel": CancelTaskRequest,
    "/tasks/{task_id}/pushNotificationConfigs": TaskPushNotificationConfig,
}
"""The request body of each POST route (relative to ``REST_PATH``, tenant variants alike)."""

QUERIES: dict[str, tuple[type[WireModel], tuple[str, ...]]] = {
    "/tasks": (
        ListTasksRequest,
        (
            "contextId",
            "status",
            "pageSize",
            "pageToken",
            "historyLength",
            "statusTimestampAfter",
            "includeArtifacts",
        ),
    ),
    "/tasks/{task_id}": (GetTaskRequest, ("historyLength",)),
    "/tasks/{task_id}/pushNotificationConfigs": (
        ListTaskPushNotificationConfigsRequest,
        ("pageSize", "pageToken"),
    ),
}
"""The query parameters of each GET route, with the model that defines them."""

STATUS_SCHEMA: JSON = {
    "type": "object",
    "required": ["error"],
    "properties": {
        "error": {
            "type": "object",
            "required": ["code", "status", "message", "details"],
            "properties": {
                "code": {"type": "integer"},
                "status": {"type": "string"},
                "message": {"type": "string"},
                "details": {"type": "array", "items": {"type": "object"}},
            },
        }
    },
}


class RestOpenAPI(JsonRenderPlugin):
    """Litestar's OpenAPI document at ``/schema/openapi.json``, as ``described`` completes it."""

    def __init__(self) -> None:
        super().__init__()
        self._described: JSON | None = None

    def render(self, request: Request[Any, Any, Any], openapi_schema: JSON) -> bytes:
        """The described document (made once: Litestar's document does not change)."""
        if self._described is None:
            self._described = described(openapi_schema)
        return self.render_json(request, self._described)


def described(document: JSON) -> JSON:
    """Litestar's OpenAPI ``document`` with the binding's routes as clients call them.

    Litestar generates the document from the handlers; this renames ``/:verb`` paths to ``:verb``,
    and adds each route's request body and query parameters from the wire models that validate
    them (their pydantic JSON Schemas, under ``components.schemas``), and the Status error body;
    the audit reads get their answers' schemas (``api.audit.describe_audit_paths``).
    """
    document = copy.deepcopy(document)
    schemas: JSON = document.setdefault("components", {}).setdefault("schemas", {})
    schemas["Status"] = STATUS_SCHEMA
    renamed: JSON = {}
    for route, item in document.get("paths", {}).items():
        relative = _relative(route)
        if relative is not None:
            _describe(relative, item, schemas)
        renamed[route.replace("/:", ":")] = item
    document["paths"] = renamed
    describe_audit_paths(document, STATUS_REF)
    return document


def _relative(route: str) -> str | None:
    """The route relative to ``REST_PATH`` without a tenant prefix, or None outside the binding."""
    if not route.startswith(REST_PATH + "/"):
        return None
    relative = route.removeprefix(REST_PATH)
    return relative.removeprefix("/{tenant}") if relative.startswith("/{tenant}/") else relative


def _describe(relative: str, item: JSON, schemas: JSON) -> None:
    model = BODIES.get(relative)
    if model is not None and "post" in item:
        schema = _schema_ref(model, schemas)
        item["post"]["requestBody"] = {
            "required": relative != "/tasks/{task_id}/:cancel",
            "content": {media_type: {"schema": schema} for media_type in REQUEST_MEDIA_TYPES},
        }
    query = QUERIES.get(relative)
    if query is not None and "get" in item:
        query_model, names = query
        properties = _model_schema(query_model, schemas)["properties"]
        parameters = item["get"].setdefault("parameters", [])
        for name in names:
            schema = _without_null(properties[name])
            parameters.append({"name": name, "in": "query", "required": False, "schema": schema})
    for operation in item.values():
        if isinstance(operation, dict) and "responses" in operation:
            answer = {
                "description": "the method's result",
                "content": {"application/json": {"schema": OBJECT}},
            }
            error = {"description": "an A2A error", "content": {"application/json": {"schema": STATUS_REF}}}
            operation["responses"] = {"200": answer, "default": error}


REQUEST_MEDIA_TYPES = ("application/json", "application/a2a+json")
OBJECT: JSON = {"type": "object"}
STATUS_REF: JSON = {"$ref": "#/components/schemas/Status"}


def _without_null(schema: JSON) -> JSON:
    """An optional field's schema without its ``null`` arm: a query parameter is absent, never null."""
    arms = [arm for arm in schema.get("anyOf", []) if arm != {"type": "null"}]
    if len(arms) == 1:
        return {**arms[0], **{k: v for k, v in schema.items() if k not in ("anyOf", "default")}}
    return {k: v for k, v in schema.items() if k != "default"}


REF = "#/components/schemas/{model}"


def _model_schema(model: type[WireModel], schemas: JSON) -> JSON:
    schema = model.model_json_schema(by_alias=True, ref_template=REF)
    schemas.update(schema.pop("$defs", {}))
    return schema


def _schema_ref(model: type[WireModel], schemas: JSON) -> JSON:
    schemas[model.__name__] = _model_schema(model, schemas)
    return {"$ref": REF.format(model=model.__name__)}
