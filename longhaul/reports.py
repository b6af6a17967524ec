"""The commands that report on tasks: history, receipt, deliveries, skills, retrying, and tail (live events).

Each reads (the store, an archive file or NATS), then prints; the logic they call lives in the
store's faces (``store.evidence``, ``store.deliveries``) and the workers.
"""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Iterable
from pathlib import Path
from typing import Any
from uuid import UUID

import nats
from eventsourcing.domain import DomainEventProtocol

from domain.task import Task
from longhaul import tail as tail_consumer
from longhaul import wiring
from longhaul.errors import BadArgumentError, CommandError
from longhaul.local_services import running_up, store_for_reading
from longhaul.settings import Settings
from projections.task_view import open_view
from store.deliveries import Attempt, Delivery, deliveries_of
from store.evidence import (
    ArchiveError,
    audit_events,
    effects_document,
    effects_of,
    events_document,
    read_archive,
    replay,
)
from store.log import MemoryConfig, NoSuchVersionError, TaskApplication, TaskNotFoundError
from store.public_form import dumps, iso, task_state_json
from workers.skill_versions import version_use


def tail(settings: Settings, **options: Any) -> int:
    """Print live events from NATS (``longhaul/tail.py``): at LONGHAUL_NATS_URL, else a running ``up``'s."""
    if settings.nats_url is None:
        running = running_up(settings.data_dir, "nats_url")
        if running is None:
            raise CommandError(
                f"LONGHAUL_NATS_URL is not set and no `longhaul up` runs with data in {settings.data_dir}"
            )
        settings = settings.model_copy(update={"nats_url": running})
    names = wiring.nats_names(settings)
    try:
        return asyncio.run(tail_consumer.run(names, **options))
    except LookupError as error:
        raise CommandError(str(error)) from error
    except BrokenPipeError:
        raise  # the reader left: longhaul.cli ends quietly
    except (TimeoutError, OSError, nats.errors.NoServersError) as error:
        raise CommandError(
            f"cannot reach NATS at {names.url} ({error!r}); check LONGHAUL_NATS_URL"
        ) from error


def history(
    settings: Settings,
    task_id: UUID,
    *,
    as_json: bool,
    archive: Path | None = None,
    at_version: int | None = None,
    effects: bool = False,
) -> int:
    """Print a task's events with their actors, its state after a version, or its effects.

    From the store, or from an archive file (``archive``), with the same output
    (``store.evidence.audit_trail``; the state is ``store.public_form.task_state``).
    """
    if archive is not None:
        tenant, events = _archived_events(archive, task_id)
        task = None if at_version is None else _state_from_events(events, task_id, at_version)
        _print_history(tenant, task_id, events, task, as_json=as_json, effects=effects)
        return 0
    with store_for_reading(settings, "history") as store:
        try:
            tenant = store.get(task_id).tenant
        except TaskNotFoundError:
            raise CommandError(
                f"no task {task_id} in {settings.database_schema}"
                f" (an archived task: longhaul history --archive FILE {task_id})"
            ) from None
        task = None
        if at_version is not None:
            try:
                task = store.task_at(task_id, at_version)
            except NoSuchVersionError as error:
                raise BadArgumentError(f"--at-version {at_version}: {error}") from None
        _print_history(tenant, task_id, store.history(task_id), task, as_json=as_json, effects=effects)
    return 0


def _archived_events(path: Path, task_id: UUID) -> tuple[str, list[DomainEventProtocol[UUID]]]:
    """A task's tenant and events in an archive file, decoded as the store decodes its events."""
    try:
        found = read_archive(path)
    except ArchiveError as error:
        raise CommandError(str(error)) from error
    events = found.tasks.get(task_id)
    if not events:
        raise CommandError(f"no task {task_id} in {path}")
    mapper = TaskApplication(MemoryConfig()).mapper  # the store's transcodings, no database
    return events[0].tenant, [mapper.to_domain_event(e.stored()) for e in events]


def _state_from_events(events: list[DomainEventProtocol[UUID]], task_id: UUID, version: int) -> Task:
    """The task after ``version`` replayed from its events (an archive has no snapshots)."""
    try:
        return replay(events, version)
    except NoSuchVersionError as error:
        raise BadArgumentError(f"--at-version {version}: {error}") from None


def _print_history(
    tenant: str,
    task_id: UUID,
    events: Iterable[DomainEventProtocol[UUID]],
    task: Task | None,
    *,
    as_json: bool,
    effects: bool,
) -> None:
    """The one document (``--json``) or the lines of ``history``, ``--at-version`` or ``--effects``."""
    if task is not None:
        state = task_state_json(task)
        print(dumps(state) if as_json else dumps(state, indent=2))
    elif effects:
        found = effects_of(events)
        if as_json:
            print(dumps(effects_document(task_id, found)))
        elif not found:
            print(f"task {task_id} recorded no run-once side effects")
        for effect in [] if as_json else found:
            print(
                f"v{effect.version:<5} {iso(effect.time)}  {effect.key}  {dumps(effect.to_json()['result'])}"
            )
    elif as_json:
        print(dumps(events_document(task_id, tenant, audit_events(events))))
    else:
        for event in audit_events(events):
            actor = str(event.actor)
            print(
                f"v{event.version:<5} {iso(event.time)}  {event.type:<22} {actor:<28} {dumps(event.fields)}"
            )


def receipt(settings: Settings, task_id: UUID, *, out: Path | None = None) -> int:
    """Print (or write to ``out``) the task's receipt document (``MerkleLog.receipt``)."""
    with store_for_reading(settings, "receipt") as store:
        try:
            store.get(task_id)
        except TaskNotFoundError:
            raise CommandError(f"no task {task_id} in {settings.database_schema}") from None
        merkle_log = store.merkle_log
        assert merkle_log is not None  # store_for_reading refuses a memory store
        found = merkle_log.receipt(task_id)
    if found is None:
        raise CommandError(
            f"no signed checkpoint covers task {task_id} yet: the sequencer signs one every"
            " LONGHAUL_CHECKPOINT_INTERVAL_SECONDS; ask again after the next"
        )
    document = found.to_json()
    if out is None:
        sys.stdout.write(document)
        return 0
    try:
        out.write_text(document, encoding="utf-8")
    except OSError as error:
        raise CommandError(f"cannot write the receipt to {out}: {error.strerror or error}") from None
    print(f"receipt of task {task_id} at version {found.version} written to {out}")
    return 0


def deliveries(settings: Settings, task_id: UUID, *, as_json: bool) -> int:
    """Print every webhook delivery of a task and each of its attempts."""
    with store_for_reading(settings, "deliveries") as store:
        try:
            store.get(task_id)
        except TaskNotFoundError:
            raise CommandError(f"no task {task_id} in {settings.database_schema}") from None
        found = deliveries_of(store, task_id)
        assert found is not None  # store_for_reading refuses a memory store
    if as_json:
        for delivery, attempts in found:
            print(dumps(_delivery_json(delivery, attempts)))
        return 0
    if not found:
        print(f"no webhook deliveries for task {task_id} (it has no push config, or none was due yet)")
    for delivery, attempts in found:
        print(
            f"v{delivery.version:<5} {delivery.event_type:<22} config {delivery.config_id}  {delivery.url}  "
            f"{_delivery_state(delivery)}"
        )
        for attempt in attempts:
            result = str(attempt.http_status) if attempt.http_status is not None else "-"
            error = f"  {attempt.error}" if attempt.error else ""
            print(
                f"       attempt {attempt.attempt:<3} {iso(attempt.started_at)}  {result:>3}  "
                f"{attempt.duration_ms:8.1f} ms  {attempt.outcome}{error}"
            )
    return 0


def _delivery_state(delivery: Delivery) -> str:
    if delivery.state == "pending":
        return f"PENDING after {_attempts(delivery.attempts)}, next at {iso(delivery.next_attempt_at)}"
    when = iso(delivery.finished_at) if delivery.finished_at is not None else "?"
    word = {"delivered": "DELIVERED", "gave_up": "GAVE UP", "refused": "REFUSED"}[delivery.state]
    return f"{word} at {when} after {_attempts(delivery.attempts)}"


def _delivery_json(delivery: Delivery, attempts: list[Attempt]) -> dict[str, Any]:
    return {
        "webhookId": delivery.webhook_id,
        "taskId": str(delivery.task_id),
        "tenant": delivery.tenant,
        "version": delivery.version,
        "type": delivery.event_type,
        "configId": delivery.config_id,
        "url": delivery.url,
        "state": delivery.state,
        "attempts": [
            {
                "attempt": a.attempt,
                "time": iso(a.started_at),
                "durationMs": round(a.duration_ms, 3),
                "httpStatus": a.http_status,
                "error": a.error,
                "outcome": a.outcome,
                "dispatcher": a.dispatcher,
            }
            for a in attempts
        ],
        "createdAt": iso(delivery.created_at),
        "nextAttemptAt": iso(delivery.next_attempt_at) if delivery.state == "pending" else None,
        "finishedAt": iso(delivery.finished_at) if delivery.finished_at is not None else None,
        "lastStatus": delivery.last_status,
        "lastError": delivery.last_error,
    }


def skills(settings: Settings) -> int:
    """Print every skill version with its live task count, and what this release lacks."""
    registry = wiring.build_registry(settings)
    with store_for_reading(settings, "skills") as store:
        uses = version_use(store, registry)
    print(f"{'SKILL':<20} {'VERSION':>7} {'LIVE TASKS':>10}  STATUS")
    newest = {s.name: registry.newest(s.name).version for s in registry.all()}
    for use in uses:
        if not use.registered:
            status = "MISSING from this release: a worker refuses to start"
        elif newest.get(use.skill) == use.version:
            status = "newest: new tasks start here"
        elif use.live_tasks:
            status = "draining"
        else:
            status = "drained: can be removed"
        print(f"{use.skill:<20} {use.version:>7} {use.live_tasks:>10}  {status}")
    return 0


def retrying(settings: Settings, *, limit: int) -> int:
    """Print the working tasks whose current step failed at least once (from the current-task view)."""
    with store_for_reading(settings, "retrying") as store:
        view = open_view(store)
        assert view is not None  # store_for_reading opens PostgreSQL
        rows = view.retrying(limit)
    if not rows:
        print("no task is retrying a step")
        return 0
    print(f"{'TASK':<36}  {'TENANT':<12} {'SKILL':<16} {'FAILED':>6}  {'SINCE':<20}  LAST FAILURE")
    for row in rows:
        since = iso(row.status_timestamp)[:19] + "Z"
        failure = row.last_failure or "-"
        task = f"{row.task_id!s:<36}  {row.tenant:<12} {row.skill:<16}"
        print(f"{task} {row.failed_attempts:>6}  {since:<20}  {failure}")
    if len(rows) == limit:
        print(f"(the {limit} newest; --limit shows more)")
    return 0


def _attempts(count: int) -> str:
    return f"{count} attempt" if count == 1 else f"{count} attempts"
