"""What an auditor reads of a log: the actor of every event, the effects, the state at any version.

The task of ``tests/support/audited_task.py`` has every kind of actor: a client with an API key
(and a second key), three workers (one died holding its lease; its successor took over), and a
log past a snapshot. The sweeper's events come from tasks of their own. The state at a version
(``TaskApplication.task_at``, through the snapshot where there is one, and ``replay``) equals a
fold of the first N events written out by hand, at every version.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest

from domain.task import Task
from store.evidence.audit_trail import Actor, actor_of, audit_events, effects_of, replay, summary_of
from store.log.application import CANCEL_REASON, TaskApplication
from store.log.errors import NoSuchVersionError
from store.public_form.task_state import task_state_json
from store.public_form.task_wire import task_to_wire
from tests.support.audited_task import (
    CLIENT_KEY,
    OTHER_KEY,
    PROGRESS_REPORTS,
    SKILL,
    Clock,
    paused_resumed_crashed,
    replayed,
)

JSON = dict[str, Any]


def _submitted(store: TaskApplication, clock: Clock, text: str = "go") -> Task:
    message = {"messageId": f"m-{text}", "role": "ROLE_USER", "parts": [{"text": text}]}
    return store.submit(tenant="acme", message=message, skill=SKILL, clock=clock)


def _paused(store: TaskApplication, clock: Clock, *, on_deadline: str) -> Task:
    task = _submitted(store, clock, on_deadline)
    now = clock()
    epoch = task.grant_lease(worker="w-1", now=now, until=now + timedelta(minutes=1))
    question = {"messageId": "q", "role": "ROLE_AGENT", "parts": [{"text": "ok?"}]}
    task.request_input(
        epoch=epoch,
        now=clock(),
        step=0,
        checkpoint={},
        question=question,
        deadline=clock.now + timedelta(seconds=5),
        on_deadline=on_deadline,
    )
    store.save_tasks(task)
    clock.now += timedelta(seconds=10)
    return task


def test_every_event_names_its_actor(any_store: TaskApplication) -> None:
    audited = paused_resumed_crashed(any_store)

    found = audit_events(any_store.history(audited.task_id))

    client = Actor("client", tenant="acme", key_id=CLIENT_KEY)
    other_key = Actor("client", tenant="acme", key_id=OTHER_KEY)
    w1, w2, w3 = (Actor("worker", worker_id=f"w-{n}", epoch=n) for n in (1, 2, 3))
    expected = [
        ("Submitted", client),
        ("PushConfigSet", client),
        ("LeaseGranted", w1),
        ("StepCompleted", w1),
        ("EffectRecorded", w1),
        ("InputRequested", w1),
        ("InputReceived", client),
        ("LeaseGranted", w2),
        *[("ProgressReported", w2)] * PROGRESS_REPORTS,
        ("StepAttemptFailed", w2),  # w-2 was killed mid-step: w-3's claim records w-2's attempt
        ("LeaseGranted", w3),
        ("PushConfigSet", other_key),
        ("PushConfigRemoved", other_key),
        ("EffectRecorded", w3),
        ("StepCompleted", w3),
        ("Completed", w3),
    ]
    assert [(e.type, e.actor) for e in found] == expected
    assert [e.version for e in found] == list(range(1, audited.last + 1))
    assert str(client) == f"client acme (key {CLIENT_KEY})"
    assert str(w3) == "worker w-3 (epoch 3)"


def test_the_fields_are_the_public_json_body(any_store: TaskApplication) -> None:
    audited = paused_resumed_crashed(any_store)

    submitted, hook = audit_events(any_store.history(audited.task_id))[:2]

    assert submitted.fields["key_id"] == CLIENT_KEY
    assert submitted.fields["skill"] == "audited"
    assert submitted.summary == "submitted: skill audited v1: review the grants"
    assert hook.fields["config"] == {"id": "hook-1", "url": "https://hooks.example/a2a"}  # no token
    assert "secret-token" not in str([e.to_json() for e in audit_events(any_store.history(audited.task_id))])
    granted = audit_events(any_store.history(audited.task_id))[2]
    assert isinstance(granted.fields["until"], str)
    assert granted.fields["until"].endswith("Z")


def test_the_effects_are_listed_with_their_results_and_times(any_store: TaskApplication) -> None:
    audited = paused_resumed_crashed(any_store)
    events = list(any_store.history(audited.task_id))

    found = effects_of(events)

    recorded = [e for e in events if isinstance(e, Task.EffectRecorded)]
    assert [(e.key, e.result, e.version) for e in found] == [
        ("revoke:alice", {"revoked": True, "id": 7}, recorded[0].originator_version),
        ("revoke:bob", {"revoked": False, "why": "gone"}, recorded[1].originator_version),
    ]
    assert [e.time for e in found] == [e.timestamp for e in recorded]


def test_the_state_at_every_version_equals_a_fold_of_its_first_events(any_store: TaskApplication) -> None:
    audited = paused_resumed_crashed(any_store)
    events = list(any_store.history(audited.task_id))
    assert any_store.snapshots is not None
    assert list(any_store.snapshots.get(audited.task_id)), "the log should have passed a snapshot"

    for version in range(1, audited.last + 1):
        expected = task_state_json(replayed(events, version))
        assert task_state_json(any_store.task_at(audited.task_id, version)) == expected, version
        assert task_state_json(replay(events, version)) == expected, version

    paused = any_store.task_at(audited.task_id, audited.paused_at)
    assert task_to_wire(paused)["status"]["state"] == "TASK_STATE_INPUT_REQUIRED"
    crashed = task_state_json(any_store.task_at(audited.task_id, audited.crashed_after))
    assert crashed["longhaul"]["lease"]["worker"] == "w-2"
    assert crashed["longhaul"]["effects"] == {"revoke:alice": {"revoked": True, "id": 7}}
    assert task_state_json(any_store.task_at(audited.task_id, audited.last))["task"] == task_to_wire(
        any_store.get(audited.task_id)
    )


@pytest.mark.parametrize("version", [0, -1, "last + 1"])
def test_a_version_the_task_does_not_have_is_refused(any_store: TaskApplication, version: int | str) -> None:
    audited = paused_resumed_crashed(any_store)
    number = audited.last + 1 if version == "last + 1" else int(version)
    events = list(any_store.history(audited.task_id))

    with pytest.raises(
        NoSuchVersionError, match=f"versions 1 to {audited.last}; there is no version {number}"
    ):
        any_store.task_at(audited.task_id, number)
    with pytest.raises(NoSuchVersionError):
        replay(events, number)


def test_the_sweepers_events_and_a_clients_cancel(any_store: TaskApplication) -> None:
    clock = Clock()
    failing = _paused(any_store, clock, on_deadline="fail")
    canceling = _paused(any_store, clock, on_deadline="cancel")
    any_store.end_pause(failing.id, clock=clock)
    any_store.end_pause(canceling.id, clock=clock)
    any_store.expire(failing.id, retention=timedelta(0), clock=clock)
    by_client = _submitted(any_store, clock, "cancel me")
    any_store.cancel(by_client.id, tenant="acme", clock=clock, key_id=CLIENT_KEY)

    failed = audit_events(any_store.history(failing.id))
    canceled = audit_events(any_store.history(canceling.id))
    canceled_by_client = audit_events(any_store.history(by_client.id))

    assert [(e.type, str(e.actor)) for e in failed[-2:]] == [("Failed", "sweeper"), ("Expired", "sweeper")]
    assert (canceled[-1].type, canceled[-1].actor) == ("Canceled", Actor("sweeper"))
    assert canceled[-1].fields["by"] == "sweeper"
    assert (canceled_by_client[-1].type, canceled_by_client[-1].actor) == (
        "Canceled",
        Actor("client", tenant="acme", key_id=CLIENT_KEY),
    )
    assert canceled_by_client[-1].summary == f"canceled: {CANCEL_REASON}"


def test_an_open_gateways_client_has_no_key() -> None:
    assert str(Actor("client", tenant="default")) == "client default (no key)"
    assert Actor("client", tenant="default").to_json() == {
        "kind": "client",
        "tenant": "default",
        "text": "client default (no key)",
    }


def test_an_event_type_this_module_does_not_know_is_named_by_what_it_carries() -> None:
    class Unknown:
        epoch = 4

    class Other:
        pass

    assert actor_of(Unknown(), "acme", {4: "w-9"}) == Actor("worker", worker_id="w-9", epoch=4)
    assert actor_of(Other(), "acme", {}) == Actor("gateway")
    assert summary_of(Other()) == "Other"


def test_a_summary_quotes_a_data_answer_when_it_has_no_text(any_store: TaskApplication) -> None:
    clock = Clock()
    task = _paused(any_store, clock, on_deadline="fail")
    clock.now -= timedelta(seconds=10)  # back before the deadline
    answer = {"messageId": "a", "role": "ROLE_USER", "parts": [{"data": {"approve": True}}]}
    any_store.answer(task.id, tenant="acme", message=answer, clock=clock)

    received = audit_events(any_store.history(task.id))[-1]

    assert received.summary == 'answer received: {"approve":true}'
    assert received.actor == Actor("client", tenant="acme")
