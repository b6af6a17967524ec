"""What ``FoldedView.fold`` leaves out (ADR 0044) changes nothing: the row it does not read; the
projector's batches (ADR 0048), cut anywhere, fold the log as a rebuild does, and a position
recorded is never applied twice: not by the same batch again, not by a stale projector, not where
the two views stand at different positions.

Real PostgreSQL, the tasks of ``tests/projections/test_task_view.py``.
"""

from __future__ import annotations

import itertools
from typing import Any
from uuid import UUID

import hypothesis
from eventsourcing.persistence import Tracking
from hypothesis import strategies as st
from psycopg.sql import SQL, Identifier

from domain.task import Task
from projections.folded_view import FoldedView
from projections.log_follower import Followed
from projections.projector import Projector
from projections.retention_index import open_index
from projections.task_view import open_view
from store.log.application import TaskApplication
from tests.api.support import Advance, FakeClock
from tests.projections.test_task_view import some_tasks


def logged(store: TaskApplication) -> list[tuple[Task.Event, int]]:
    """Every event of the log with its position."""
    found = store.recorder.select_notifications(start=1, limit=10_000)
    events = [(store.mapper.to_domain_event(n), n.id) for n in found]
    return [(e, position) for e, position in events if isinstance(e, Task.Event)]


def views(store: TaskApplication) -> list[FoldedView[Any]]:
    opened = [open_view(store), open_index(store)]
    assert None not in opened
    return [v for v in opened if v is not None]


def test_an_event_whose_row_is_not_read_folds_as_it_would_from_the_row(
    postgres_store: TaskApplication,
) -> None:
    some_tasks(postgres_store, FakeClock())
    events = logged(postgres_store)
    assert {type(e) for e, _ in events} >= {Task.Submitted, Task.LeaseGranted, Task.Completed, Task.Expired}
    for view in views(postgres_store):
        rows: dict[UUID, Any] = {}
        unread = 0
        for event, position in events:
            before = rows.get(event.originator_id)
            after = view.next_row(before, event, position)
            if not view.reads_row(event):
                unread += 1
                assert view.next_row(None, event, position) == after
            if after is not None:
                rows[event.originator_id] = after
        assert unread > 0


def _reset(store: TaskApplication, views: list[FoldedView[Any]]) -> None:
    """Every view back to no row and no position."""
    with store.recorder.datastore.transaction(commit=True) as curs:  # type: ignore[attr-defined]
        for view in views:
            for table in (view.view_table_name, view.tracking_table_name):
                curs.execute(
                    SQL("DELETE FROM {}.{}").format(Identifier(view.datastore.schema), Identifier(table))
                )


def _batches(events: list[tuple[Task.Event, int]], name: str, cuts: list[int]) -> list[list[Followed]]:
    """``events`` as the follower would hand them over, cut at ``cuts``."""
    followed: list[Followed] = [(e, Tracking(name, position)) for e, position in events]
    bounds = [0, *sorted(set(cuts)), len(followed)]
    return [followed[a:b] for a, b in itertools.pairwise(bounds) if a < b]


@hypothesis.settings(
    max_examples=12, deadline=None, suppress_health_check=[hypothesis.HealthCheck.function_scoped_fixture]
)
@hypothesis.given(data=st.data())
def test_the_log_in_batches_of_any_cut_folds_as_rebuilt_and_a_batch_again_writes_nothing(
    postgres_store: TaskApplication, data: st.DataObject
) -> None:
    if not logged(postgres_store):
        clock = FakeClock()
        ids = some_tasks(postgres_store, clock)
        Advance(postgres_store, clock).complete(ids[0])
    events = logged(postgres_store)
    opened = views(postgres_store)
    rebuilt = []
    for view in opened:
        _reset(postgres_store, [view])
        view.rebuild(postgres_store)
        rebuilt.append(view.rows())
    _reset(postgres_store, opened)
    cuts = data.draw(st.lists(st.integers(1, len(events) - 1), max_size=8), label="cuts")
    projector = Projector(postgres_store, opened)
    for batch in _batches(events, postgres_store.name, cuts):
        projector.apply(batch)
        assert Projector(postgres_store, opened).apply(batch) == 0  # recorded: skipped by every view
    assert [view.rows() for view in opened] == rebuilt
    assert all(view.lag(postgres_store).position == events[-1][1] for view in opened)


def test_a_batch_that_overlaps_the_recorded_position_applies_only_what_follows_it(
    postgres_store: TaskApplication,
) -> None:
    clock = FakeClock()
    ids = some_tasks(postgres_store, clock)
    Advance(postgres_store, clock).complete(ids[0])
    events = logged(postgres_store)
    name = postgres_store.name
    opened = views(postgres_store)
    whole = _batches(events, name, [])[0]
    Projector(postgres_store, opened).apply(whole)
    expected_rows = [view.rows() for view in opened]
    _reset(postgres_store, opened)

    half = len(whole) // 2
    Projector(postgres_store, opened).apply(whole[:half])
    # The task view is ahead (as after a rebuild): the projector starts after the index's position.
    ahead = opened[0]
    Projector(postgres_store, [ahead]).apply(whole[half : half + 3])
    projector = Projector(postgres_store, opened)
    assert projector.after == whole[half - 1][1].notification_id
    projector.apply(whole[half - 2 :])  # two events already applied by both, three by one
    assert [view.rows() for view in opened] == expected_rows


def test_a_projector_whose_positions_moved_under_it_reads_them_again_and_applies_nothing_twice(
    postgres_store: TaskApplication,
) -> None:
    clock = FakeClock()
    some_tasks(postgres_store, clock)
    events = logged(postgres_store)
    opened = views(postgres_store)
    first, second = _batches(events, postgres_store.name, [len(events) // 2])
    stale = Projector(postgres_store, opened)  # read the positions: none recorded
    Projector(postgres_store, opened).apply([*first, *second])
    applied = [view.rows() for view in opened]
    assert stale.apply(first) == 0  # the compare-and-set fails, the positions are read again
    assert stale.apply(second) == 0
    assert [view.rows() for view in opened] == applied
    for view in opened:  # a rebuild where the positions are recorded keeps them and the rows
        view.rebuild(postgres_store)
    assert [view.rows() for view in opened] == applied
