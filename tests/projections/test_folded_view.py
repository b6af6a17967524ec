"""What ``FoldedView.apply`` leaves out (ADR 0044) changes nothing: the row it does not read, the
transaction of an event that only moves the position; a recorded position is refused on every path.

Real PostgreSQL, the tasks of ``tests/projections/test_task_view.py``.
"""

from __future__ import annotations

from typing import Any
from uuid import UUID

import pytest
from eventsourcing.persistence import IntegrityError, Tracking

from domain.task import Task
from projections.folded_view import FoldedView
from projections.retention_index import open_index
from projections.task_view import open_view
from store.application import TaskApplication
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


def test_every_path_of_apply_refuses_a_recorded_position_and_the_log_folds_as_rebuilt(
    postgres_store: TaskApplication,
) -> None:
    clock = FakeClock()
    ids = some_tasks(postgres_store, clock)
    Advance(postgres_store, clock).complete(ids[0])
    events = logged(postgres_store)
    name = postgres_store.name
    for view in views(postgres_store):
        for event, position in events:
            view.apply(event, Tracking(name, position))
            with pytest.raises(IntegrityError):  # the same position again: refused, whichever path
                view.apply(event, Tracking(name, position))
        assert view.lag(postgres_store).position == events[-1][1]
        live = view.rows()
        view.rebuild(postgres_store)
        assert view.rows() == live
        with pytest.raises(IntegrityError):  # an earlier position too
            view.apply(events[0][0], Tracking(name, 1))
