"""A task's events as an auditor reads them: who caused each, what it changed, its side effects.

The issue 9 contract of the audit reads (``Actor``, ``AuditEvent``, ``Effect``, ``audit_events``,
``effects_of``), shared by ``longhaul history``, the HTTP audit reads and the timeline page. This
version is the timeline branch's minimal one: the actor is told from the log alone (a worker by
the epoch of its lease, as granted by the task's ``LeaseGranted`` events; a client for what a
client sends; the sweeper for deadlines and expiry).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Literal
from uuid import UUID

from eventsourcing.domain import DomainEventProtocol

from domain.task import Task

ActorKind = Literal["client", "worker", "sweeper", "gateway"]

ENVELOPE_FIELDS = ("originator_id", "originator_version", "timestamp", "originator_topic")
SECRET_CONFIG_MEMBERS = ("token",)


@dataclass(frozen=True)
class Actor:
    """Who caused an event."""

    kind: ActorKind
    tenant: str | None = None
    key_id: str | None = None
    worker_id: str | None = None
    epoch: int | None = None

    def __str__(self) -> str:
        if self.kind == "worker":
            name = f"worker {self.worker_id}" if self.worker_id else "worker"
            return f"{name} (epoch {self.epoch})" if self.epoch is not None else name
        if self.kind == "client":
            name = f"client {self.tenant}" if self.tenant else "client"
            return f"{name} (key {self.key_id})" if self.key_id else name
        return self.kind


@dataclass(frozen=True)
class AuditEvent:
    """One event as an auditor reads it: ``fields`` are JSON-ready, ``summary`` one readable line."""

    version: int
    time: datetime
    type: str
    actor: Actor
    fields: dict[str, Any]
    summary: str


@dataclass(frozen=True)
class Effect:
    """A run-once side effect: its key, its recorded result, when and at which version."""

    key: str
    result: Any
    time: datetime
    version: int


def audit_events(events: Iterable[DomainEventProtocol[UUID]]) -> list[AuditEvent]:
    """Every event of one task, oldest first, with its actor, JSON-ready fields and summary."""
    audited: list[AuditEvent] = []
    tenant: str | None = None
    workers: dict[int, str] = {}
    for event in events:
        if isinstance(event, Task.Submitted):
            tenant = event.tenant
        if isinstance(event, Task.LeaseGranted):
            workers[event.epoch] = event.worker
        audited.append(
            AuditEvent(
                version=event.originator_version,
                time=event.timestamp,  # type: ignore[attr-defined]
                type=type(event).__name__,
                actor=_actor(event, tenant, workers),
                fields=_fields(event),
                summary=_summary(event),
            )
        )
    return audited


def effects_of(events: Iterable[DomainEventProtocol[UUID]]) -> list[Effect]:
    """Every run-once side effect the task recorded, in the order they were recorded."""
    return [
        Effect(key=e.key, result=e.result, time=e.timestamp, version=e.originator_version)
        for e in events
        if isinstance(e, Task.EffectRecorded)
    ]


def _actor(event: object, tenant: str | None, workers: dict[int, str]) -> Actor:
    if isinstance(event, Task.Submitted | Task.InputReceived | Task.PushConfigSet | Task.PushConfigRemoved):
        return Actor(kind="client", tenant=tenant)
    if isinstance(event, Task.Expired):
        return Actor(kind="sweeper")
    epoch = getattr(event, "epoch", None)
    if isinstance(epoch, int):
        return Actor(kind="worker", worker_id=workers.get(epoch), epoch=epoch)
    if isinstance(event, Task.Canceled) and event.reason == "canceled by the client":
        return Actor(kind="client", tenant=tenant)
    return Actor(kind="sweeper")  # a Failed or Canceled without a lease: a pause past its deadline


def _fields(event: object) -> dict[str, Any]:
    body = {k: _json_ready(v) for k, v in vars(event).items() if k not in ENVELOPE_FIELDS}
    if isinstance(event, Task.PushConfigSet):  # the webhook's secrets stay in the log, not in reads
        config = {k: v for k, v in body["config"].items() if k not in SECRET_CONFIG_MEMBERS}
        if isinstance(config.get("authentication"), dict):
            config["authentication"] = {
                k: v for k, v in config["authentication"].items() if k != "credentials"
            }
        body["config"] = config
    return body


def _json_ready(value: Any) -> Any:
    if isinstance(value, datetime):
        return value.isoformat().replace("+00:00", "Z")
    if isinstance(value, UUID):
        return str(value)
    if isinstance(value, dict):
        return {str(k): _json_ready(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_json_ready(v) for v in value]
    if hasattr(value, "value") and isinstance(value.value, str):  # an enum (TaskState, ...)
        return value.value
    return value


def _text(message: Any) -> str:
    """The text parts of a message (or a plain string), joined."""
    if isinstance(message, str):
        return message
    if not isinstance(message, dict):
        return ""
    parts = message.get("parts", [])
    return " ".join(str(p["text"]) for p in parts if isinstance(p, dict) and "text" in p)


def _summary(event: object) -> str:  # noqa: PLR0911, PLR0912 - one line per event type
    if isinstance(event, Task.Submitted):
        return f"submitted to {event.skill} v{event.skill_version}: {_text(event.message)!r}"
    if isinstance(event, Task.LeaseGranted):
        return f"lease {event.epoch} granted to {event.worker}"
    if isinstance(event, Task.LeaseExtended):
        return f"lease {event.epoch} extended"
    if isinstance(event, Task.LeaseReleased):
        return f"lease {event.epoch} released: {event.reason}"
    if isinstance(event, Task.StepCompleted):
        return f"step {event.step} completed"
    if isinstance(event, Task.CheckpointSaved):
        return f"step {event.step} saved a checkpoint"
    if isinstance(event, Task.ProgressReported):
        return f"progress: {_text(event.message)}"
    if isinstance(event, Task.InputRequested | Task.AuthRequested):
        kind = "credentials" if isinstance(event, Task.AuthRequested) else "input"
        until = event.deadline.isoformat(timespec="milliseconds").replace("+00:00", "Z")
        return f"asked for {kind} until {until}: {_text(event.question)}"
    if isinstance(event, Task.InputReceived):
        return f"answer received: {_text(event.message)!r}"
    if isinstance(event, Task.ArtifactChunkAppended):
        name = event.artifact.get("name") or event.artifact.get("artifactId")
        return f"artifact {name}: {'a chunk appended' if event.append else 'written'}"
    if isinstance(event, Task.EffectRecorded):
        return f"side effect {event.key} recorded"
    if isinstance(event, Task.PushConfigSet):
        return f"push config {event.config.get('id')} set"
    if isinstance(event, Task.PushConfigRemoved):
        return f"push config {event.config_id} removed"
    if isinstance(event, Task.Completed):
        return f"completed: {_text(event.message)}" if event.message else "completed"
    if isinstance(event, Task.Failed | Task.Canceled | Task.Rejected):
        return f"{type(event).__name__.lower()}: {event.reason}"
    if isinstance(event, Task.Expired):
        return f"expired: {event.reason}"
    return type(event).__name__
