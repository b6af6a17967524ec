"""The sweeper ends pauses past their deadline and expires tasks past retention (moved clock)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from domain.task import Task
from store.application import TaskApplication
from tests.support.tasks import new_task
from workers.sweeper import Sweeper

START = datetime(2026, 5, 1, 9, 0, tzinfo=UTC)
RETENTION = timedelta(days=30)


class MovableClock:
    """A clock the test moves by hand."""

    def __init__(self, now: datetime) -> None:
        self.now = now

    def __call__(self) -> datetime:
        return self.now


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


def test_a_pause_ends_at_its_deadline_not_before(store: TaskApplication) -> None:
    clock = MovableClock(START + timedelta(hours=23))
    sweeper = Sweeper(store=store, clock=clock, retention=RETENTION, interval=1)
    fails = _paused(store, deadline=timedelta(days=1))
    cancels = _paused(store, deadline=timedelta(days=1), on_deadline="cancel")

    assert sweeper.sweep_once() == (0, 0)
    assert store.get(fails.id).state == "TASK_STATE_INPUT_REQUIRED"

    clock.now = START + timedelta(days=1)
    assert sweeper.sweep_once() == (2, 0)
    failed, canceled = store.get(fails.id), store.get(cancels.id)
    assert failed.state == "TASK_STATE_FAILED"
    assert canceled.state == "TASK_STATE_CANCELED"
    text = failed.status_message["parts"][0]["text"] if failed.status_message else ""
    assert "deadline" in text
    assert (START + timedelta(days=1)).isoformat() in text
    # Nothing left to sweep: the partial index no longer lists them.
    assert sweeper.sweep_once() == (0, 0)


def test_terminal_tasks_expire_after_retention(store: TaskApplication) -> None:
    clock = MovableClock(START + timedelta(days=2))
    sweeper = Sweeper(store=store, clock=clock, retention=RETENTION, interval=1)
    task = _paused(store, deadline=timedelta(days=1))
    assert sweeper.sweep_once() == (1, 0)  # failed at its deadline

    clock.now = START + timedelta(days=2) + RETENTION - timedelta(minutes=1)
    assert sweeper.sweep_once() == (0, 0)
    assert not store.get(task.id).expired

    clock.now = START + timedelta(days=2) + RETENTION
    assert sweeper.sweep_once() == (0, 1)
    expired = store.get(task.id)
    assert expired.expired
    assert [type(e).__name__ for e in store.history(task.id)][-1] == "Expired"
    assert sweeper.sweep_once() == (0, 0)
