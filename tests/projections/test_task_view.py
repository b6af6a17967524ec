"""The current-task view on the real PostgreSQL: it follows the log, exactly once, and rebuilds.

The projector is ``projections.projector`` in a thread (``tests.support.projector``);
the tasks are moved through the domain as a worker and a client would (``tests.api.support.Advance``).
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from datetime import timedelta
from typing import Any
from uuid import UUID, uuid4

import psycopg
import pytest
from eventsourcing.persistence import Tracking
from psycopg import sql

from domain.skill import Skill
from domain.task import Task
from projections.projector import Projector
from projections.task_view import (
    PageCursor,
    TaskQuery,
    TaskViewRecorder,
    TaskViewRow,
    open_view,
)
from store.log.application import TaskApplication
from store.log.config import StoreConfig
from tests.api.support import Advance, FakeClock, make_registry, user_message
from tests.support.projector import projector_running

WAIT_S = 20.0


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def view(postgres_store: TaskApplication) -> TaskViewRecorder:
    opened = open_view(postgres_store)
    assert opened is not None
    return opened


def submit(
    store: TaskApplication, clock: FakeClock, *, tenant: str = "default", context: str | None = None
) -> UUID:
    skill: Skill = make_registry().newest("echo")
    message = user_message(**({"contextId": context} if context else {}))
    clock.advance(timedelta(seconds=1))
    return store.submit(tenant=tenant, message=message, skill=skill, clock=clock).id


def some_tasks(store: TaskApplication, clock: FakeClock) -> list[UUID]:
    """Tasks in every kind of state: submitted, working, paused, answered, completed, canceled, expired."""
    advance = Advance(store, clock)
    ids = [submit(store, clock, tenant="acme" if i % 2 else "default", context=f"c{i % 3}") for i in range(8)]
    clock.advance(timedelta(seconds=1))
    advance.start(ids[1])
    advance.ask(ids[2])
    advance.ask(ids[3])
    clock.advance(timedelta(seconds=1))
    store.answer(ids[3], tenant="acme", message=user_message("yes"), clock=clock)
    advance.complete(ids[4])
    store.cancel(ids[5], tenant="acme", clock=clock)
    advance.expire(ids[6])
    clock.advance(timedelta(hours=1))  # push configs on ended tasks move neither view (ADR 0025)
    config = {"id": "late", "url": "https://hooks.example/late"}
    store.set_push_config(ids[4], tenant="default", config=config, clock=clock)
    store.set_push_config(ids[5], tenant="acme", config=config, clock=clock)
    store.remove_push_config(ids[5], tenant="acme", config_id="late", clock=clock)
    return ids


def expected(task: Task) -> dict[str, Any]:
    """What the view must say of ``task`` (all but the log position)."""
    return {
        "task_id": task.id,
        "tenant": task.tenant,
        "context_id": task.context_id,
        "state": str(task.state),
        "status_timestamp": task.status_timestamp,
        "skill": task.skill,
        "skill_version": task.skill_version,
        "expired": task.expired,
        "version": task.version,
        "failed_attempts": len(task.failed_attempts),
        "last_failure": (
            f"step {task.next_step}, {task.failed_attempts[-1]}: {task.last_failure}"
            if task.failed_attempts
            else None
        ),
    }


def as_seen(row: TaskViewRow) -> dict[str, Any]:
    values = dict(vars(row))
    del values["position"]
    return values


def log_position(store: TaskApplication) -> int:
    return store.recorder.max_notification_id() or 0


def assert_view_equals_the_aggregates(
    store: TaskApplication, view: TaskViewRecorder, ids: list[UUID]
) -> None:
    tasks = store.get_many(ids)
    assert {r.task_id: as_seen(r) for r in view.rows()} == {t.id: expected(t) for t in tasks.values()}


@pytest.fixture
def projector(store_config: StoreConfig, postgres_store: TaskApplication) -> Iterator[Any]:
    """The projector over the test's schema, stopped afterwards."""
    with projector_running(store_config) as runner:
        yield runner


def test_the_view_follows_the_log_and_equals_the_aggregates(
    postgres_store: TaskApplication, view: TaskViewRecorder, clock: FakeClock, projector: Any
) -> None:
    ids = some_tasks(postgres_store, clock)
    projector.wait(log_position(postgres_store), timeout=WAIT_S)
    assert_view_equals_the_aggregates(postgres_store, view, ids)
    assert view.lag(postgres_store).behind == 0
    # It keeps following: a later change shows up.
    Advance(postgres_store, clock).complete(ids[0])
    projector.wait(log_position(postgres_store), timeout=WAIT_S)
    assert_view_equals_the_aggregates(postgres_store, view, ids)


def test_a_push_config_on_an_ended_task_moves_no_status_timestamp(
    postgres_store: TaskApplication, view: TaskViewRecorder, clock: FakeClock, projector: Any
) -> None:
    """The view keeps the time a task ended however many configs follow (ADR 0025)."""
    ids = some_tasks(postgres_store, clock)  # ids[4] completed, ids[5] canceled, then configs set
    projector.wait(log_position(postgres_store), timeout=WAIT_S)
    rows = {row.task_id: row for row in view.rows()}

    for task_id in ids[4:6]:
        events = list(postgres_store.history(task_id))
        ended = next(e for e in events if isinstance(e, (Task.Completed, Task.Canceled)))
        assert isinstance(events[-1], (Task.PushConfigSet, Task.PushConfigRemoved))
        assert events[-1].timestamp > ended.timestamp
        assert rows[task_id].status_timestamp == ended.timestamp
        assert rows[task_id].version == events[-1].originator_version


def test_a_restarted_projector_resumes_after_its_position(
    store_config: StoreConfig, postgres_store: TaskApplication, view: TaskViewRecorder, clock: FakeClock
) -> None:
    ids = some_tasks(postgres_store, clock)
    lag = view.lag(postgres_store)
    assert (lag.position, lag.behind) == (0, log_position(postgres_store))
    with projector_running(store_config) as runner:
        runner.wait(log_position(postgres_store), timeout=WAIT_S)
    first = log_position(postgres_store)
    ids.append(submit(postgres_store, clock))
    Advance(postgres_store, clock).complete(ids[0])
    assert view.lag(postgres_store).position == first
    with projector_running(store_config) as runner:
        runner.wait(log_position(postgres_store), timeout=WAIT_S)
    assert_view_equals_the_aggregates(postgres_store, view, ids)
    assert view.lag(postgres_store).behind == 0


def test_an_event_is_applied_once_a_position_recorded_is_skipped(
    postgres_store: TaskApplication, view: TaskViewRecorder, clock: FakeClock
) -> None:
    task_id = submit(postgres_store, clock)
    submitted = next(iter(postgres_store.history(task_id)))
    assert Projector(postgres_store, [view]).apply([(submitted, Tracking(postgres_store.name, 1))]) == 1
    before = view.rows()
    Advance(postgres_store, clock).start(task_id)
    granted = list(postgres_store.history(task_id))[1]
    # A second projector that read the view before the first applied position 1.
    assert Projector(postgres_store, [view]).apply([(granted, Tracking(postgres_store.name, 1))]) == 0
    assert view.rows() == before  # the row was not touched: one transaction with the position
    assert Projector(postgres_store, [view]).apply([(granted, Tracking(postgres_store.name, 2))]) == 1
    assert view.row(task_id) is not None
    assert view.rows()[0].state == "TASK_STATE_WORKING"


def test_the_rebuilt_view_equals_the_live_one_row_for_row(
    store_config: StoreConfig,
    postgres_store: TaskApplication,
    view: TaskViewRecorder,
    clock: FakeClock,
    projector: Any,
) -> None:
    some_tasks(postgres_store, clock)
    projector.wait(log_position(postgres_store), timeout=WAIT_S)
    live = view.rows()
    assert view.rebuild(postgres_store).position == log_position(postgres_store)
    assert view.rows() == live  # every column, log positions included


def test_a_rebuild_while_the_projector_runs_and_tasks_change_loses_nothing(
    store_config: StoreConfig,
    postgres_store: TaskApplication,
    view: TaskViewRecorder,
    clock: FakeClock,
    projector: Any,
) -> None:
    ids = some_tasks(postgres_store, clock)
    projector.wait(log_position(postgres_store), timeout=WAIT_S)
    # Damage the live view: a row lost, another wrong. The rebuild repairs both.
    with psycopg.connect(store_config.database_url, autocommit=True) as conn:
        table = sql.Identifier(store_config.schema, "longhaul_task_view")
        conn.execute(sql.SQL("DELETE FROM {} WHERE task_id = %s").format(table), (ids[0],))
        conn.execute(
            sql.SQL("UPDATE {} SET state = 'TASK_STATE_FAILED' WHERE task_id = %s").format(table), (ids[1],)
        )
    stop = threading.Event()
    added: list[UUID] = []
    own_clock = FakeClock(clock.now)

    def keep_submitting() -> None:
        while not stop.is_set():
            added.append(submit(postgres_store, own_clock, tenant="busy"))

    writer = threading.Thread(target=keep_submitting)
    writer.start()
    try:
        while len(added) < 5:
            stop.wait(0.01)
        view.rebuild(postgres_store)
        while len(added) < 10:
            stop.wait(0.01)
    finally:
        stop.set()
        writer.join()
    projector.wait(log_position(postgres_store), timeout=WAIT_S)
    assert_view_equals_the_aggregates(postgres_store, view, ids + added)


def test_a_rebuild_before_any_projector_records_the_position_it_reached(
    store_config: StoreConfig, postgres_store: TaskApplication, view: TaskViewRecorder, clock: FakeClock
) -> None:
    ids = some_tasks(postgres_store, clock)
    assert view.rebuild(postgres_store).position == log_position(postgres_store)
    assert view.lag(postgres_store).behind == 0
    assert_view_equals_the_aggregates(postgres_store, view, ids)
    Advance(postgres_store, clock).complete(ids[0])
    with projector_running(store_config) as runner:  # resumes after the rebuilt position
        runner.wait(log_position(postgres_store), timeout=WAIT_S)
    assert_view_equals_the_aggregates(postgres_store, view, ids)


def test_every_kind_of_event_moves_the_row_as_it_moves_the_aggregate(
    postgres_store: TaskApplication, view: TaskViewRecorder, clock: FakeClock, projector: Any
) -> None:
    store, advance = postgres_store, Advance(postgres_store, clock)
    ids = [submit(store, clock) for _ in range(5)]

    def step(task_id: UUID, command: Any) -> None:
        clock.advance(timedelta(seconds=1))
        task = store.get(task_id)
        if task.lease_owner is None:
            task.grant_lease(worker="w", now=clock(), until=clock() + timedelta(hours=1))
            clock.advance(timedelta(seconds=1))
        command(task, task.lease_epoch, clock())
        store.save_tasks(task)

    agent = {"role": "ROLE_AGENT", "parts": [{"text": "…"}]}
    step(ids[0], lambda t, e, now: t.report_progress(epoch=e, now=now, message=agent))
    step(ids[0], lambda t, e, now: t.record_effect(epoch=e, now=now, key="k", result=1))
    step(ids[0], lambda t, e, now: t.extend_lease(epoch=e, now=now, until=now + timedelta(hours=2)))
    step(ids[0], lambda t, e, now: t.release_lease(epoch=e, now=now, reason="drain"))
    step(ids[0], lambda t, e, now: t.fail_attempt(epoch=e, now=now, step=0, cause="error", detail="boom"))
    clock.advance(timedelta(hours=3))  # w's lease on ids[0] ends unreleased: the next claim counts it
    lost = store.get(ids[0])
    lost.grant_lease(worker="w2", now=clock(), until=clock() + timedelta(hours=1))
    store.save_tasks(lost)
    assert lost.failed_attempts == ["error", "lease_lost"]
    step(ids[1], lambda t, e, now: t.fail_attempt(epoch=e, now=now, step=0, cause="timeout", detail="late"))
    step(ids[1], lambda t, e, now: t.fail(epoch=e, now=now, reason="no", message=agent))
    step(ids[2], lambda t, e, now: t.reject(epoch=e, now=now, reason="no", message=agent))
    question = {"messageId": "q", "role": "ROLE_AGENT", "parts": [{"text": "key?"}]}
    step(
        ids[3],
        lambda t, e, now: t.request_input(
            epoch=e,
            now=now,
            step=0,
            checkpoint={},
            question=question,
            deadline=now + timedelta(days=1),
            auth=True,
        ),
    )
    clock.advance(timedelta(days=2))
    store.end_pause(ids[3], clock=clock)
    config = {"id": "hook", "url": "https://example.invalid/hook"}
    store.set_push_config(ids[4], tenant="default", config=config, clock=clock)
    store.remove_push_config(ids[4], tenant="default", config_id="hook", clock=clock)
    advance.expire(ids[4])

    projector.wait(log_position(store), timeout=WAIT_S)
    assert_view_equals_the_aggregates(store, view, ids)
    live = view.rows()
    view.rebuild(store)
    assert view.rows() == live


def test_pages_are_newest_first_tenant_walled_and_filtered(
    postgres_store: TaskApplication, view: TaskViewRecorder, clock: FakeClock
) -> None:
    ids = some_tasks(postgres_store, clock)
    view.rebuild(postgres_store)
    tasks = postgres_store.get_many(ids)
    mine = sorted(
        (t for t in tasks.values() if t.tenant == "acme" and not t.expired),
        key=lambda t: (t.status_timestamp, t.id),
        reverse=True,
    )
    seen: list[UUID] = []
    cursor: PageCursor | None = None
    while True:
        page = view.page(TaskQuery(tenant="acme"), size=2, after=cursor)
        assert page.total == len(mine)
        seen += [r.task_id for r in page.rows]
        if page.next is None:
            break
        cursor = PageCursor.parse(page.next.token())
    assert seen == [t.id for t in mine]
    assert all(tasks[i].tenant == "acme" for i in seen)
    assert view.page(TaskQuery(tenant="nobody"), size=10).total == 0
    working = view.page(TaskQuery(tenant="acme", state="TASK_STATE_WORKING"), size=10)
    assert {r.task_id for r in working.rows} == {t.id for t in mine if t.state == "TASK_STATE_WORKING"}
    in_c1 = view.page(TaskQuery(tenant="acme", context_id="c1"), size=10)
    assert {r.task_id for r in in_c1.rows} == {t.id for t in mine if t.context_id == "c1"}
    since = mine[1].status_timestamp
    recent = view.page(TaskQuery(tenant="acme", status_after=since), size=10)
    assert {r.task_id for r in recent.rows} == {t.id for t in mine if t.status_timestamp >= since}


@pytest.mark.parametrize("token", ["", "not base64!", "bm9wZQ", PageCursor.__name__])
def test_a_page_token_this_view_did_not_make_is_refused(token: str) -> None:
    with pytest.raises(ValueError, match="pageToken"):
        PageCursor.parse(token)


def test_a_page_token_round_trips() -> None:
    cursor = PageCursor(FakeClock().now, uuid4())
    assert PageCursor.parse(cursor.token()) == cursor
