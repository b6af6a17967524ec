"""Each task's key on both recorders: made with the first secret, destroyed with the task's end, erased.

The application seals a client's secret parts (``store.secrets.secret_parts``) before it stores them; the
key row is written by the same append as the event that carries the first ciphertext, and
deleted by the append that ends the task, on PostgreSQL and in memory alike.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from typing import Any
from uuid import UUID, uuid4

import pytest

from domain.skill import Skill, StepContext, StepOutcome
from domain.states import TaskState
from domain.task import Task
from store.log.application import TaskApplication
from store.log.errors import ConflictError
from store.public_form.event_json import dumps, event_message
from store.public_form.task_wire import task_to_wire
from store.secrets.secret_parts import REDACTED_PART, SECRET_EXTENSION, holds_sealed
from store.secrets.task_keys import SecretUnreadableError, TaskKey

NOW = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)
API_KEY = "sk-live-key-that-must-never-show-0123"


async def _never_run(ctx: StepContext) -> StepOutcome:
    raise AssertionError("no worker runs in these tests")


SKILL = Skill("research", 2, [_never_run])


def clock() -> datetime:
    return NOW


def later(minutes: int) -> datetime:
    return NOW + timedelta(minutes=minutes)


def first_message(*parts: dict[str, Any]) -> dict[str, Any]:
    return {"messageId": str(uuid4()), "role": "ROLE_USER", "parts": list(parts) or [{"text": "q"}]}


def paused(store: TaskApplication, *, auth: bool = True, tenant: str = "acme") -> Task:
    """A saved task that asked (for credentials with ``auth``) and waits for the answer."""
    task = store.submit(tenant=tenant, message=first_message(), skill=SKILL, clock=clock)
    epoch = task.grant_lease(worker="w", now=NOW, until=later(1))
    task.request_input(
        epoch=epoch,
        now=NOW,
        step=0,
        checkpoint={},
        question={"role": "ROLE_AGENT", "parts": [{"text": "key?"}]},
        deadline=later(60),
        auth=auth,
    )
    store.save_tasks(task)
    return task


def answer_with_key(store: TaskApplication, task: Task, **extra: Any) -> Task:
    message = {"messageId": "a-1", "role": "ROLE_USER", "parts": [{"data": {"api_key": API_KEY}}], **extra}
    return store.answer(task.id, tenant=task.tenant, message=message, clock=clock)


def stored_text(store: TaskApplication, task_id: UUID) -> str:
    """Every stored event of the task, as the recorder holds it."""
    return "".join(e.state.decode() for e in store.recorder.select_events(task_id))


def public_text(store: TaskApplication, task: Task) -> str:
    """What readers outside see: every event's public JSON and the wire Task."""
    events = [dumps(event_message(None, task.tenant, e)) for e in store.history(task.id)]
    return "\n".join([*events, json.dumps(task_to_wire(store.get(task.id)))])


def test_an_answer_to_an_auth_pause_is_stored_sealed_with_a_new_key(any_store: TaskApplication) -> None:
    task = paused(any_store)
    assert any_store.task_keys.get(task.id) is None

    answered = answer_with_key(any_store, task)

    key = any_store.task_keys.get(task.id)
    assert key is not None
    assert (key.task_id, key.tenant) == (task.id, "acme")
    assert API_KEY not in stored_text(any_store, task.id)
    assert API_KEY not in public_text(any_store, answered)
    assert answered.latest_input["parts"][0]["metadata"][SECRET_EXTENSION]["version"] == answered.version
    assert task_to_wire(answered)["history"][-1]["parts"] == [REDACTED_PART]
    revealed = any_store.reveal(answered, answered.latest_input)
    assert revealed["parts"] == [{"data": {"api_key": API_KEY}}]
    assert revealed["messageId"] == "a-1"


def test_an_answer_to_an_input_pause_seals_only_the_marked_parts(any_store: TaskApplication) -> None:
    task = paused(any_store, auth=False)
    marked = {"text": API_KEY, "metadata": {SECRET_EXTENSION: True}}
    message = {"messageId": "a-1", "role": "ROLE_USER", "parts": [{"text": "approved"}, marked]}

    answered = any_store.answer(task.id, tenant="acme", message=message, clock=clock)

    shown = task_to_wire(answered)["history"][-1]["parts"]
    assert shown == [{"text": "approved"}, REDACTED_PART]
    assert API_KEY not in stored_text(any_store, task.id)
    assert any_store.reveal(answered, answered.latest_input)["parts"] == [{"text": "approved"}, marked]


def test_an_answer_without_secrets_makes_no_key(any_store: TaskApplication) -> None:
    task = paused(any_store, auth=False)
    message = {"messageId": "a-1", "role": "ROLE_USER", "parts": [{"text": "yes"}]}

    answered = any_store.answer(task.id, tenant="acme", message=message, clock=clock)

    assert any_store.task_keys.get(task.id) is None
    assert answered.latest_input["parts"] == [{"text": "yes"}]


def test_a_first_message_with_a_marked_part_is_sealed_at_version_1(any_store: TaskApplication) -> None:
    marked = {"data": {"api_key": API_KEY}, "metadata": {SECRET_EXTENSION: True}}
    message = first_message({"text": "research tides"}, marked, {"data": {"chunks": 3}})

    task = any_store.submit(tenant="acme", message=message, skill=SKILL, clock=clock)

    assert task.params == {"chunks": 3}
    assert any_store.task_keys.get(task.id) is not None
    assert API_KEY not in stored_text(any_store, task.id)
    assert API_KEY not in public_text(any_store, task)
    assert task.history[0]["parts"][1]["metadata"][SECRET_EXTENSION]["version"] == 1
    assert any_store.reveal(task, task.latest_input)["parts"][1] == marked
    # A resend finds the task and changes nothing (the key is the first send's).
    key = any_store.task_keys.get(task.id)
    assert any_store.submit(tenant="acme", message=message, skill=SKILL, clock=clock).version == task.version
    assert any_store.task_keys.get(task.id) == key


def test_a_resent_secret_answer_appends_nothing(any_store: TaskApplication) -> None:
    task = paused(any_store)
    answered = answer_with_key(any_store, task)

    again = answer_with_key(any_store, task)

    assert again.version == answered.version
    assert len(list(any_store.history(task.id))) == answered.version


def test_the_event_that_ends_the_task_destroys_its_key(any_store: TaskApplication) -> None:
    task = answer_with_key(any_store, paused(any_store))
    epoch = task.grant_lease(worker="w2", now=later(2), until=later(3))
    any_store.save_tasks(task)
    assert any_store.task_keys.get(task.id) is not None

    task.complete(epoch=epoch, now=later(2), message=None)
    any_store.save_tasks(task)

    assert any_store.task_keys.get(task.id) is None
    ended = any_store.get(task.id)
    assert holds_sealed(ended.latest_input)  # the ciphertext stays in the log ...
    with pytest.raises(SecretUnreadableError, match="destroyed"):
        any_store.reveal(ended, ended.latest_input)  # ... and nobody can read it
    expired = any_store.expire(task.id, retention=timedelta(minutes=1), clock=lambda: later(10))
    assert expired.expired
    assert any_store.task_keys.get(task.id) is None


def test_a_worker_group_commit_that_ends_tasks_destroys_their_keys(any_store: TaskApplication) -> None:
    tasks = [answer_with_key(any_store, paused(any_store)) for _ in range(2)]
    plain = paused(any_store, auth=False)
    plain = any_store.answer(
        plain.id,
        tenant="acme",
        message={"messageId": "p", "role": "ROLE_USER", "parts": [{"text": "y"}]},
        clock=clock,
    )
    for task in [*tasks, plain]:
        epoch = task.grant_lease(worker="w2", now=later(2), until=later(3))
        task.fail(epoch=epoch, now=later(2), reason="stop", message=None)

    assert any_store.save_each(*tasks, plain) == [None, None, None]

    assert [any_store.task_keys.get(t.id) for t in tasks] == [None, None]
    assert any_store.task_keys.count() == 0


def test_a_group_commit_that_lost_the_race_for_a_task_keeps_its_key(any_store: TaskApplication) -> None:
    """The group ends both tasks; someone appended to the first before: only the second's key goes."""
    raced, kept = (answer_with_key(any_store, paused(any_store)) for _ in range(2))
    winner = any_store.get(raced.id)
    winner.grant_lease(worker="w1", now=later(2), until=later(3))
    any_store.save_tasks(winner)
    for task in (raced, kept):
        epoch = task.grant_lease(worker="w2", now=later(2), until=later(3))
        task.fail(epoch=epoch, now=later(2), reason="stop", message=None)

    outcomes = any_store.save_each(raced, kept)

    assert isinstance(outcomes[0], ConflictError)
    assert outcomes[1] is None
    assert any_store.task_keys.get(raced.id) is not None
    assert any_store.task_keys.get(kept.id) is None


def test_cancel_destroys_the_key(any_store: TaskApplication) -> None:
    task = answer_with_key(any_store, paused(any_store))

    canceled = any_store.cancel(task.id, tenant="acme", clock=lambda: later(1))

    assert canceled.state == TaskState.CANCELED
    assert any_store.task_keys.get(task.id) is None


def test_a_failed_append_writes_no_key(any_store: TaskApplication) -> None:
    task = paused(any_store)
    stale = any_store.get(task.id)
    answer_with_key(any_store, task)  # appends first, with the task's key
    first_key = any_store.task_keys.get(task.id)
    stale.receive_input(
        now=later(1), message={"messageId": "x", "role": "ROLE_USER", "parts": [{"text": "t"}]}
    )

    with pytest.raises(ConflictError):
        any_store.save_tasks(stale, new_keys=[TaskKey.new(task.id, "acme")])

    assert any_store.task_keys.get(task.id) == first_key


def test_a_second_key_for_one_task_is_a_lost_race_and_nothing_is_appended(any_store: TaskApplication) -> None:
    task = answer_with_key(any_store, paused(any_store))
    first_key = any_store.task_keys.get(task.id)
    task.set_push_config(now=later(1), config={"id": "c", "url": "https://example.com/hook"})

    with pytest.raises(ConflictError):
        any_store.save_tasks(task, new_keys=[TaskKey.new(task.id, "acme")])

    assert any_store.task_keys.get(task.id) == first_key
    assert any_store.get(task.id).push_configs == {}


def test_erase_destroys_the_keys_of_one_tenant_only(any_store: TaskApplication) -> None:
    acme = [answer_with_key(any_store, paused(any_store, tenant="acme")) for _ in range(2)]
    globex = answer_with_key(any_store, paused(any_store, tenant="globex"))

    assert any_store.erase_tenant("acme") == 2

    assert [any_store.task_keys.get(t.id) for t in acme] == [None, None]
    assert any_store.task_keys.get(globex.id) is not None
    with pytest.raises(SecretUnreadableError, match="erase"):
        any_store.reveal(acme[0], acme[0].latest_input)
    assert any_store.erase_tenant("acme") == 0
