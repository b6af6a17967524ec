"""What the log and the snapshots hold: event topics and class versions, the initial state from
``Submitted``, and the upcasters that keep version-1 events and snapshots readable.

The stored rows of the previous code are loaded in ``tests/store/test_stored_events.py``; here the
same mapper and transcoder run on an in-memory store.
"""

from __future__ import annotations

import dataclasses
import inspect
from datetime import datetime, timedelta
from typing import Any

import pytest
from eventsourcing.domain import Snapshot
from eventsourcing.persistence import StoredEvent
from eventsourcing.utils import get_topic, resolve_topic

from domain.states import TaskState
from domain.task import Pause, Task
from tests.domain.support import (
    LATER,
    PAUSE,
    TASK_ID,
    Command,
    MemoryStore,
    ask,
    at,
    expire_pause,
    fail,
    given,
    grant,
    step,
    submit,
)

CLASS_VERSIONS = {
    "Submitted": 2,
    "LeaseGranted": 1,
    "LeaseExtended": 1,
    "LeaseReleased": 1,
    "StepCompleted": 1,
    "CheckpointSaved": 1,
    "ProgressReported": 1,
    "InputRequested": 2,
    "AuthRequested": 2,
    "InputReceived": 2,
    "ArtifactChunkAppended": 1,
    "EffectStarted": 1,
    "EffectRecorded": 1,
    "StepAttemptFailed": 1,
    "PushConfigSet": 2,
    "PushConfigRemoved": 2,
    "Completed": 1,
    "Failed": 2,
    "Canceled": 2,
    "Rejected": 1,
    "Expired": 1,
}
"""Every event the log may hold, by class name, with its current class version."""

ENVELOPE = {"originator_id", "originator_version", "timestamp", "originator_topic"}


def _recordable_event_classes() -> dict[str, type[Task.Event]]:
    return {
        name: value
        for name, value in vars(Task).items()
        if isinstance(value, type)
        and issubclass(value, Task.Event)
        and name not in ("Event", "Created")
        and not name.startswith("_")
    }


def _comparable(task: Task) -> dict[str, Any]:
    return {k: v for k, v in vars(task).items() if k != "_pending_events"}


def _with_version_1_state(store: MemoryStore, event: Any, change: dict[str, Any]) -> StoredEvent:
    """``event`` stored as version 1 of its class stored it: no ``class_version``, ``change`` applied."""
    stored = store.mapper.to_stored_event(event)
    state = store.mapper.transcoder.decode(stored.state)
    assert state.pop("class_version") == 2
    for key, value in change.items():
        if value is dataclasses.MISSING:
            del state[key]
        else:
            state[key] = value
    return dataclasses.replace(stored, state=store.mapper.transcoder.encode(state))


# ------------------------------------------------------------------------------ topics


def test_every_event_keeps_its_topic_and_class_version() -> None:
    events = _recordable_event_classes()

    assert set(events) == set(CLASS_VERSIONS), "a new or renamed event: is its topic new on purpose?"
    for name, event_class in events.items():
        topic = f"domain.task:Task.{name}"
        assert get_topic(event_class) == topic
        assert resolve_topic(topic) is event_class
        assert getattr(event_class, "class_version", 1) == CLASS_VERSIONS[name], name


def test_the_shared_bases_are_not_events_of_the_log() -> None:
    assert issubclass(Task.InputRequested, Task._PauseRequested)
    assert issubclass(Task.AuthRequested, Task._PauseRequested)
    for ended in (Task.Completed, Task.Failed, Task.Canceled, Task.Rejected):
        assert issubclass(ended, Task._Ended)
    assert not {"_PauseRequested", "_Ended"} & set(CLASS_VERSIONS)


def test_the_pause_events_share_one_shape() -> None:
    def fields(cls: type) -> list[str]:
        return [f.name for f in dataclasses.fields(cls)]

    assert fields(Task.InputRequested) == fields(Task.AuthRequested)
    assert (Task.InputRequested.enters, Task.AuthRequested.enters) == (
        TaskState.INPUT_REQUIRED,
        TaskState.AUTH_REQUIRED,
    )


# ------------------------------------------------------------------------------ initial state


def test_submitted_carries_exactly_the_arguments_of_task_init() -> None:
    init_arguments = set(inspect.signature(Task.__init__).parameters) - {"self"}
    event_fields = {f.name for f in dataclasses.fields(Task.Submitted)} - ENVELOPE

    assert (
        init_arguments
        == event_fields
        == {"tenant", "context_id", "skill", "skill_version", "message", "params", "key_id"}
    )


def test_a_submitted_task_has_every_state_field_set() -> None:
    task = submit()

    state_fields = {name for name in vars(task) if not name.startswith("_")}

    assert state_fields == set(Task.__annotations__)
    assert task.status_timestamp == task.created_on == task.modified_on


def test_replaying_submitted_alone_builds_the_same_task() -> None:
    task = submit()
    (submitted,) = task.collect_events()

    rebuilt: Task | None = submitted.mutate(None)

    assert isinstance(rebuilt, Task)
    assert _comparable(rebuilt) == _comparable(task)


def test_the_task_owns_its_params_apart_from_the_event() -> None:
    task = submit()
    (submitted,) = task.collect_events()
    assert isinstance(submitted, Task.Submitted)

    task.params["later"] = True

    assert "later" not in submitted.params


# ------------------------------------------------------------------------------ Failed v2


def test_a_holder_that_fails_the_task_records_its_epoch() -> None:
    task = given(grant(lease=timedelta(seconds=1)), grant("w2"))  # the second lease, epoch 2, holds

    (failed,) = _run(task, fail(epoch=2))

    assert isinstance(failed, Task.Failed)
    assert failed.epoch == 2


def test_the_sweeper_fails_a_pause_with_no_epoch() -> None:
    task = given(grant(), ask(0, on_deadline="fail"))

    (failed,) = _run(task, expire_pause(), now=at(seconds=2) + PAUSE)

    assert isinstance(failed, Task.Failed)
    assert failed.epoch is None
    assert task.state == TaskState.FAILED


def test_a_version_1_failed_loads_with_no_epoch() -> None:
    store = MemoryStore()
    task = submit()
    task.grant_lease(worker="w1", now=LATER, until=LATER + PAUSE)
    store.save(task)
    task.fail(epoch=1, now=LATER, reason="step 0 failed 5 times", message=None)
    (failed,) = task.collect_events()
    store.recorder.insert_events([_with_version_1_state(store, failed, {"epoch": dataclasses.MISSING})])

    loaded: Task = store.repository.get(TASK_ID)
    (replayed,) = [e for e in store.events.get(TASK_ID) if isinstance(e, Task.Failed)]

    assert replayed.epoch is None
    assert replayed.reason == "step 0 failed 5 times"
    assert loaded.state == TaskState.FAILED
    assert loaded.version == 3


# ------------------------------------------------------------------------------ key_id and Canceled.by (v2)


def _stored_as_version_1(store: MemoryStore, task: Task, drop: tuple[str, ...]) -> None:
    """Store ``task``'s pending events, each version-2 one as version 1 stored it (without ``drop``)."""
    rows = []
    for event in task.collect_events():
        if getattr(type(event), "class_version", 1) == 2 and drop[0] in vars(event):
            rows.append(_with_version_1_state(store, event, dict.fromkeys(drop, dataclasses.MISSING)))
        else:
            rows.append(store.mapper.to_stored_event(event))
    store.recorder.insert_events(rows)


def test_version_1_client_events_load_with_no_key_id() -> None:
    store = MemoryStore()
    task = submit()
    task.set_push_config(now=LATER, config={"id": "p-1", "url": "https://hooks.example/a"})
    task.remove_push_config(now=LATER, config_id="p-1")
    task.grant_lease(worker="w1", now=LATER, until=LATER + PAUSE)
    task.request_input(
        epoch=1, now=LATER, step=0, checkpoint={}, question={"parts": []}, deadline=LATER + PAUSE
    )
    task.receive_input(now=at(minutes=2), message={"messageId": "a", "parts": [{"text": "yes"}]})
    _stored_as_version_1(store, task, ("key_id",))

    replayed = list(store.events.get(TASK_ID))
    loaded: Task = store.repository.get(TASK_ID)

    clients = (Task.Submitted, Task.PushConfigSet, Task.PushConfigRemoved, Task.InputReceived)
    assert [type(e).__name__ for e in replayed if isinstance(e, clients)] == [
        "Submitted",
        "PushConfigSet",
        "PushConfigRemoved",
        "InputReceived",
    ]
    assert all(e.key_id is None for e in replayed if isinstance(e, clients))
    assert loaded.state == TaskState.WORKING
    assert loaded.version == 6


def test_new_client_events_keep_the_key_id() -> None:
    task = submit(key_id="3f2a9c1d")
    task.set_push_config(now=LATER, config={"id": "p-1", "url": "https://hooks.example/a"}, key_id="3f2a9c1d")
    task.cancel(now=LATER, reason="canceled by the client", key_id="3f2a9c1d")

    submitted, configured, canceled = task.collect_events()

    assert isinstance(submitted, Task.Submitted)
    assert isinstance(configured, Task.PushConfigSet)
    assert isinstance(canceled, Task.Canceled)
    assert (submitted.key_id, configured.key_id, canceled.key_id, canceled.by) == (
        "3f2a9c1d",
        "3f2a9c1d",
        "3f2a9c1d",
        "client",
    )


@pytest.mark.parametrize(
    ("on_deadline", "by"),
    [("cancel", "sweeper"), (None, "client")],
)
def test_a_version_1_canceled_is_told_apart_by_its_reason(on_deadline: str | None, by: str) -> None:
    store = MemoryStore()
    task = submit()
    if on_deadline is None:
        task.cancel(now=LATER, reason="canceled by the client", message=None)
    else:
        task.grant_lease(worker="w1", now=LATER, until=LATER + PAUSE)
        task.request_input(
            epoch=1,
            now=LATER,
            step=0,
            checkpoint={},
            question={"parts": []},
            deadline=LATER + timedelta(seconds=1),
            on_deadline=on_deadline,
        )
        task.expire_pause(now=LATER + timedelta(seconds=2), message={"parts": []})
    _stored_as_version_1(store, task, ("by", "key_id"))

    (canceled,) = [e for e in store.events.get(TASK_ID) if isinstance(e, Task.Canceled)]

    assert (canceled.by, canceled.key_id) == (by, None)
    assert store.repository.get(TASK_ID).state == TaskState.CANCELED


# ------------------------------------------------------------------------------ snapshots


def test_a_snapshot_of_a_paused_task_keeps_a_pause_and_its_class_version() -> None:
    store = MemoryStore()
    task = submit()
    task.grant_lease(worker="w1", now=LATER, until=LATER + PAUSE)
    task.request_input(
        epoch=1,
        now=LATER,
        step=0,
        checkpoint={},
        question={"parts": []},
        deadline=LATER + PAUSE,
        on_deadline="cancel",
    )
    store.save(task)

    store.take_snapshot(TASK_ID)
    assert store.snapshots is not None
    (snapshot,) = store.snapshots.get(TASK_ID)
    loaded: Task = store.repository.get(TASK_ID)

    assert isinstance(snapshot, Snapshot)
    assert snapshot.state["class_version"] == 3
    assert loaded.pause == Pause(deadline=LATER + PAUSE, on_deadline="cancel")
    assert _comparable(loaded) == _comparable(task)


def test_a_version_1_snapshot_with_a_pause_dict_loads_through_the_upcaster() -> None:
    store = MemoryStore()
    assert store.snapshots is not None
    task = given(grant(), step(0), ask(1, on_deadline="cancel"))
    deadline = at(seconds=3) + PAUSE
    assert task.pause == Pause(deadline=deadline, on_deadline="cancel")
    snapshot = Task.Snapshot.take(task)
    stored = store.snapshots.mapper.to_stored_event(snapshot)
    # Version 1: the state dict of the previous code, a pause dict holding a datetime.
    state = store.snapshots.mapper.transcoder.decode(stored.state)
    state["state"].pop("class_version")
    state["state"]["pause"] = {"deadline": deadline, "on_deadline": "cancel"}
    for later in ("failed_attempts", "last_failure", "effects_started"):
        state["state"].pop(later)
    store.snapshots.recorder.insert_events(
        [dataclasses.replace(stored, state=store.snapshots.mapper.transcoder.encode(state))]
    )

    loaded: Task = store.repository.get(TASK_ID)  # only the snapshot is stored

    assert loaded.pause == Pause(deadline=deadline, on_deadline="cancel")
    assert _comparable(loaded) == _comparable(task)


def test_a_version_2_snapshot_loads_with_no_failed_attempts_and_no_started_effects() -> None:
    store = MemoryStore()
    assert store.snapshots is not None
    task = given(grant(), step(0))
    snapshot = Task.Snapshot.take(task)
    stored = store.snapshots.mapper.to_stored_event(snapshot)
    state = store.snapshots.mapper.transcoder.decode(stored.state)
    state["state"]["class_version"] = 2
    for later in ("failed_attempts", "last_failure", "effects_started"):
        state["state"].pop(later)
    store.snapshots.recorder.insert_events(
        [dataclasses.replace(stored, state=store.snapshots.mapper.transcoder.encode(state))]
    )

    loaded: Task = store.repository.get(TASK_ID)

    assert (loaded.failed_attempts, loaded.last_failure, loaded.effects_started) == ([], None, [])
    assert _comparable(loaded) == _comparable(task)


def test_the_snapshot_upcaster_leaves_no_pause_alone() -> None:
    state: dict[str, Any] = {"pause": None, "state": TaskState.WORKING}

    Task.upcast_v1_v2(state)

    assert state == {"pause": None, "state": TaskState.WORKING}


def _run(task: Task, command: Command, now: datetime = LATER) -> list[Any]:
    command(task, now)
    return list(task.collect_events())
