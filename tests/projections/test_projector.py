"""The projector folds each batch into both views in one transaction, exactly once (ADR 0047).

Real PostgreSQL; the tasks of ``tests/projections/test_task_view.py``, in every kind of state.
A batch folds to the rows the views' ``next_row`` gives one event at a time, however the log is
cut into batches; a batch costs one transaction (the rows and both positions carry one ``xmin``);
a batch part of which a view applied already is refused whole; a view ahead of the other resumes
after its own position; a projector stopped mid-stream (and one SIGKILLed, a real process)
resumes to rows equal to a rebuild from the log.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from itertools import pairwise
from typing import Any
from uuid import UUID

import psycopg
import pytest
from eventsourcing.persistence import IntegrityError, Tracking
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from psycopg import sql

from domain.task import Task
from projections.folded_view import FoldedView
from projections.log_follower import Followed
from projections.projector import PROJECTIONS, Projector, running_projector
from projections.retention_index import INDEX_TABLE
from projections.task_view import VIEW_TABLE
from store.application import APP_NAME, TaskApplication
from store.config import StoreConfig
from tests.api.support import Advance, FakeClock
from tests.projections.test_task_view import WAIT_S, log_position, some_tasks, submit


def followed(store: TaskApplication, after: int = 0) -> list[Followed]:
    """The log after ``after``, as the projector's follower hands it over."""
    found = store.recorder.select_notifications(start=after + 1, limit=10_000)
    return [(store.mapper.to_domain_event(n), Tracking(store.name, n.id)) for n in found]


def one_at_a_time(view: FoldedView[Any], log: list[Followed]) -> list[Any]:
    """The rows ``view.next_row`` gives the log applied one event at a time, in memory."""
    rows: dict[UUID, Any] = {}
    for event, tracking in log:
        if isinstance(event, Task.Event):
            row = view.next_row(rows.get(event.originator_id), event, tracking.notification_id)
            if row is not None:
                rows[row.task_id] = row
    return [rows[task_id] for task_id in sorted(rows)]


def of_the_views(config: StoreConfig, statement: str) -> sql.Composed:
    """``statement`` (``{}`` the table) on both views' rows and their positions (the application's)."""
    both = []
    for table in (VIEW_TABLE, INDEX_TABLE):
        both.append(sql.SQL(statement).format(sql.Identifier(config.schema, table)))
        tracking = sql.Identifier(config.schema, f"{table}_tracking")
        both.append(sql.SQL(statement + " WHERE application_name = {}").format(tracking, APP_NAME))
    return sql.SQL(" UNION ALL ").join(both) if statement.startswith("SELECT") else sql.SQL("; ").join(both)


def empty_the_views(config: StoreConfig) -> None:
    with psycopg.connect(config.database_url, autocommit=True) as conn:
        conn.execute(of_the_views(config, "DELETE FROM {}"))


def writing_transactions(config: StoreConfig) -> set[str]:
    """The transactions that wrote the views' rows and positions (their ``xmin``)."""
    with psycopg.connect(config.database_url, autocommit=True) as conn:
        return {r[0] for r in conn.execute(of_the_views(config, "SELECT xmin::text FROM {}"))}


@pytest.fixture
def log(postgres_store: TaskApplication) -> list[Followed]:
    clock = FakeClock()
    ids = some_tasks(postgres_store, clock)
    Advance(postgres_store, clock).complete(ids[0])
    return followed(postgres_store)


def assert_views_fold_the_log(store: TaskApplication, projector: Projector, log: list[Followed]) -> None:
    for view in projector.views:
        assert view.rows() == one_at_a_time(view, log)
        assert view.lag(store).position == log[-1][1].notification_id


def test_n_commits_that_arrive_together_cost_one_transaction(
    store_config: StoreConfig, postgres_store: TaskApplication, log: list[Followed]
) -> None:
    assert len(log) > 20
    projector = Projector(postgres_store)
    projector.apply(log)
    assert projector.transactions == 1
    assert len(writing_transactions(store_config)) == 1  # both views' rows and positions: one commit
    assert_views_fold_the_log(postgres_store, projector, log)
    projector.apply(log)  # all applied: nothing to do, no transaction
    assert projector.transactions == 1


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(cuts=st.sets(st.integers(min_value=1, max_value=200), max_size=12))
def test_a_log_cut_into_any_batches_folds_to_the_rows_one_event_at_a_time(
    store_config: StoreConfig, postgres_store: TaskApplication, log: list[Followed], cuts: set[int]
) -> None:
    empty_the_views(store_config)
    bounds = [0, *sorted(c for c in cuts if c < len(log)), len(log)]
    batches = [log[a:b] for a, b in pairwise(bounds)]
    projector = Projector(postgres_store)
    for batch in batches:
        projector.apply(batch)
    assert projector.transactions == len(batches)
    assert_views_fold_the_log(postgres_store, projector, log)
    for view in projector.views:  # and a rebuild from the log agrees, row for row
        live = view.rows()
        view.rebuild(postgres_store)
        assert view.rows() == live


def test_a_batch_part_of_which_a_view_applied_is_refused_whole(
    store_config: StoreConfig, postgres_store: TaskApplication, log: list[Followed]
) -> None:
    projector = Projector(postgres_store)  # both views at 0
    view, index = projector.views
    for event, tracking in log[:3]:  # another projector applied the first three to the view
        view.apply(event, tracking)
    before = view.rows()
    with pytest.raises(IntegrityError):
        projector.apply(log)
    assert view.rows() == before
    assert view.lag(postgres_store).position == log[2][1].notification_id
    assert index.rows() == []  # the index's part was in the same transaction: rolled back too
    assert index.lag(postgres_store).position == 0
    resumed = Projector(postgres_store)  # a restart reads the positions again
    resumed.apply(log)
    assert_views_fold_the_log(postgres_store, resumed, log)


@pytest.mark.parametrize("ahead", [0, 1], ids=[kept.key for kept in PROJECTIONS])
def test_a_view_ahead_of_the_other_resumes_after_its_own_position(
    store_config: StoreConfig, postgres_store: TaskApplication, log: list[Followed], ahead: int
) -> None:
    first = Projector(postgres_store)
    rebuilt = first.views[ahead].rebuild(postgres_store)  # records the log's end for it alone
    assert rebuilt.position == log[-1][1].notification_id
    Advance(postgres_store, FakeClock()).complete(submit(postgres_store, FakeClock()))
    whole = followed(postgres_store)
    with running_projector(store_config) as progress:
        progress.wait(log_position(postgres_store), timeout=WAIT_S)
    projector = Projector(postgres_store)
    assert projector.positions == [whole[-1][1].notification_id] * 2
    assert_views_fold_the_log(postgres_store, projector, whole)


def test_a_projector_stopped_mid_stream_resumes_to_the_rebuilt_rows(
    store_config: StoreConfig, postgres_store: TaskApplication
) -> None:
    clock = FakeClock()
    some_tasks(postgres_store, clock)
    with running_projector(store_config) as progress:
        for _ in range(5):  # events keep arriving while it runs
            Advance(postgres_store, clock).complete(submit(postgres_store, clock))
        progress.wait(log_position(postgres_store) - 10, timeout=WAIT_S)
    stopped_at = Projector(postgres_store).positions
    for _ in range(3):
        Advance(postgres_store, clock).complete(submit(postgres_store, clock))
    assert min(stopped_at) < log_position(postgres_store)
    with running_projector(store_config) as progress:
        progress.wait(log_position(postgres_store), timeout=WAIT_S)
    assert_views_equal_a_rebuild(postgres_store)


def assert_views_equal_a_rebuild(store: TaskApplication) -> None:
    projector = Projector(store)
    whole = followed(store)
    assert projector.positions == [whole[-1][1].notification_id] * 2
    for view in projector.views:
        live = view.rows()
        assert live == one_at_a_time(view, whole)
        view.rebuild(store)
        assert view.rows() == live


def _env(config: StoreConfig) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("LONGHAUL_")}
    env["LONGHAUL_DATABASE_URL"] = config.database_url
    env["LONGHAUL_DATABASE_SCHEMA"] = config.schema
    return env


def _start(config: StoreConfig) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [sys.executable, "-m", "longhaul.cli", "projector"],
        env=_env(config),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )


def _wait_for(store: TaskApplication, done: Any, what: str) -> None:
    deadline = time.monotonic() + WAIT_S
    while not done(Projector(store).positions):
        assert time.monotonic() < deadline, what
        time.sleep(0.05)


def test_a_projector_sigkilled_mid_stream_resumes_exactly_once(
    store_config: StoreConfig, postgres_store: TaskApplication
) -> None:
    """``longhaul projector``, a real process, killed while it applies; a second one finishes."""
    clock = FakeClock()
    some_tasks(postgres_store, clock)
    process = _start(store_config)
    try:
        _wait_for(postgres_store, lambda at: min(at) > 0, "the projector never applied a batch")
        for _ in range(20):  # the log grows while it runs
            Advance(postgres_store, clock).complete(submit(postgres_store, clock))
        process.send_signal(signal.SIGKILL)
        process.wait(timeout=WAIT_S)
        for _ in range(5):
            Advance(postgres_store, clock).complete(submit(postgres_store, clock))
        assert min(Projector(postgres_store).positions) < log_position(postgres_store)
        process = _start(store_config)
        end = log_position(postgres_store)
        _wait_for(postgres_store, lambda at: min(at) >= end, "the restarted projector never caught up")
    finally:
        process.kill()
        process.wait(timeout=WAIT_S)
    assert_views_equal_a_rebuild(postgres_store)
