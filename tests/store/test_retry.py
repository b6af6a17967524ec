"""The conflict-retry executor: bounded, jittered exponential pauses, reload and re-check, no retry
of a lost lease. Races are real: a rival appends to the task in PostgreSQL just before our save."""

from __future__ import annotations

import asyncio
import random
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from uuid import UUID

import pytest
from hypothesis import given
from hypothesis import strategies as st

from domain.errors import LeaseLostError, TaskTerminalError
from domain.retry_policy import RetryPolicy
from domain.skill import Complete, Continue
from domain.states import TaskState
from domain.task import Task
from store.log.application import TaskApplication
from store.log.errors import ConflictError, RetriesExhaustedError
from store.log.retry import (
    CONFLICT_RETRY,
    run_with_retries,
    run_with_retries_async,
    webhook_retry,
)
from tests.support.tasks import new_task
from workers.committer import Committer
from workers.lease import LeasedTask

NOW = datetime(2026, 5, 1, 9, 0, tzinfo=UTC)
FAST = RetryPolicy(max_attempts=4, first_delay_s=0.001, max_delay_s=0.004)


def _clock() -> datetime:
    return NOW


def _saved(store: TaskApplication) -> Task:
    task = new_task(NOW)
    store.save_tasks(task)
    return task


def _rival_sets_push_config(store: TaskApplication, task_id: UUID, config_id: str) -> None:
    rival = store.get(task_id)
    rival.set_push_config(now=NOW, config={"id": config_id, "url": "https://example.com/hook"})
    store.save_tasks(rival)


def _rival_cancels(store: TaskApplication, task_id: UUID) -> None:
    rival = store.get(task_id)
    rival.cancel(now=NOW, reason="canceled by a rival")
    store.save_tasks(rival)


class Counted:
    """Counts calls of a loader."""

    def __init__(self, load: Callable[[], Task]) -> None:
        self.load, self.calls = load, 0

    def __call__(self) -> Task:
        self.calls += 1
        return self.load()


def _event_names(store: TaskApplication, task_id: UUID) -> list[str]:
    return [type(event).__name__ for event in store.history(task_id)]


# ---------------------------------------------------------------------------------- the policy


def test_pauses_grow_exponentially_to_the_cap_with_jitter_inside_the_bounds() -> None:
    policy = CONFLICT_RETRY
    draw = random.Random(7).random
    ceilings = [min(policy.max_delay_s, policy.first_delay_s * 2 ** (n - 1)) for n in range(1, 12)]

    for attempt, ceiling in enumerate(ceilings, start=1):
        assert policy.delay(attempt, draw=lambda: 0.0) == pytest.approx(ceiling / 2)
        assert policy.delay(attempt, draw=lambda: 1.0) == pytest.approx(ceiling)
        drawn = [policy.delay(attempt, draw=draw) for _ in range(50)]
        assert all(ceiling / 2 <= d <= ceiling for d in drawn)
        assert len(set(drawn)) > 1  # jittered, not one fixed pause

    assert ceilings[1] == 2 * ceilings[0]
    assert ceilings[-1] == policy.max_delay_s
    assert policy.delay(1, random.random) >= policy.first_delay_s / 2  # the default draw


@pytest.mark.parametrize(
    ("attempts", "first", "most"), [(0, 0.01, 0.1), (3, 0.0, 0.1), (3, 0.2, 0.1), (3, -1.0, 0.1)]
)
def test_a_policy_needs_an_attempt_and_ordered_positive_delays(
    attempts: int, first: float, most: float
) -> None:
    with pytest.raises(ValueError, match=r"retry policy|delays"):
        RetryPolicy(max_attempts=attempts, first_delay_s=first, max_delay_s=most)


@given(
    attempt=st.integers(min_value=1, max_value=10_000),
    elapsed=st.floats(min_value=0, max_value=200_000),
    first=st.floats(min_value=0.01, max_value=10),
    most=st.floats(min_value=10, max_value=7200),
    total=st.floats(min_value=0, max_value=100_000),
    draw=st.floats(min_value=0, max_value=0.999999),
)
def test_a_webhook_pause_is_bounded_and_never_runs_past_the_total_time(
    attempt: int, elapsed: float, first: float, most: float, total: float, draw: float
) -> None:
    policy = webhook_retry(total_s=total, first_delay_s=first, max_delay_s=most)
    pause = policy.next_delay(attempt, elapsed, lambda: draw)
    ceiling = min(most, first * 2.0 ** min(attempt - 1, 1000))
    if pause is None:
        assert elapsed + ceiling * (1 + draw) / 2 > total  # gives up only when the pause would overrun
    else:
        assert ceiling / 2 <= pause <= ceiling
        assert elapsed + pause <= total


def test_the_webhook_policy_has_no_attempt_limit_and_gives_up_by_time() -> None:
    policy = webhook_retry(total_s=24 * 3600.0)
    assert policy.max_attempts is None
    assert policy.next_delay(500, 3600.0, lambda: 0.0) == 1800.0  # the ceiling's half, an hour in
    assert policy.next_delay(2, 24 * 3600.0 - 0.5, lambda: 0.0) is None
    pauses, elapsed, attempt = [], 0.0, 1
    while (pause := policy.next_delay(attempt, elapsed, lambda: 0.5)) is not None:
        pauses.append(pause)
        elapsed += pause
        attempt += 1
    assert 30 < len(pauses) < 50  # 12 doublings, then about one attempt every 45 min
    assert elapsed <= 24 * 3600.0


def test_the_conflict_policy_is_an_instance_with_an_attempt_limit() -> None:
    assert isinstance(CONFLICT_RETRY, RetryPolicy)
    assert CONFLICT_RETRY.next_delay(CONFLICT_RETRY.max_attempts or 0, 0.0, random.random) is None
    assert CONFLICT_RETRY.next_delay(1, 0.0, random.random) is not None


# ---------------------------------------------------------------------------------- the executor


def test_attempts_are_bounded_and_pauses_follow_the_policy(store: TaskApplication) -> None:
    task = _saved(store)
    load = Counted(lambda: store.get(task.id))
    sleeps: list[float] = []
    saves = 0

    def losing_save(copy: Task) -> None:
        nonlocal saves
        saves += 1
        _rival_sets_push_config(store, task.id, f"rival-{saves}")  # appended just before ours
        store.save_tasks(copy)

    def command(copy: Task, now: datetime) -> None:
        copy.set_push_config(now=now, config={"id": "ours", "url": "https://example.com/ours"})

    with pytest.raises(RetriesExhaustedError) as raised:
        run_with_retries(command, load=load, save=losing_save, clock=_clock, policy=FAST, sleep=sleeps.append)

    assert isinstance(raised.value, ConflictError)
    assert raised.value.attempts == FAST.max_attempts
    assert load.calls == saves == FAST.max_attempts
    assert len(sleeps) == FAST.max_attempts - 1
    for attempt, pause in enumerate(sleeps, start=1):
        ceiling = min(FAST.max_delay_s, FAST.first_delay_s * 2 ** (attempt - 1))
        assert ceiling / 2 <= pause <= ceiling
    assert "ours" not in store.get(task.id).push_configs  # nothing of ours was appended


def test_a_lost_race_is_retried_on_the_reloaded_task(store: TaskApplication) -> None:
    task = _saved(store)
    load = Counted(lambda: store.get(task.id))
    seen: list[set[str]] = []
    raced = False

    def save(copy: Task) -> None:
        nonlocal raced
        if not raced:
            raced = True
            _rival_sets_push_config(store, task.id, "rival")
        store.save_tasks(copy)

    def command(copy: Task, now: datetime) -> None:
        seen.append(set(copy.push_configs))
        copy.set_push_config(now=now, config={"id": "ours", "url": "https://example.com/ours"})

    saved = run_with_retries(command, load=load, save=save, clock=_clock, policy=FAST, sleep=lambda _: None)

    assert load.calls == 2
    assert seen == [set(), {"rival"}]  # the second attempt ran on what the log then held
    assert set(saved.push_configs) == set(store.get(task.id).push_configs) == {"rival", "ours"}


def test_after_a_lost_race_the_command_re_checks_and_its_refusal_is_not_retried(
    store: TaskApplication,
) -> None:
    task = _saved(store)
    load = Counted(lambda: store.get(task.id))
    raced = False

    def save(copy: Task) -> None:
        nonlocal raced
        if not raced:
            raced = True
            _rival_cancels(store, task.id)
        store.save_tasks(copy)

    def command(copy: Task, now: datetime) -> None:
        copy.cancel(now=now, reason="ours")

    with pytest.raises(TaskTerminalError):
        run_with_retries(command, load=load, save=save, clock=_clock, policy=FAST, sleep=lambda _: None)

    assert load.calls == 2
    assert _event_names(store, task.id) == ["Submitted", "Canceled"]


def test_a_copy_given_to_start_from_is_not_loaded(store: TaskApplication) -> None:
    task = _saved(store)
    load = Counted(lambda: store.get(task.id))

    def command(copy: Task, now: datetime) -> None:
        copy.set_push_config(now=now, config={"id": "ours", "url": "https://example.com/ours"})

    saved = run_with_retries(command, task=task, load=load, save=store.save_tasks, clock=_clock)

    assert saved is task
    assert load.calls == 0


# ---------------------------------------------------------------------------------- the worker's path


def _leased(store: TaskApplication) -> tuple[Task, int]:
    task = _saved(store)
    now = datetime.now(UTC)
    epoch = task.grant_lease(worker="w", now=now, until=now + timedelta(minutes=5))
    store.save_tasks(task)
    return task, epoch


async def test_a_lost_lease_after_a_reload_stops_at_once(store: TaskApplication) -> None:
    task, epoch = _leased(store)
    saves = 0

    async def save(copy: Task) -> None:
        nonlocal saves
        saves += 1
        if saves == 1:
            await asyncio.to_thread(_rival_cancels, store, task.id)  # the client cancels meanwhile
        await asyncio.to_thread(store.save_tasks, copy)

    def extend(copy: Task, now: datetime) -> None:
        copy.extend_lease(epoch=epoch, now=now, until=now + timedelta(minutes=5))

    with pytest.raises(LeaseLostError):
        await store.commit_leased(task, extend, clock=lambda: datetime.now(UTC), save=save)

    assert saves == 1  # reloaded once, refused by the fence, never saved again
    assert _event_names(store, task.id) == ["Submitted", "LeaseGranted", "Canceled"]


async def test_a_steps_outcome_is_committed_as_one_use_case_through_the_retry(store: TaskApplication) -> None:
    task, epoch = _leased(store)
    saves = 0

    async def save(copy: Task) -> None:
        nonlocal saves
        saves += 1
        if saves == 1:  # a rival appends first: the outcome is applied again to the reloaded task
            await asyncio.to_thread(_rival_sets_push_config, store, task.id, "rival")
        await asyncio.to_thread(store.save_tasks, copy)

    saved = await store.commit_step(
        task,
        epoch=epoch,
        step=0,
        outcome=Complete(message="done"),
        steps_total=2,
        max_pause=timedelta(hours=1),
        lease_seconds=60,
        clock=lambda: datetime.now(UTC),
        save=save,
    )

    assert saves == 2
    assert saved.state == TaskState.COMPLETED
    assert _event_names(store, task.id)[-3:] == ["PushConfigSet", "StepCompleted", "Completed"]


async def test_a_steps_outcome_under_a_superseded_epoch_is_refused(store: TaskApplication) -> None:
    task, epoch = _leased(store)

    async def save(copy: Task) -> None:
        await asyncio.to_thread(store.save_tasks, copy)

    with pytest.raises(LeaseLostError):
        await store.commit_step(
            task,
            epoch=epoch + 1,
            step=0,
            outcome=Continue(checkpoint={}),
            steps_total=2,
            max_pause=timedelta(hours=1),
            lease_seconds=60,
            clock=lambda: datetime.now(UTC),
            save=save,
        )
    assert _event_names(store, task.id) == ["Submitted", "LeaseGranted"]


async def test_a_lost_lease_is_never_retried_nor_loaded() -> None:
    loads = saves = 0
    task = new_task(NOW)

    async def load() -> Task:
        nonlocal loads
        loads += 1
        return task

    async def save(_: Task) -> None:
        nonlocal saves
        saves += 1

    def command(copy: Task, now: datetime) -> None:
        raise LeaseLostError(copy.id, 1, "the lease expired")

    with pytest.raises(LeaseLostError):
        await run_with_retries_async(command, task=task, load=load, save=save, clock=_clock)

    assert loads == saves == 0


async def test_a_leased_task_remembers_a_lost_lease_and_reloads_after_other_failures(
    store: TaskApplication,
) -> None:
    task, epoch = _leased(store)
    lease = LeasedTask(
        store=store,
        committer=Committer(store),
        task=task,
        epoch=epoch,
        clock=lambda: datetime.now(UTC),
        lease_seconds=300,
    )

    def unstorable(copy: Task, now: datetime) -> None:
        copy.record_effect(epoch=epoch, now=now, key="k", result={1, 2})  # a set: not JSON

    with pytest.raises(Exception):  # noqa: B017, PT011 - whatever the store refuses it with
        await lease.commit(unstorable)
    assert lease.task is not task  # the copy with the unstored event was dropped
    assert lease.task.version == task.version - 1
    assert not lease.task.effects

    await asyncio.to_thread(_rival_cancels, store, task.id)
    with pytest.raises(LeaseLostError):
        await lease.renew()
    assert lease.lost is not None
    with pytest.raises(LeaseLostError):
        await lease.commit(lambda copy, now: None)  # refused before anything runs
    assert _event_names(store, task.id) == ["Submitted", "LeaseGranted", "Canceled"]
