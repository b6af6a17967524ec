"""Audit reads over HTTP (JSON): a task's events with their actors, its state at a version, its effects.

``GET /audit/v1/tasks/{id}/events``, ``GET /audit/v1/tasks/{id}/state?version=N`` and
``GET /audit/v1/tasks/{id}/effects`` answer the documents ``longhaul history --json`` prints
(``store.evidence.audit_trail``, ``store.public_form.task_state``). They are authenticated and
tenant-scoped like the A2A methods: the caller's tenant is ``caller_tenant``'s (the key's; on an open
gateway the ``tenant`` query parameter, else the default), and the task is loaded as GetTask loads it
(``A2AService.visible_task``), so another tenant's task, or an expired one, is TaskNotFound (404).
Errors are ``google.rpc.Status`` bodies with their HTTP status, as on the HTTP+JSON binding; a
version that is not a whole number from 1 to the task's last is InvalidParams (400) naming
``version``.

``GET /audit/v1/tasks/{id}/receipt`` answers the task's receipt (``store.evidence.receipts``: the latest
signed checkpoint and the inclusion proof of the task's last event it covers), scoped the same
way; while no signed checkpoint covers the task it is NOT_CHECKPOINTED (404). The log's public
side needs no key: ``GET /audit/v1/log-key`` answers its verifier keys, one a line, and
``GET /audit/v1/checkpoints/latest`` the latest signed checkpoint note, for auditors and
witnesses (both ``text/plain``; NO_VERIFIER_KEY or NO_CHECKPOINT, 404, when there is none).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
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

from api.authentication import PUBLIC, caller_tenant
from api.config import Injected
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
from store.evidence import VerifierKey, audit_events, effects_document, effects_of, events_document
from store.log import NoSuchVersionError, TaskApplication
from store.public_form import dumps, task_state_json

JSON = dict[str, Any]
AnyRequest = Request[Any, Any, State]
PathText = FromPath[str]

AUDIT_PATH = "/audit/v1"
MEDIA_TYPE = "application/json"
TEXT_MEDIA_TYPE = "text/plain"
"""Litestar adds the ``charset=utf-8``."""
CHECKPOINT_INTERVAL_SETTING = "LONGHAUL_CHECKPOINT_INTERVAL_SECONDS"
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


@dataclass(frozen=True)
class Document:
    """A read's answer written already: its text and media type (a receipt, keys, a note)."""

    text: str
    media_type: str


class NotCheckpointedError(A2AError):
    """No signed checkpoint covers the task yet, or the store keeps no Merkle log."""

    reason, http_status, grpc_status = "NOT_CHECKPOINTED", 404, "NOT_FOUND"


class NoVerifierKeyError(A2AError):
    """The gateway knows no verifier key of the log."""

    reason, http_status, grpc_status = "NO_VERIFIER_KEY", 404, "NOT_FOUND"
    default_message = (
        "this gateway knows no verifier key of the log: set LONGHAUL_AUDIT_KEY_FILE or"
        " LONGHAUL_AUDIT_VERIFIER_KEYS"
    )


class NoCheckpointError(A2AError):
    """No checkpoint was signed yet, or the store keeps no Merkle log."""

    reason, http_status, grpc_status = "NO_CHECKPOINT", 404, "NOT_FOUND"


class AuditReads:
    """The reads, over the gateway's ``service`` (who sees which task), ``store`` (the log) and keys.

    The gateway injects them by name as ``audit`` into the audit reads and pages (``api.app``).

    ``verifier_keys`` are the log's verifier keys (``wiring.audit_verifier_keys``): the current
    one first, then those of earlier keys.
    """

    def __init__(
        self, service: A2AService, store: TaskApplication, verifier_keys: tuple[VerifierKey, ...] = ()
    ) -> None:
        self._service = service
        self._store = store
        self.verifier_keys = verifier_keys

    @property
    def store(self) -> TaskApplication:
        """The log the reads are of."""
        return self._store

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
        state = task_state_json(at)
        state["task"] = await self._service.files.public(state["task"], task.id)  # as GetTask shows it
        return state

    async def effects(self, task_id: str, tenant: str) -> JSON:
        """``{"taskId", "effects"}``: every run-once side effect with its key, result and time."""
        task = await self._service.visible_task(task_id, tenant)
        effects = await asyncio.to_thread(lambda: effects_of(self._store.history(task.id)))
        return effects_document(task.id, effects)

    async def receipt(self, task_id: str, tenant: str) -> Document:
        """The task's receipt document (``Receipt.to_json``), or NotCheckpointed."""
        task = await self._service.visible_task(task_id, tenant)
        merkle_log = self._store.merkle_log
        if merkle_log is None:
            raise NotCheckpointedError("this store keeps no Merkle log (LONGHAUL_STORE=memory): no receipts")
        found = await asyncio.to_thread(merkle_log.receipt, task.id)
        if found is None:
            raise NotCheckpointedError(
                f"no signed checkpoint covers task {task.id} yet: the sequencer signs one every"
                f" {CHECKPOINT_INTERVAL_SETTING}"
            )
        return Document(found.to_json(), MEDIA_TYPE)

    def log_key(self) -> Document:
        """The log's verifier keys, one a line, the current one first."""
        if not self.verifier_keys:
            raise NoVerifierKeyError()
        return Document("".join(f"{key}\n" for key in self.verifier_keys), TEXT_MEDIA_TYPE)

    async def latest_checkpoint(self) -> Document:
        """The latest signed checkpoint note, verbatim."""
        merkle_log = self._store.merkle_log
        latest = None if merkle_log is None else await asyncio.to_thread(merkle_log.latest_checkpoint)
        if latest is None:
            raise NoCheckpointError(
                "no checkpoint is signed yet"
                if merkle_log is not None
                else "this store keeps no Merkle log (LONGHAUL_STORE=memory): no checkpoints"
            )
        return Document(latest.note, TEXT_MEDIA_TYPE)


@get("/tasks/{task_id:str}/events", operation_id="audit_task_events")
async def task_events(
    request: AnyRequest, audit: Injected[AuditReads], task_id: PathText, tenant: TenantQuery = None
) -> Response[bytes]:
    """Every event of a task, oldest first: version, time, type, actor, summary and fields."""
    return await _serve(request, audit, tenant, lambda reads, as_tenant: reads.events(task_id, as_tenant))


@get("/tasks/{task_id:str}/state", operation_id="audit_task_state")
async def task_state(
    request: AnyRequest,
    audit: Injected[AuditReads],
    task_id: PathText,
    version: VersionQuery,
    tenant: TenantQuery = None,
) -> Response[bytes]:
    """The task as it was after ``version``: the A2A Task then, and longhaul's own fields."""
    return await _serve(
        request, audit, tenant, lambda reads, as_tenant: reads.state(task_id, as_tenant, version)
    )


@get("/tasks/{task_id:str}/effects", operation_id="audit_task_effects")
async def task_effects(
    request: AnyRequest, audit: Injected[AuditReads], task_id: PathText, tenant: TenantQuery = None
) -> Response[bytes]:
    """Every run-once side effect of a task: key, recorded result, time and version."""
    return await _serve(request, audit, tenant, lambda reads, as_tenant: reads.effects(task_id, as_tenant))


@get("/tasks/{task_id:str}/receipt", operation_id="audit_task_receipt")
async def task_receipt(
    request: AnyRequest, audit: Injected[AuditReads], task_id: PathText, tenant: TenantQuery = None
) -> Response[bytes]:
    """The task's receipt: the latest signed checkpoint and the inclusion proof of its last event in it."""
    return await _serve(request, audit, tenant, lambda reads, as_tenant: reads.receipt(task_id, as_tenant))


@get("/log-key", operation_id="audit_log_key", opt={PUBLIC: True})
async def log_key(request: AnyRequest, audit: Injected[AuditReads]) -> Response[bytes]:
    """The log's verifier keys, one a line (the current one first); no key needed."""

    async def read(reads: AuditReads, _: str) -> Document:
        return reads.log_key()

    return await _serve(request, audit, None, read, public=True)


@get("/checkpoints/latest", operation_id="audit_latest_checkpoint", opt={PUBLIC: True})
async def latest_checkpoint(request: AnyRequest, audit: Injected[AuditReads]) -> Response[bytes]:
    """The latest signed checkpoint (a C2SP signed note), for witnesses; no key needed."""
    return await _serve(request, audit, None, lambda reads, _: reads.latest_checkpoint(), public=True)


def audit_router() -> Router:
    """The audit reads under ``AUDIT_PATH``."""
    return Router(
        path=AUDIT_PATH,
        route_handlers=[task_events, task_state, task_effects, task_receipt, log_key, latest_checkpoint],
        tags=["audit"],
    )


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
    "/tasks/{task_id}/receipt": {
        "type": "object",
        "description": "a longhaul-receipt/v1 document (docs/audit.md, Receipts)",
        "required": ["format", "leaf", "leaf_index", "inclusion_proof", "checkpoint"],
        "properties": {
            "format": {"const": "longhaul-receipt/v1"},
            "leaf": {
                "type": "object",
                "required": ["task_id", "version", "chain_hash"],
                "properties": {
                    "task_id": {"type": "string", "format": "uuid"},
                    "version": {"type": "integer", "minimum": 1},
                    "chain_hash": {"type": "string", "description": "base64 of 32 bytes"},
                },
            },
            "leaf_index": {"type": "integer", "minimum": 0},
            "inclusion_proof": {"type": "array", "items": {"type": "string"}},
            "checkpoint": {"type": "string", "description": "the signed checkpoint note, verbatim"},
        },
    },
}
"""The JSON Schema of each read's answer (relative to ``AUDIT_PATH``), for the OpenAPI document."""

TEXTS: dict[str, str] = {
    "/log-key": "the log's verifier keys (name+keyID+base64), one a line, the current one first",
    "/checkpoints/latest": "the latest signed checkpoint: a C2SP tlog-checkpoint in a signed note",
}
"""What each plain-text read answers (relative to ``AUDIT_PATH``), for the OpenAPI document."""


def describe_audit_paths(document: JSON, status_ref: JSON) -> None:
    """Give the audit reads of an OpenAPI ``document`` their answers: the read's JSON, or a Status."""
    for route, item in document.get("paths", {}).items():
        if not route.startswith(AUDIT_PATH + "/") or "get" not in item:
            continue
        relative = route.removeprefix(AUDIT_PATH)
        if relative in DOCUMENTS:
            answer = {"description": "the read", "content": {MEDIA_TYPE: {"schema": DOCUMENTS[relative]}}}
        elif relative in TEXTS:
            answer = {
                "description": TEXTS[relative],
                "content": {"text/plain": {"schema": {"type": "string"}}},
            }
        else:
            continue
        error = {
            "description": "a refusal (404 TaskNotFound or NotCheckpointed, 400 InvalidParams, 401):"
            " a google.rpc.Status",
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
    request: AnyRequest,
    reads: AuditReads,
    tenant: str | None,
    read: Callable[[AuditReads, str], Awaitable[JSON | Document]],
    *,
    public: bool = False,
) -> Response[bytes]:
    """One read as the caller's tenant (``public``: no tenant); never raises (a failure is a logged 500).

    A read's JSON is answered as ``MEDIA_TYPE``, a written ``Document`` as it is.
    """
    try:
        answer = await read(reads, "" if public else caller_tenant(request, tenant or None))
        if isinstance(answer, Document):
            return Response(content=answer.text.encode(), status_code=200, media_type=answer.media_type)
        return _respond(answer, 200)
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
