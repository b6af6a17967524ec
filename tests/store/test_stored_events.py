"""Events and snapshots stored by earlier code still load: the guard that no renamed event class,
changed field or new class version makes a stored row unreadable.

``fixtures/stored_events_v0.json`` holds the rows that commit e584b81 wrote for five tasks (every
event type, a snapshot of the first task at its last version) and a summary of each task as that
code loaded it. The rows go into a fresh store verbatim; every task must load to the same summary,
from its events alone and through the snapshot.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any
from uuid import UUID

import pytest
from eventsourcing.application import project_aggregate
from eventsourcing.persistence import StoredEvent

from domain.states import TaskState
from domain.task import Pause, Task
from store.log.application import TaskApplication

FIXTURE = json.loads((Path(__file__).parent / "fixtures" / "stored_events_v0.json").read_text())
EXPECTED: dict[str, dict[str, Any]] = FIXTURE["expected"]
SNAPSHOTTED = UUID(int=1)
FAILED_BY_A_STEP, FAILED_BY_THE_SWEEPER = UUID(int=2), UUID(int=5)
START = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)
"""The fixture's tasks were submitted at ``START``; each later command one second on (``t(s)``)."""


def _rows(kind: str) -> list[StoredEvent]:
    return [
        StoredEvent(
            originator_id=UUID(row["originator_id"]),
            originator_version=row["originator_version"],
            topic=row["topic"],
            state=row["state"].encode(),
        )
        for row in FIXTURE[kind]
    ]


def _insert(store: TaskApplication, *, events: bool = True, snapshots: bool = True) -> None:
    if events:
        store.recorder.insert_events(_rows("events"))
    if snapshots:
        assert store.snapshots is not None
        store.snapshots.recorder.insert_events(_rows("snapshots"))


def summary(task: Task) -> dict[str, Any]:
    """What the fixture's generator recorded of each task (``make_stored_events_v0.py.txt``)."""
    return {
        "version": task.version,
        "state": str(task.state),
        "tenant": task.tenant,
        "context_id": task.context_id,
        "skill": task.skill,
        "skill_version": task.skill_version,
        "next_step": task.next_step,
        "checkpoint": task.checkpoint,
        "effects": task.effects,
        "artifacts": task.artifacts,
        "lease_epoch": task.lease_epoch,
        "lease_owner": task.lease_owner,
        "expired": task.expired,
        "history": len(task.history),
        "push_configs": sorted(task.push_configs),
        "status_text": (task.status_message or {}).get("parts", [{}])[0].get("text"),
    }


def test_the_fixture_is_the_one_written_by_the_previous_code() -> None:
    assert FIXTURE["written_by"] == "e584b81"
    assert (len(FIXTURE["events"]), len(FIXTURE["snapshots"]), len(EXPECTED)) == (34, 1, 5)
    assert {row["originator_id"] for row in FIXTURE["snapshots"]} == {str(SNAPSHOTTED)}


@pytest.mark.parametrize("with_snapshot", [False, True], ids=["events", "events+snapshot"])
def test_every_stored_task_loads_as_it_was(store: TaskApplication, with_snapshot: bool) -> None:
    _insert(store, snapshots=with_snapshot)

    for task_id, expected in EXPECTED.items():
        task = store.get(UUID(task_id))

        assert summary(task) == expected, task_id
        assert task.pause is None
        assert task.is_terminal


def test_get_many_loads_every_stored_task_as_it_was(store: TaskApplication) -> None:
    _insert(store)

    tasks = store.get_many([UUID(task_id) for task_id in EXPECTED])

    assert {str(task_id): summary(task) for task_id, task in tasks.items()} == EXPECTED


def test_the_stored_snapshot_alone_rebuilds_its_task(store: TaskApplication) -> None:
    _insert(store, events=False)

    task = store.get(SNAPSHOTTED)  # no events stored: only the snapshot can have built it

    assert summary(task) == EXPECTED[str(SNAPSHOTTED)]
    assert task.created_on == START
    assert task.modified_on == START + timedelta(seconds=100)
    assert task.status_timestamp == START + timedelta(seconds=19)
    assert task.pause is None


def test_every_stored_event_decodes_as_its_class(store: TaskApplication) -> None:
    _insert(store, snapshots=False)

    for task_id in EXPECTED:
        rows = [r for r in FIXTURE["events"] if r["originator_id"] == task_id]
        events = list(store.history(UUID(task_id)))

        assert [f"domain.task:{type(e).__qualname__}" for e in events] == [r["topic"] for r in rows]
        assert [e.originator_version for e in events] == list(range(1, len(rows) + 1))


def test_version_1_failed_events_load_with_no_epoch(store: TaskApplication) -> None:
    _insert(store, snapshots=False)

    for task_id in (FAILED_BY_A_STEP, FAILED_BY_THE_SWEEPER):
        (failed,) = [e for e in store.history(task_id) if isinstance(e, Task.Failed)]

        assert failed.epoch is None  # version 1 did not record it, even for a holder
        assert failed.message is not None


def test_version_1_pause_events_resume_at_the_next_step(store: TaskApplication) -> None:
    _insert(store, snapshots=False)

    asked = [e for e in store.history(SNAPSHOTTED) if isinstance(e, Task.InputRequested | Task.AuthRequested)]

    assert [(type(e).__name__, e.step, e.resume_step) for e in asked] == [
        ("InputRequested", 1, 2),
        ("AuthRequested", 2, 2),
    ]


def test_a_stored_task_loads_at_every_version(store: TaskApplication) -> None:
    """Each version replays; the paused ones hold a typed ``Pause`` built from v1 pause events."""
    _insert(store, snapshots=False)
    for task_id, expected in EXPECTED.items():
        for version in range(1, expected["version"] + 1):
            assert store.get(UUID(task_id), version=version).version == version

    paused = store.get(FAILED_BY_THE_SWEEPER, version=3)
    asked = store.get(SNAPSHOTTED, version=10)
    asked_again = store.get(SNAPSHOTTED, version=15)

    assert (paused.state, asked.state, asked_again.state) == (
        TaskState.INPUT_REQUIRED,
        TaskState.INPUT_REQUIRED,
        TaskState.AUTH_REQUIRED,
    )
    assert paused.pause == Pause(deadline=START + timedelta(seconds=60), on_deadline="fail")
    assert asked.pause == Pause(deadline=START + timedelta(days=1), on_deadline="fail")
    assert asked_again.pause == Pause(deadline=START + timedelta(hours=1), on_deadline="cancel")
    assert (asked.next_step, asked_again.next_step) == (2, 2)


def test_a_version_1_snapshot_of_a_paused_task_loads_through_the_upcaster(store: TaskApplication) -> None:
    """A snapshot as the previous code wrote it for a paused task, whose pause was a dict.

    The task's first three events are left out of the store, so only the snapshot (at version 3)
    can build it; the stored v1 ``Failed`` follows.
    """
    rows = [
        row
        for row in _rows("events")
        if not (row.originator_id == FAILED_BY_THE_SWEEPER and row.originator_version <= 3)
    ]
    store.recorder.insert_events(rows)
    first_three = [
        store.mapper.to_domain_event(row)
        for row in _rows("events")
        if row.originator_id == FAILED_BY_THE_SWEEPER and row.originator_version <= 3
    ]
    paused: Task | None = project_aggregate(None, first_three)
    assert paused is not None
    state = {k: v for k, v in vars(paused).items() if k not in ("_id", "_version", "_pending_events")}
    state["pause"] = {"deadline": START + timedelta(seconds=60), "on_deadline": "fail"}  # no class_version
    body = {"timestamp": START + timedelta(seconds=70), "topic": "domain.task:Task", "state": state}
    assert store.snapshots is not None
    encoded = store.snapshots.mapper.transcoder.encode(body)
    assert b'"pause":{"deadline":{"_type_":"datetime_iso"' in encoded, "the shape e584b81 stored"
    store.snapshots.recorder.insert_events(
        [StoredEvent(FAILED_BY_THE_SWEEPER, 3, "eventsourcing.domain:Snapshot", encoded)]
    )

    from_snapshot = store.get(FAILED_BY_THE_SWEEPER, version=3)
    at_the_end = store.get(FAILED_BY_THE_SWEEPER)

    assert from_snapshot.pause == Pause(deadline=START + timedelta(seconds=60), on_deadline="fail")
    assert vars(from_snapshot) == vars(paused)
    assert summary(at_the_end) == EXPECTED[str(FAILED_BY_THE_SWEEPER)]
    assert at_the_end.pause is None
