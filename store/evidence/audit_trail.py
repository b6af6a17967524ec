"""What an auditor reads of a task's log: every event with its actor and a readable line, and the effects.

``audit_events`` turns a task's events (all of them, oldest first, from the store or an archive)
into ``AuditEvent`` values: version, time, type, who caused it (``Actor``), its fields in their
public, JSON-ready form (``store.public_form.event_bodies``: a push config without its secrets) and a one-line
summary. ``effects_of`` lists the run-once side effects with their results. The CLI
(``longhaul history``), the gateway's audit reads (``api/audit.py``) and the timeline page read
through these; the state at a version is ``TaskApplication.task_at``.

Who caused an event is read from the events alone (ADR 0027):

- a worker's events carry the lease epoch they were written under; the ``LeaseGranted`` of that
  epoch names the worker;
- a client's events (``Submitted``, ``InputReceived``, ``PushConfigSet``, ``PushConfigRemoved``,
  and ``Canceled`` by a client) carry the id of the API key it called with (``None`` on an open
  gateway, and in events stored before version 2); the tenant is the task's;
- the sweeper's events are a ``Failed`` with no epoch, a ``Canceled`` by the sweeper, and
  ``Expired``.

An event type this module does not know is a worker's if it carries an epoch, a client's if it
carries a key id, and else the gateway's.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Literal
from uuid import UUID

from eventsourcing.domain import DomainEventProtocol

from domain.task import Task
from store.log.application import replayed
from store.log.errors import NoSuchVersionError
from store.public_form.event_bodies import event_body, iso, json_ready

ActorKind = Literal["client", "worker", "sweeper", "gateway"]

SUMMARY_TEXT = 80
"""The most characters of a message's text a summary quotes."""


@dataclass(frozen=True)
class Actor:
    """Who caused an event: a client (tenant, API key id), a worker (id, lease epoch), the sweeper."""

    kind: ActorKind
    tenant: str | None = None
    key_id: str | None = None
    worker_id: str | None = None
    epoch: int | None = None

    def __str__(self) -> str:
        """``worker w-1 (epoch 2)``, ``client acme (key 3f2a9c1d)``, ``client acme (no key)``, ``sweeper``."""
        if self.kind == "worker":
            return f"worker {self.worker_id or '?'} (epoch {self.epoch})"
        if self.kind == "client":
            key = f"key {self.key_id}" if self.key_id else "no key"
            return f"client {self.tenant} ({key})"
        return self.kind

    def to_json(self) -> dict[str, Any]:
        """``{"kind": ..., "text": str(self)}`` and the fields that are set."""
        found = {"tenant": self.tenant, "keyId": self.key_id, "workerId": self.worker_id, "epoch": self.epoch}
        return {"kind": self.kind, **{k: v for k, v in found.items() if v is not None}, "text": str(self)}


SWEEPER = Actor("sweeper")


@dataclass(frozen=True)
class AuditEvent:
    """One event as an auditor reads it."""

    version: int
    time: datetime
    type: str
    actor: Actor
    fields: dict[str, Any]
    """The event's own fields, JSON-ready (times as ISO 8601 strings), secrets left out."""
    summary: str
    """One readable line: what happened."""

    def to_json(self) -> dict[str, Any]:
        """The event as one JSON object (``longhaul history --json``, ``GET /audit/v1/tasks/{id}/events``)."""
        return {
            "version": self.version,
            "time": iso(self.time),
            "type": self.type,
            "actor": self.actor.to_json(),
            "summary": self.summary,
            "fields": self.fields,
        }


@dataclass(frozen=True)
class Effect:
    """One run-once side effect: its key, its recorded result, when and at which version."""

    key: str
    result: Any
    time: datetime
    version: int

    def to_json(self) -> dict[str, Any]:
        """The effect as one JSON object."""
        return {
            "key": self.key,
            "result": json_ready(self.result),
            "time": iso(self.time),
            "version": self.version,
        }


def audit_events(events: Iterable[DomainEventProtocol[UUID]]) -> list[AuditEvent]:
    """Every event of one task (all of them, oldest first) with its actor, fields and summary."""
    workers: dict[int, str] = {}
    tenant: str | None = None
    found = []
    for event in events:
        if not isinstance(event, Task.Event):
            raise TypeError(f"not an event of a task: {event!r}")
        if isinstance(event, Task.Submitted):
            tenant = event.tenant
        if isinstance(event, Task.LeaseGranted):
            workers[event.epoch] = event.worker
        found.append(
            AuditEvent(
                version=event.originator_version,
                time=event.timestamp,
                type=type(event).__name__,
                actor=actor_of(event, tenant, workers),
                fields=json_ready(event_body(event)),
                summary=summary_of(event),
            )
        )
    return found


def effects_of(events: Iterable[DomainEventProtocol[UUID]]) -> list[Effect]:
    """Every run-once side effect the task recorded, in the order it recorded them."""
    return [
        Effect(key=e.key, result=e.result, time=e.timestamp, version=e.originator_version)
        for e in events
        if isinstance(e, Task.EffectRecorded)
    ]


def events_document(task_id: UUID, tenant: str, events: Iterable[AuditEvent]) -> dict[str, Any]:
    """``{"taskId", "tenant", "events": [...]}``: what ``history --json`` prints and HTTP answers."""
    return {"taskId": str(task_id), "tenant": tenant, "events": [e.to_json() for e in events]}


def effects_document(task_id: UUID, effects: Iterable[Effect]) -> dict[str, Any]:
    """``{"taskId", "effects": [...]}``: what ``history --effects --json`` prints and HTTP answers."""
    return {"taskId": str(task_id), "effects": [e.to_json() for e in effects]}


def replay(events: Iterable[DomainEventProtocol[UUID]], version: int) -> Task:
    """The task after ``version``, replayed from all of its events (an archive's: no snapshots).

    ``TaskApplication.task_at`` answers the same from the store, through its snapshots.

    Raises:
        NoSuchVersionError: ``version`` is not between 1 and the last event's version.
    """
    history = list(events)
    if not history:
        raise ValueError("a task has at least one event")
    last = history[-1].originator_version
    if not 1 <= version <= last:
        raise NoSuchVersionError(history[0].originator_id, version, last)
    task = replayed([e for e in history if e.originator_version <= version])
    assert task is not None
    return task


def actor_of(event: object, tenant: str | None, workers: dict[int, str]) -> Actor:
    """Who caused ``event`` of a task of ``tenant``, given the workers granted each epoch so far."""
    if isinstance(event, Task.Expired) or (isinstance(event, Task.Failed) and event.epoch is None):
        return SWEEPER
    if isinstance(event, Task.Canceled) and event.by == "sweeper":
        return SWEEPER
    epoch = getattr(event, "epoch", None)
    if isinstance(epoch, int):
        return Actor("worker", worker_id=workers.get(epoch), epoch=epoch)
    if hasattr(event, "key_id"):
        return Actor("client", tenant=tenant, key_id=getattr(event, "key_id", None))
    return Actor("gateway")


def summary_of(event: object) -> str:
    """One line saying what ``event`` did (its type's name for a type without a summary)."""
    summary = _SUMMARIES.get(type(event))
    return summary(event) if summary is not None else type(event).__name__


def _asked(event: Any) -> str:
    what = "credentials" if isinstance(event, Task.AuthRequested) else "input"
    return (
        f"asked for {what} at step {event.step}: {_text(event.question)}"
        f" (until {iso(event.deadline)}, then {event.on_deadline})"
    )


def _artifact(event: Any) -> str:
    how = "chunk appended to" if event.append else "added"
    last = "" if event.last_chunk else " (more chunks follow)"
    return f"artifact {event.artifact.get('artifactId')} {how}{last}"


def _ended(event: Any) -> str:
    return f"{type(event).__name__.lower()}: {event.reason}"


_SUMMARIES: dict[type, Callable[[Any], str]] = {
    Task.Submitted: lambda e: f"submitted: skill {e.skill} v{e.skill_version}: {_text(e.message)}",
    Task.LeaseGranted: lambda e: f"lease granted to {e.worker} at epoch {e.epoch} until {iso(e.until)}",
    Task.LeaseExtended: lambda e: f"lease extended until {iso(e.until)}",
    Task.LeaseReleased: lambda e: f"lease released: {e.reason}",
    Task.StepCompleted: lambda e: f"step {e.step} completed; next step {e.step + 1}",
    Task.CheckpointSaved: lambda e: f"checkpoint saved in step {e.step}",
    Task.ProgressReported: lambda e: f"progress: {_text(e.message)}",
    Task.InputRequested: _asked,
    Task.AuthRequested: _asked,
    Task.InputReceived: lambda e: f"answer received: {_text(e.message)}",
    Task.ArtifactChunkAppended: _artifact,
    Task.StepAttemptFailed: lambda e: (
        f"attempt {e.attempt} at step {e.step} by {e.worker} (epoch {e.epoch}) failed: {e.cause}: {e.detail}"
    ),
    Task.EffectStarted: lambda e: f"effect {e.key} started",
    Task.EffectRecorded: lambda e: f"effect {e.key} recorded",
    Task.PushConfigSet: lambda e: f"push config {e.config.get('id')} set: {e.config.get('url')}",
    Task.PushConfigRemoved: lambda e: f"push config {e.config_id} removed",
    Task.Completed: lambda e: "completed" + (f": {_text(e.message)}" if e.message else ""),
    Task.Failed: _ended,
    Task.Canceled: _ended,
    Task.Rejected: _ended,
    Task.Expired: _ended,
}
"""A one-line summary per event type."""


def _text(message: Any) -> str:
    """A wire message's first text part, else its first data part as JSON, cut to ``SUMMARY_TEXT``.

    ``-`` for a message with neither.
    """
    parts = message.get("parts") if isinstance(message, dict) else None
    parts = [part for part in parts if isinstance(part, dict)] if isinstance(parts, list) else []
    texts = [p["text"] for p in parts if isinstance(p.get("text"), str) and p["text"].strip()]
    data = [p["data"] for p in parts if "data" in p]
    if texts:
        line = " ".join(texts[0].split())
    elif data:
        line = json.dumps(json_ready(data[0]), separators=(",", ":"), ensure_ascii=False)
    else:
        return "-"
    return line if len(line) <= SUMMARY_TEXT else line[: SUMMARY_TEXT - 1] + "…"
