"""Audit reads over HTTP (JSON): a task's events with their actors, its state at a version, its effects.

``GET /audit/v1/tasks/{id}/events``, ``GET /audit/v1/tasks/{id}/state?version=N`` and
``GET /audit/v1/tasks/{id}/effects`` answer the documents ``longhaul history --json`` prints
(``store.audit_trail``, ``projections.task_state``). They are authenticated and tenant-scoped like
the A2A methods: the caller's tenant is ``caller_tenant``'s (the key's; on an open gateway the
``tenant`` query parameter, else the default), and the task is loaded as GetTask loads it
(``A2AService.visible_task``), so another tenant's task, or an expired one, is TaskNotFound (404).
Errors are ``google.rpc.Status`` bodies with their HTTP status, as on the HTTP+JSON binding; a
version that is not a whole number from 1 to the task's last is InvalidParams (400) naming
``version``.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import Annotated, Any

from litestar import Request, Response, Router, get
from litestar.datastructures import State
from litestar.exceptions import (
    HTTPException,
    MethodNotAllowedException,
    NotFoundException,
    ValidationException,
)
from litestar.params import FromPath, Parameter

from api.authentication import caller_tenant
from api.errors import (
    A2AError,
    InternalError,
    InvalidParamsError,
    InvalidRequestError,
    MethodNotAllowedError,
    MethodNotFoundError,
)
from api.service import A2AService
from domain.task import Task
from projections.event_json import dumps
from projections.task_state import task_state_json
from store.application import TaskApplication
from store.audit_trail import audit_events, effects_document, effects_of, events_document
from store.errors import NoSuchVersionError

JSON = dict[str, Any]
AnyRequest = Request[Any, Any, State]
PathText = FromPath[str]

AUDIT_PATH = "/audit/v1"
MEDIA_TYPE = "application/json"
VERSION_RULE = "a whole number from 1 to the task's last version"

log = logging.getLogger(__name__)

TenantQuery = Annotated[
    str | None,
    Parameter(
        required=False,
        description="On a gateway without API keys, the tenant to read as; with keys, empty or the key's.",
    ),
]
VersionQuery = Annotated[
    str,
    Parameter(description=f"The task version to show the state after: {VERSION_RULE}."),
]


class AuditReads:
    """The three reads, over the gateway's ``service`` (who sees which task) and ``store`` (the log)."""

    def __init__(self, service: A2AService, store: TaskApplication) -> None:
        self._service = service
        self._store = store

    async def events(self, task_id: str, tenant: str) -> JSON:
        """``{"taskId", "tenant", "events"}``: every event with its actor, fields and summary."""
        task = await self._service.visible_task(task_id, tenant)
        events = await asyncio.to_thread(lambda: audit_events(self._store.history(task.id)))
        return events_document(task.id, task.tenant, events)

    async def state(self, task_id: str, tenant: str, version_text: str) -> JSON:
        """``{"version", "task", "longhaul"}``: the task as it was after ``version``."""
        task = await self._service.visible_task(task_id, tenant)
        version = _version(version_text, task)
        try:
            at = await asyncio.to_thread(self._store.task_at, task.id, version)
        except NoSuchVersionError as error:  # the task grew in between: still not a version it had
            raise _bad_version(str(error)) from None
        return task_state_json(at)

    async def effects(self, task_id: str, tenant: str) -> JSON:
        """``{"taskId", "effects"}``: every run-once side effect with its key, result and time."""
        task = await self._service.visible_task(task_id, tenant)
        effects = await asyncio.to_thread(lambda: effects_of(self._store.history(task.id)))
        return effects_document(task.id, effects)


@get("/tasks/{task_id:str}/events", operation_id="audit_task_events")
async def task_events(request: AnyRequest, task_id: PathText, tenant: TenantQuery = None) -> Response[bytes]:
    """Every event of a task, oldest first: version, time, type, actor, summary and fields."""
    return await _serve(request, tenant, lambda reads, as_tenant: reads.events(task_id, as_tenant))


@get("/tasks/{task_id:str}/state", operation_id="audit_task_state")
async def task_state(
    request: AnyRequest, task_id: PathText, version: VersionQuery, tenant: TenantQuery = None
) -> Response[bytes]:
    """The task as it was after ``version``: the A2A Task then, and longhaul's own fields."""
    return await _serve(request, tenant, lambda reads, as_tenant: reads.state(task_id, as_tenant, version))


@get("/tasks/{task_id:str}/effects", operation_id="audit_task_effects")
async def task_effects(request: AnyRequest, task_id: PathText, tenant: TenantQuery = None) -> Response[bytes]:
    """Every run-once side effect of a task: key, recorded result, time and version."""
    return await _serve(request, tenant, lambda reads, as_tenant: reads.effects(task_id, as_tenant))


def audit_router() -> Router:
    """The audit reads under ``AUDIT_PATH``."""
    return Router(path=AUDIT_PATH, route_handlers=[task_events, task_state, task_effects], tags=["audit"])


_ACTOR: JSON = {
    "type": "object",
    "required": ["kind", "text"],
    "properties": {
        "kind": {"enum": ["client", "worker", "sweeper", "gateway"]},
        "tenant": {"type": "string"},
        "keyId": {"type": "string", "description": "the client's API key id: 8 hex digits of its SHA-256"},
        "workerId": {"type": "string"},
        "epoch": {"type": "integer"},
        "text": {
            "type": "string",
            "description": "e.g. 'worker w-1 (epoch 2)', 'client acme (key 3f2a9c1d)'",
        },
    },
}
_EVENT: JSON = {
    "type": "object",
    "required": ["version", "time", "type", "actor", "summary", "fields"],
    "properties": {
        "version": {"type": "integer", "minimum": 1},
        "time": {"type": "string", "format": "date-time"},
        "type": {"type": "string", "description": "the event type (docs/events.md)"},
        "actor": _ACTOR,
        "summary": {"type": "string"},
        "fields": {"type": "object", "description": "the event's own fields, as docs/events.md lists them"},
    },
}
DOCUMENTS: dict[str, JSON] = {
    "/tasks/{task_id}/events": {
        "type": "object",
        "required": ["taskId", "tenant", "events"],
        "properties": {
            "taskId": {"type": "string"},
            "tenant": {"type": "string"},
            "events": {"type": "array", "items": _EVENT},
        },
    },
    "/tasks/{task_id}/state": {
        "type": "object",
        "required": ["version", "task", "longhaul"],
        "properties": {
            "version": {"type": "integer", "minimum": 1},
            "task": {
                "type": "object",
                "description": "the A2A Task as GetTask answered it after this version",
            },
            "longhaul": {
                "type": "object",
                "description": "lease, step, checkpoint, pause, effects, push config ids",
            },
        },
    },
    "/tasks/{task_id}/effects": {
        "type": "object",
        "required": ["taskId", "effects"],
        "properties": {
            "taskId": {"type": "string"},
            "effects": {
                "type": "array",
                "items": {
                    "type": "object",
                    "required": ["key", "result", "time", "version"],
                    "properties": {
                        "key": {"type": "string"},
                        "result": {},
                        "time": {"type": "string", "format": "date-time"},
                        "version": {"type": "integer", "minimum": 1},
                    },
                },
            },
        },
    },
}
"""The JSON Schema of each read's answer (relative to ``AUDIT_PATH``), for the OpenAPI document."""


def describe_audit_paths(document: JSON, status_ref: JSON) -> None:
    """Give the audit reads of an OpenAPI ``document`` their answers: the read's JSON, or a Status."""
    for route, item in document.get("paths", {}).items():
        schema = DOCUMENTS.get(route.removeprefix(AUDIT_PATH)) if route.startswith(AUDIT_PATH + "/") else None
        if schema is None or "get" not in item:
            continue
        answer = {"description": "the read", "content": {MEDIA_TYPE: {"schema": schema}}}
        error = {
            "description": "a refusal (404 TaskNotFound, 400 InvalidParams, 401): a google.rpc.Status",
            "content": {MEDIA_TYPE: {"schema": status_ref}},
        }
        item["get"]["responses"] = {"200": answer, "default": error}


def audit_route_error(request: AnyRequest, error: HTTPException) -> Response[bytes]:
    """Litestar's own refusals under ``AUDIT_PATH`` (no route, a missing parameter) as Status bodies."""
    if isinstance(error, NotFoundException):
        return _error(MethodNotFoundError(f"no audit route {request.url.path}"))
    if isinstance(error, MethodNotAllowedException):
        allowed = (error.headers or {}).get("allow", "")
        return _error(
            MethodNotAllowedError(
                f"{request.method} is not allowed on {request.url.path}; allowed: {allowed}"
            )
        )
    if isinstance(error, ValidationException):
        return _error(InvalidParamsError(f"invalid params: {error.detail}"))
    return _error(InvalidRequestError(str(error.detail)))


async def _serve(
    request: AnyRequest, tenant: str | None, read: Callable[[AuditReads, str], Awaitable[JSON]]
) -> Response[bytes]:
    """One read as the caller's tenant; never raises (an unexpected failure is a logged 500)."""
    try:
        reads: AuditReads = request.app.state.audit
        return _respond(await read(reads, caller_tenant(request, tenant or None)), 200)
    except A2AError as error:
        return _error(error)
    except Exception:
        log.exception("audit read %s failed", request.url.path)
        return _error(InternalError())


def _version(text: str, task: Task) -> int:
    """``text`` as a version of ``task``, or InvalidParams naming ``version``."""
    try:
        version = int(text.strip())
    except ValueError:
        raise _bad_version(f"{text!r} is not a version: {VERSION_RULE} ({task.version})") from None
    if not 1 <= version <= task.version:
        raise _bad_version(f"task {task.id} has versions 1 to {task.version}; there is no version {version}")
    return version


def _bad_version(reason: str) -> InvalidParamsError:
    return InvalidParamsError.with_violations(f"invalid params: version: {reason}", [("version", reason)])


def _error(error: A2AError) -> Response[bytes]:
    return _respond(error.to_status(), error.http_status)


def _respond(document: JSON, status_code: int) -> Response[bytes]:
    return Response(content=dumps(document).encode(), status_code=status_code, media_type=MEDIA_TYPE)
