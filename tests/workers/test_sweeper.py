"""The sweeper ends pauses past their deadline and expires tasks past retention (moved clock).

On PostgreSQL the expiry candidates come from the retention index: each sweep here first waits
until a running projector (``projections.projector``, in a thread) applied the
whole log, as ``longhaul projector`` keeps it beside a sweeper.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import ExitStack
from datetime import UTC, datetime, timedelta
from typing import Any
from uuid import UUID

import pytest

from domain.task import Task
from store.log.application import TaskApplication
from store.log.config import StoreConfig
from store.log.errors import RetentionNotReachedError
from store.log.retention import RetentionPolicy
from tests.support.projector import projector_running
from tests.support.tasks import new_task
from workers import sweeper as sweeper_module
from workers.sweeper import Sweeper

START = datetime(2026, 5, 1, 9, 0, tzinfo=UTC)
WAIT_S = 20.0
RETENTION = timedelta(days=30)


class MovableClock:
    """A clock the test moves by hand."""

    def __init__(self, now: datetime) -> None:
        self.now = now

    def __call__(self) -> datetime:
        return self.now


Sweep = Callable[[Sweeper], tuple[int, int]]


@pytest.fixture
def sweep() -> Iterator[Sweep]:
    """``sweep_once`` of a sweeper, once the retention index (if it has one) applied the whole log."""
    with ExitStack() as stack:
        runners: dict[str, Any] = {}

        def sweep_once(sweeper: Sweeper) -> tuple[int, int]:
            if sweeper.index is not None:
                config = sweeper.store.config
                assert isinstance(config, StoreConfig)
                if "index" not in runners:
                    runners["index"] = stack.enter_context(projector_running(config))
                position = sweeper.store.recorder.max_notification_id()
                if position is not None:
                    runners["index"].wait(position, timeout=WAIT_S)
            return sweeper.sweep_once()

        yield sweep_once


def _paused(store: TaskApplication, *, deadline: timedelta, on_deadline: str = "fail") -> Task:
    task = new_task(START, skill="access-review", text="review")
    epoch = task.grant_lease(worker="w", now=START, until=START + timedelta(seconds=30))
    task.request_input(
        epoch=epoch,
        now=START,
        step=0,
        checkpoint={"asked": True},
        question={"messageId": "q", "role": "ROLE_AGENT", "parts": [{"text": "approve?"}]},
        deadline=START + deadline,
        on_deadline=on_deadline,
    )
    store.save_tasks(task)
    return task


def test_a_pause_ends_at_its_deadline_not_before(store: TaskApplication, sweep: Sweep) -> None:
    clock = MovableClock(START + timedelta(hours=23))
    sweeper = Sweeper(store=store, clock=clock, retention=RETENTION, interval=1)
    fails = _paused(store, deadline=timedelta(days=1))
    cancels = _paused(store, deadline=timedelta(days=1), on_deadline="cancel")

    assert sweep(sweeper) == (0, 0)
    assert store.get(fails.id).state == "TASK_STATE_INPUT_REQUIRED"

    clock.now = START + timedelta(days=1)
    assert sweep(sweeper) == (2, 0)
    failed, canceled = store.get(fails.id), store.get(cancels.id)
    assert failed.state == "TASK_STATE_FAILED"
    assert canceled.state == "TASK_STATE_CANCELED"
    text = failed.status_message["parts"][0]["text"] if failed.status_message else ""
    assert "deadline" in text
    assert (START + timedelta(days=1)).isoformat() in text
    # Nothing left to sweep: the partial index no longer lists them.
    assert sweep(sweeper) == (0, 0)


def test_terminal_tasks_expire_after_retention(store: TaskApplication, sweep: Sweep) -> None:
    clock = MovableClock(START + timedelta(days=2))
    sweeper = Sweeper(store=store, clock=clock, retention=RETENTION, interval=1)
    task = _paused(store, deadline=timedelta(days=1))
    assert sweep(sweeper) == (1, 0)  # failed at its deadline

    clock.now = START + timedelta(days=2) + RETENTION - timedelta(minutes=1)
    assert sweep(sweeper) == (0, 0)
    assert not store.get(task.id).expired

    clock.now = START + timedelta(days=2) + RETENTION
    assert sweep(sweeper) == (0, 1)
    expired = store.get(task.id)
    assert expired.expired
    assert [type(e).__name__ for e in store.history(task.id)][-1] == "Expired"
    assert sweep(sweeper) == (0, 0)


def _ended(store: TaskApplication, *, tenant: str, skill: str, at: datetime) -> Task:
    task = new_task(at, tenant=tenant, skill=skill, text="x")
    task.cancel(now=at, reason="test", message=None)
    store.save_tasks(task)
    return task


POLICY = RetentionPolicy.of_settings(
    RETENTION,
    {
        "tenant:acme": timedelta(days=90),
        "skill:research": timedelta(days=1),
        "tenant:acme,skill:research": timedelta(days=7),
    },
)


def test_retention_precedence_is_tenant_and_skill_then_skill_then_tenant_then_default() -> None:
    assert POLICY.of("acme", "research") == timedelta(days=7)
    assert POLICY.of("globex", "research") == timedelta(days=1)
    assert POLICY.of("acme", "echo") == timedelta(days=90)
    assert POLICY.of("globex", "echo") == RETENTION
    assert POLICY.shortest == timedelta(days=1)


@pytest.mark.parametrize("key", ["acme", "tenant:", "team:x", "tenant:a,tenant:b", "skill:a,"])
def test_a_malformed_override_key_is_refused(key: str) -> None:
    with pytest.raises(ValueError, match="override"):
        RetentionPolicy.of_settings(RETENTION, {key: timedelta(days=1)})


def test_each_task_expires_after_its_own_retention(any_store: TaskApplication, sweep: Sweep) -> None:
    store = any_store
    clock = MovableClock(START)
    sweeper = Sweeper(store=store, clock=clock, retention=POLICY, interval=1)
    pair = _ended(store, tenant="acme", skill="research", at=START)
    skill = _ended(store, tenant="globex", skill="research", at=START)
    tenant = _ended(store, tenant="acme", skill="echo", at=START)
    default = _ended(store, tenant="globex", skill="echo", at=START)

    def expired() -> set[UUID]:
        return {t.id for t in (pair, skill, tenant, default) if store.get(t.id).expired}

    clock.now = START + timedelta(days=1) - timedelta(seconds=1)
    assert sweep(sweeper) == (0, 0)
    clock.now = START + timedelta(days=1)
    assert sweep(sweeper) == (0, 1)
    assert expired() == {skill.id}
    clock.now = START + timedelta(days=7)
    assert sweep(sweeper) == (0, 1)
    assert expired() == {skill.id, pair.id}
    clock.now = START + RETENTION
    assert sweep(sweeper) == (0, 1)
    assert expired() == {skill.id, pair.id, default.id}
    clock.now = START + timedelta(days=90)
    assert sweep(sweeper) == (0, 1)
    assert expired() == {skill.id, pair.id, default.id, tenant.id}
    history = [e for e in store.history(pair.id) if isinstance(e, Task.Expired)]
    assert "7 days" in history[0].reason


def test_tasks_not_due_do_not_hold_up_those_behind_them(
    any_store: TaskApplication, monkeypatch: pytest.MonkeyPatch, sweep: Sweep
) -> None:
    store = any_store
    monkeypatch.setattr(sweeper_module, "BATCH", 2)
    clock = MovableClock(START + timedelta(days=2))
    sweeper = Sweeper(store=store, clock=clock, retention=POLICY, interval=1)
    kept = [_ended(store, tenant="acme", skill="echo", at=START) for _ in range(5)]  # 90 days
    due = _ended(store, tenant="globex", skill="research", at=START + timedelta(minutes=1))  # 1 day
    assert sweep(sweeper) == (0, 1)
    assert store.get(due.id).expired
    assert not any(store.get(t.id).expired for t in kept)


def test_the_use_case_refuses_a_task_before_its_own_retention(any_store: TaskApplication) -> None:
    task = _ended(any_store, tenant="acme", skill="echo", at=START)
    with pytest.raises(RetentionNotReachedError, match="its retention is 90 days"):
        any_store.expire(task.id, retention=POLICY, clock=lambda: START + timedelta(days=89))
    assert not any_store.get(task.id).expired


def test_a_push_config_set_after_the_end_does_not_move_retention(
    any_store: TaskApplication, sweep: Sweep
) -> None:
    """Retention counts from the end (ADR 0025): the run queue, the index and the use case agree."""
    store = any_store
    clock = MovableClock(START + timedelta(days=20))
    sweeper = Sweeper(store=store, clock=clock, retention=RETENTION, interval=1)
    task = _ended(store, tenant="globex", skill="echo", at=START)
    config = {"id": "late", "url": "https://hooks.example/late"}
    store.set_push_config(task.id, tenant="globex", config=config, clock=clock)
    clock.now = START + timedelta(days=21)
    store.remove_push_config(task.id, tenant="globex", config_id="late", clock=clock)
    store.set_push_config(task.id, tenant="globex", config=config, clock=clock)
    row = store.run_queue.row(task.id)
    assert row is not None
    assert row.updated_at == START

    clock.now = START + RETENTION - timedelta(seconds=1)
    assert sweep(sweeper) == (0, 0)
    clock.now = START + RETENTION
    assert sweep(sweeper) == (0, 1)
    assert store.get(task.id).expired
    assert [type(e).__name__ for e in store.history(task.id)][-4:] == [
        "PushConfigSet",
        "PushConfigRemoved",
        "PushConfigSet",
        "Expired",
    ]
