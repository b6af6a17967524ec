"""The fake IAM service the access-review skill talks to: a test double shipped with longhaul.

It stands in for a real identity and access management API and keeps everything in memory:

- ``GET /systems/{n}/grants``: the grants of system ``n``, always the same list for the same ``n``.
- ``POST /revocations`` with ``Idempotency-Key``: revokes one grant. A repeated key returns the
  first result and applies nothing again (a different body under a used key is refused with 409);
  a missing key is refused with 400.
- ``GET /revocations``: every revocation carried out, oldest first.
- ``GET /revocations/{idempotency_key}``: did the revocation with this key happen? 200 with the
  JSON its ``POST`` answered, 404 if no revocation was made with that key (applies nothing).
- ``GET /calls``: every request received (except reads of ``/calls``, ``/health`` and the list
  ``/revocations``), oldest first, each ``{method, path, task_id, idempotency_key, applied, at}``
  (for ``GET /revocations/{idempotency_key}``, ``idempotency_key`` is the key asked about);
  ``?task_id=`` filters.
- ``GET /health``: ``{"ok": true}``, for readiness checks.

``longhaul fake-iam --port P`` runs it through :func:`serve`; tests can use :func:`running`,
which serves it from a thread on a free port.
"""

from __future__ import annotations

import asyncio
import json
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import uvicorn
from litestar import Litestar, Request, Response, get, post
from litestar.params import FromPath, FromQuery

JSON = dict[str, Any]

GRANTS_PER_SYSTEM = 5
ROLES = ("viewer", "editor", "admin", "deployer", "auditor")
USERS = 50
TASK_HEADER = "x-longhaul-task"
IDEMPOTENCY_HEADER = "idempotency-key"


def grants_for(system: int) -> list[JSON]:
    """The grants of ``system``: a pure function of its number."""
    return [
        {
            "grant_id": f"s{system}-g{i}",
            "system": system,
            "user": f"user{(system * 7 + i * 11) % USERS:02d}",
            "role": ROLES[(system + i) % len(ROLES)],
            "last_used_days": (system * 37 + i * 101) % 400,
        }
        for i in range(1, GRANTS_PER_SYSTEM + 1)
    ]


@dataclass
class IamState:
    """Everything the fake IAM remembers. One lock guards it: handlers never await inside it."""

    calls: list[JSON] = field(default_factory=list)
    revocations: list[JSON] = field(default_factory=list)
    by_key: dict[str, tuple[JSON, JSON]] = field(default_factory=dict)  # key -> (request body, result)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def record(self, request: Request[Any, Any, Any]) -> None:
        """Append one call that applied nothing to the call log."""
        with self.lock:
            self.calls.append(_call(request, applied=False))


def _call(request: Request[Any, Any, Any], *, applied: bool, key: str | None = None) -> JSON:
    """One call log entry; ``key``: the idempotency key it is about, when not in the header."""
    return {
        "method": request.method,
        "path": request.url.path,
        "task_id": request.headers.get(TASK_HEADER),
        "idempotency_key": key if key is not None else request.headers.get(IDEMPOTENCY_HEADER),
        "applied": applied,
        "at": time.time(),
    }


def _error(status: int, message: str) -> Response[JSON]:
    return Response({"error": message}, status_code=status)


def _revocation_body(raw: bytes) -> JSON | str:
    """The validated body of a revocation request, or what is wrong with it."""
    try:
        body = json.loads(raw or b"null")
    except ValueError:
        return "the body is not JSON"
    if not isinstance(body, dict):
        return "the body must be a JSON object {system, grant_id, user}"
    system, grant_id, user = body.get("system"), body.get("grant_id"), body.get("user")
    if not isinstance(system, int) or isinstance(system, bool) or system < 1:
        return "system must be a positive integer"
    if not isinstance(grant_id, str) or not isinstance(user, str):
        return "grant_id and user must be strings"
    grant = next((g for g in grants_for(system) if g["grant_id"] == grant_id), None)
    if grant is None or grant["user"] != user:
        return f"system {system} has no grant {grant_id!r} for user {user!r}"
    return {"system": system, "grant_id": grant_id, "user": user}


def create_app() -> Litestar:
    """A fresh fake IAM with empty memory."""
    state = IamState()

    @get("/health", sync_to_thread=False)
    def health() -> JSON:
        return {"ok": True}

    @get("/systems/{system:int}/grants", sync_to_thread=False)
    def list_grants(request: Request[Any, Any, Any], system: FromPath[int]) -> Response[Any]:
        state.record(request)
        if system < 1:
            return _error(404, f"no system {system}: systems are numbered from 1")
        return Response(grants_for(system))

    @post("/revocations")
    async def revoke(request: Request[Any, Any, Any]) -> Response[JSON]:
        raw = await request.body()
        key = request.headers.get(IDEMPOTENCY_HEADER)
        if not key:
            state.record(request)
            return _error(400, "an Idempotency-Key header is required")
        body = _revocation_body(raw)
        if isinstance(body, str):
            state.record(request)
            return _error(422, body)
        with state.lock:  # look up, apply and log in one critical section: the log order is the truth
            previous = state.by_key.get(key)
            if previous is None:
                result = {
                    "revocation_id": f"rev-{len(state.revocations) + 1}",
                    **body,
                    "status": "revoked",
                    "idempotency_key": key,
                }
                state.by_key[key] = (body, result)
                state.revocations.append(result)
            state.calls.append(_call(request, applied=previous is None))
        if previous is None:
            return Response(result, status_code=201)
        first_body, first_result = previous
        if first_body != body:
            return _error(409, f"Idempotency-Key {key!r} was already used for a different revocation")
        return Response(first_result, status_code=200, headers={"Idempotent-Replayed": "true"})

    @get("/revocations", sync_to_thread=False)
    def list_revocations() -> list[JSON]:
        with state.lock:
            return list(state.revocations)

    @get("/revocations/{idempotency_key:str}", sync_to_thread=False)
    def find_revocation(request: Request[Any, Any, Any], idempotency_key: FromPath[str]) -> Response[JSON]:
        with state.lock:  # looked up and logged together, like a revocation
            previous = state.by_key.get(idempotency_key)
            state.calls.append(_call(request, applied=False, key=idempotency_key))
        if previous is None:
            return _error(404, f"no revocation was made with Idempotency-Key {idempotency_key!r}")
        return Response(previous[1])

    @get("/calls", sync_to_thread=False)
    def list_calls(task_id: FromQuery[str | None] = None) -> list[JSON]:
        with state.lock:
            calls = list(state.calls)
        return [c for c in calls if task_id is None or c["task_id"] == task_id]

    return Litestar(
        route_handlers=[health, list_grants, revoke, list_revocations, find_revocation, list_calls],
        debug=False,
        logging_config=None,  # the process configures logging
    )


def serve(host: str = "127.0.0.1", port: int = 8090) -> None:
    """Run the fake IAM in the foreground until interrupted (``longhaul fake-iam``)."""
    uvicorn.run(create_app(), host=host, port=port, log_level="warning", access_log=False)


@contextmanager
def running(host: str = "127.0.0.1", port: int = 0) -> Iterator[str]:
    """Serve a fresh fake IAM from a background thread; yields its base URL (port 0: a free one)."""
    config = uvicorn.Config(create_app(), host=host, port=port, log_level="warning", access_log=False)
    server = uvicorn.Server(config)
    thread = threading.Thread(target=lambda: asyncio.run(server.serve()), name="fake-iam", daemon=True)
    thread.start()
    deadline = time.monotonic() + 10
    while not server.started:
        if not thread.is_alive() or time.monotonic() > deadline:
            raise RuntimeError(f"the fake IAM did not start on {host}:{port}")
        time.sleep(0.01)
    bound = server.servers[0].sockets[0].getsockname()[1]
    try:
        yield f"http://{host}:{bound}"
    finally:
        server.should_exit = True
        thread.join(timeout=10)
