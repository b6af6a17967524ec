"""The audit pages: a task's history as a server-rendered timeline, for a person with a browser.

``/audit/`` searches by task id; ``/audit/tasks/{id}`` shows the task's events (version, time,
actor, type, a readable summary), the A2A ``Task`` as it was after any event (``?version=N``, a
plain link: no script), its run-once side effects, its artifacts and its webhook deliveries. Each
stored file an event or an artifact names (``domain.files``) is a link to the gateway's file route
(``/a2a/files/{task id}/{sha256}``, ``api.files``) with its name and size.
Everything is read from the log (``store.evidence.audit_trail``, ``TaskApplication.task_at``) and the
delivery record (``store.deliveries.records``) at request time, with the verification status of the task's
hash chain and of the signed checkpoint covering it (``store.evidence.task_verification``, with the log's
verifier keys the gateway was given); the templates (``api/templates/audit/``)
escape every value. The pages are tenant-scoped like the A2A methods (``caller_tenant``): with
API keys a browser signs in with HTTP Basic, the key as the password (ADR 0028). Every answer
carries a Content-Security-Policy that allows no script at all.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import quote
from uuid import UUID

from jinja2 import Environment, FileSystemLoader, StrictUndefined, select_autoescape
from litestar import Request, Router, get
from litestar.datastructures import State
from litestar.exceptions import HTTPException
from litestar.params import FromPath
from litestar.plugins.jinja import JinjaTemplateEngine
from litestar.response import Redirect, Template
from litestar.template import TemplateConfig

from api.audit import AuditReads
from api.authentication import BROWSER_PAGE, CALLER, Caller, caller_tenant
from api.config import Injected
from api.errors import A2AError
from api.service import DEFAULT_TENANT
from domain.files import parts_of, stored_file
from domain.task import Task
from store.deliveries import Attempt, Delivery, deliveries_of
from store.evidence import (
    AuditEvent,
    Effect,
    TaskVerification,
    VerifierKey,
    audit_events,
    effects_of,
    verify_task,
)
from store.log import (
    MemoryRunQueueRecorder,
    NoSuchVersionError,
    PostgresRunQueueRecorder,
    TaskApplication,
    TaskNotFoundError,
)
from store.public_form import FILES_PATH, iso_millis, task_to_wire

AUDIT_PATH = "/audit"
log = logging.getLogger(__name__)
TEMPLATES = Path(__file__).parent / "templates"

PAGE_HEADERS = {
    "Content-Security-Policy": (
        "default-src 'none'; style-src 'unsafe-inline'; form-action 'self'; base-uri 'none';"
        " frame-ancestors 'none'"
    ),
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "Cache-Control": "no-store",
}
"""Headers of every audit page: no script runs, nothing is cached or framed."""

PAGE_OPT = {BROWSER_PAGE: True}


@dataclass(frozen=True)
class Timeline:
    """Everything the page of one task shows, read in one go."""

    task: Task
    """The task as it is now."""
    events: list[AuditEvent]
    effects: list[Effect]
    chosen: int
    """The version whose state is shown."""
    state: dict[str, Any]
    """The wire ``Task`` after the event at ``chosen``."""
    deliveries: list[tuple[Delivery, list[Attempt]]] | None
    """``None``: the store keeps no delivery record (memory)."""
    verification: TaskVerification
    """The task's chain and the checkpoint covering it, checked as the page was read."""


class NotShownError(LookupError):
    """A task (or a version of it) this caller cannot be shown; the message says which."""


class UnreadableLogError(Exception):
    """The task's events no longer decode, and its verification failed: the page shows why."""

    def __init__(self, task_id: UUID, verification: TaskVerification, error: Exception) -> None:
        super().__init__(f"the events of task {task_id} cannot be read ({type(error).__name__}: {error})")
        self.task_id = task_id
        self.verification = verification


def template_config() -> TemplateConfig[JinjaTemplateEngine]:
    """The gateway's templates: Jinja2 over ``api/templates``, every value escaped."""
    environment = Environment(
        loader=FileSystemLoader(TEMPLATES),
        autoescape=select_autoescape(default=True, default_for_string=True),
        undefined=StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
    )
    environment.filters["when"] = iso_millis
    environment.filters["as_json"] = _as_json
    environment.filters["stored_files"] = stored_files
    environment.filters["byte_size"] = byte_size
    environment.globals["files_path"] = FILES_PATH
    return TemplateConfig(instance=JinjaTemplateEngine.from_environment(environment))


def audit_pages_router() -> Router:
    """The audit pages under ``/audit``."""
    return Router(path=AUDIT_PATH, route_handlers=[search_page, task_page], include_in_schema=False)


@get("/", opt=PAGE_OPT, sync_to_thread=False)
def search_page(request: Request[object, object, State]) -> Template | Redirect:
    """The search form; with ``?task=ID``, the task's page."""
    tenant = _tenant_query(request)
    task = request.query_params.get("task")
    if task is not None and task.strip():
        target = f"{AUDIT_PATH}/tasks/{quote(task.strip(), safe='')}"
        return Redirect(target + (f"?tenant={quote(tenant, safe='')}" if tenant else ""), status_code=303)
    return _page(request, "audit/search.html", {})


@get("/tasks/{task_id:str}", opt=PAGE_OPT)
async def task_page(
    request: Request[object, object, State], audit: Injected[AuditReads], task_id: FromPath[str]
) -> Template:
    """A task's timeline, with its state after the event at ``?version=N`` (default: the last)."""
    try:
        tenant = caller_tenant(request, _tenant_query(request))
    except A2AError as error:
        return _page(request, "audit/not_found.html", {"wanted": task_id, "reason": error.message}, 400)
    try:
        version = _version_query(request)
        timeline = await asyncio.to_thread(
            read_timeline,
            audit.store,
            task_id,
            tenant=tenant,
            version=version,
            verifier_keys=audit.verifier_keys,
        )
    except NotShownError as error:
        return _page(request, "audit/not_found.html", {"wanted": task_id, "reason": str(error)}, 404)
    except UnreadableLogError as error:
        context = {"task_id": error.task_id, "reason": str(error), "verification": error.verification}
        return _page(request, "audit/unreadable.html", context, 500)
    return _page(request, "audit/task.html", {"timeline": timeline, "tenant": tenant})


def route_error(request: Request[Any, Any, State], error: HTTPException) -> Template:
    """Litestar's refusals under ``/audit`` (no such page, method not allowed) as an HTML page."""
    reason = f"{request.url.path} is no audit page ({error.detail})"
    context = {"reason": reason, "heading": "No such page"}
    return _page(request, "audit/not_found.html", context, error.status_code, headers=error.headers)


def is_audit_path(path: str) -> bool:
    """Whether ``path`` is under the audit pages."""
    return path == AUDIT_PATH or path.startswith(AUDIT_PATH + "/")


def read_timeline(
    store: TaskApplication,
    text: str,
    *,
    tenant: str,
    version: int | None,
    verifier_keys: tuple[VerifierKey, ...] = (),
) -> Timeline:
    """The timeline of the task with the wire id ``text`` if ``tenant`` sees it, else ``NotShownError``.

    The checkpoint covering the task is verified with ``verifier_keys`` (none: it cannot be).

    Raises:
        NotShownError: no such task for ``tenant`` (or expired), or no such version.
        UnreadableLogError: the task's events no longer decode, and its verification failed.
    """
    try:
        task_id = UUID(text)
    except ValueError:
        raise NotShownError(f"{text!r} is not a task id (a task id is a UUID)") from None
    try:
        return _timeline(store, task_id, tenant=tenant, version=version, verifier_keys=verifier_keys)
    except NotShownError:
        raise
    except Exception as error:  # noqa: BLE001 - an event that no longer decodes, if its log was altered
        unreadable = _unreadable(store, task_id, tenant, verifier_keys, error)
    raise unreadable


def _timeline(
    store: TaskApplication,
    task_id: UUID,
    *,
    tenant: str,
    version: int | None,
    verifier_keys: tuple[VerifierKey, ...],
) -> Timeline:
    try:
        task = store.get_visible(task_id, tenant=tenant)
    except TaskNotFoundError as error:  # missing, another tenant's or expired: told apart only by expiry
        raise NotShownError(str(error)) from None
    events = list(store.history(task_id))
    chosen = task.version if version is None else version
    try:
        state = task if chosen == task.version else store.task_at(task_id, chosen)
    except NoSuchVersionError as error:
        raise NotShownError(str(error)) from None
    return Timeline(
        task=task,
        events=audit_events(events),
        effects=effects_of(events),
        chosen=chosen,
        state=task_to_wire(state),
        deliveries=deliveries_of(store, task_id),
        verification=verify_task(store, task_id, verifier_keys),
    )


def _unreadable(
    store: TaskApplication,
    task_id: UUID,
    tenant: str,
    verifier_keys: tuple[VerifierKey, ...],
    error: Exception,
) -> Exception:
    """What to raise when reading the task failed with ``error``: the failed verification, if it failed.

    The tenant is the run queue's (which needs no event decoded), so another tenant's task is still
    not found like a missing one. A task that verifies has an intact log: ``error`` is a fault of
    longhaul's, raised as it is.
    """
    recorder = store.recorder
    assert isinstance(recorder, (PostgresRunQueueRecorder, MemoryRunQueueRecorder))
    if recorder.tenants([task_id]).get(task_id) != tenant:
        return NotShownError(str(TaskNotFoundError(f"task {str(task_id)!r} not found")))
    verification = verify_task(store, task_id, verifier_keys)
    if not verification.failed:
        return error
    log.warning("the log of task %s cannot be read (%r) and does not verify", task_id, error)
    return UnreadableLogError(task_id, verification, error)


def _version_query(request: Request[object, object, State]) -> int | None:
    text = request.query_params.get("version")
    if text is None or not text.strip():
        return None
    try:
        return int(text)
    except ValueError:
        raise NotShownError(f"version {text!r} is not a number: a version is 1 or more") from None


def _tenant_query(request: Request[Any, Any, State]) -> str | None:
    """The ``tenant`` a page names (open dev mode: any; with keys: only the key's own)."""
    return request.query_params.get("tenant") or None


def _page(
    request: Request[Any, Any, State],
    name: str,
    context: dict[str, Any],
    status: int = 200,
    *,
    headers: Mapping[str, str] | None = None,
) -> Template:
    caller = request.scope.get("state", {}).get(CALLER)
    open_mode = isinstance(caller, Caller) and caller.tenant is None
    named = _tenant_query(request)
    common = {
        "open_mode": open_mode,
        "named_tenant": named or "",
        "default_tenant": DEFAULT_TENANT,
        "link_suffix": f"&tenant={quote(named, safe='')}" if named else "",
    }
    return Template(
        template_name=name,
        context={**common, **context},
        status_code=status,
        headers={**(headers or {}), **PAGE_HEADERS},
    )


@dataclass(frozen=True)
class StoredFileLink:
    """A stored file as the page links it: its hash, size, name and media type."""

    sha256: str
    size: int
    filename: str | None
    media_type: str | None


def stored_files(value: Any) -> list[StoredFileLink]:
    """Every stored file's part in ``value`` (an event's fields, an artifact), in order, each once."""
    found: dict[str, StoredFileLink] = {}
    for part in parts_of(value):
        ref = stored_file(part)
        if ref is None or ref.sha256 in found:
            continue
        filename, media_type = part.get("filename"), part.get("mediaType")
        found[ref.sha256] = StoredFileLink(
            ref.sha256,
            ref.size,
            filename if isinstance(filename, str) else None,
            media_type if isinstance(media_type, str) else None,
        )
    return list(found.values())


_UNITS = (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10))


def byte_size(size: int) -> str:
    """A file's size as people read it: ``512 bytes``, ``3.2 KiB``, ``1.0 GiB``."""
    for unit, scale in _UNITS:
        if size >= scale:
            return f"{size / scale:.1f} {unit}"
    return f"{size} byte{'s' if size != 1 else ''}"


def _as_json(value: Any) -> str:
    return json.dumps(value, indent=2, ensure_ascii=False, sort_keys=True, default=str)
