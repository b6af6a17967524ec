"""The projector: keeps every projection following the log (``longhaul projector``, and ``up``).

The projections are the current-task view (``projections.task_view``), the retention index
(``projections.retention_index``) and the file index (``projections.file_index``), each a
``FoldedView`` over the store's database. One subscription to the log (a ``LogFollower``, on the
library's subscription) feeds them all, and each batch it hands over is applied to every view in
**one transaction** (ADR 0048): per view,
its position moved by compare-and-set (``FoldedView.move_position``), one read of the rows the
batch needs and one upsert per row changed (``FoldedView.fold``). Each view keeps its own
position, so each resumes where it stopped and can be rebuilt on its own; the subscription starts
after the lowest of their positions, and a view skips what it has applied.
"""

from __future__ import annotations

import functools
import logging
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from eventsourcing.postgres import PostgresDatastore

from domain.task import Task
from projections import file_index, retention_index, task_view
from projections.folded_view import FoldedView, Lag, Rebuilt
from projections.log_follower import Followed, LogFollower
from projections.shared_log import SharedLog
from store.log import PostgresRunQueueRecorder, StoreConfig, TaskApplication, retry_lost_connection

log = logging.getLogger(__name__)

LAG_LOG_S = 60.0
"""How often a running projector logs its lag."""
WAIT_S = 0.1
"""How long the projector waits for the next batch before it looks at its stop flag again."""
GATHER_S = 0.05
"""How long a batch gathers events after its first: the commits of that time share a transaction."""


@dataclass(frozen=True)
class Kept:
    """One projection the projector keeps: its names and how to open its view."""

    key: str
    """Its name in metrics (the ``projection`` label)."""
    label: str
    """Its name in logs and ``longhaul projections``."""
    open: Callable[[TaskApplication], FoldedView[Any] | None]


PROJECTIONS = (
    Kept("task_view", "current-task view", task_view.open_view),
    Kept("retention_index", "retention index", retention_index.open_index),
    Kept("file_index", "file index", file_index.open_file_index),
)


class PositionMovedError(Exception):
    """A view's recorded position is not the one the projector read: another writer moved it."""


class Projector:
    """``views`` over ``app``'s database, applying the log's events to them in shared transactions."""

    def __init__(self, app: TaskApplication, views: Sequence[FoldedView[Any]]) -> None:
        recorder = app.recorder
        assert isinstance(recorder, PostgresRunQueueRecorder)
        self._app = app
        self._datastore: PostgresDatastore = recorder.datastore
        if any(view.datastore is not self._datastore for view in views):
            raise ValueError("a projector's views share its store's database pool")
        self._views = list(views)
        self._positions: list[int | None] = []
        self._read_positions()

    @property
    def after(self) -> int:
        """The position the projector follows the log after: the lowest of the views'."""
        return min((p or 0 for p in self._positions), default=0)

    def _read_positions(self) -> None:
        self._positions = [view.max_tracking_id(self._app.name) for view in self._views]

    def apply(self, batch: Sequence[Followed]) -> int:
        """Apply ``batch`` (events with their positions, in log order) to every view; the rows written.

        One transaction for all the views, so each event is applied to each view exactly once: a
        view skips the events at or before its recorded position, and if that position moved since
        it was read (a second projector, a rebuild), the transaction is rolled back and the batch
        applied again after the positions are read anew. A lost connection tries it again too
        (``retry_lost_connection``).
        """
        while True:
            try:
                return retry_lost_connection(functools.partial(self._apply, batch))
            except PositionMovedError:
                self._read_positions()

    def _apply(self, batch: Sequence[Followed]) -> int:
        written = 0
        moved: list[tuple[int, int]] = []
        with self._datastore.transaction(commit=True) as curs:
            for index, view in enumerate(self._views):
                recorded = self._positions[index]
                new = [
                    (event, t.notification_id) for event, t in batch if t.notification_id > (recorded or 0)
                ]
                if not new:
                    continue
                to = new[-1][1]
                if not view.move_position(curs, self._app.name, recorded, to):
                    raise PositionMovedError(f"{view.tracking_table_name} moved from {recorded}")
                # The log holds nothing but task events; anything else would only move the position.
                written += view.fold(curs, [(e, p) for e, p in new if isinstance(e, Task.Event)])
                moved.append((index, to))
        for index, to in moved:
            self._positions[index] = to
        return written

    def follow(
        self,
        stop: threading.Event,
        *,
        lag_every_s: float = LAG_LOG_S,
        labels: Sequence[str] = (),
        gather_s: float = GATHER_S,
        shared_log: SharedLog | None = None,
    ) -> None:
        """Follow the log until ``stop`` is set (blocking), applying what arrives batch by batch.

        A batch is what arrives within ``gather_s`` of its first event (at most 500 events): at
        low load each commit would otherwise be a transaction of its own. ``shared_log`` is the shared
        subscription to follow the log on (``up``'s), or ``None`` for one of its own.

        Logs each view's lag every ``lag_every_s`` seconds (named by ``labels``, in the views'
        order). A failure of the subscription or the database is raised.
        """
        with LogFollower(self._app, after=self.after, shared_log=shared_log) as follower:
            next_log = time.monotonic() + lag_every_s
            while not stop.is_set():
                batch = follower.take(WAIT_S, gather_s=gather_s)
                if batch:
                    self.apply(batch)
                if time.monotonic() >= next_log:
                    for label, view in zip(labels, self._views, strict=False):
                        lag = view.lag(self._app)
                        log.info(
                            "projector: %s at position %d of %d (%d behind)",
                            label,
                            lag.position,
                            lag.log_position,
                            lag.behind,
                        )
                    next_log = time.monotonic() + lag_every_s


def run_projector(
    config: StoreConfig,
    stop: threading.Event,
    *,
    retry_s: float = 1.0,
    lag_every_s: float = LAG_LOG_S,
    projections: Sequence[Kept] = PROJECTIONS,
    shared_log: SharedLog | None = None,
) -> None:
    """Keep ``projections`` following the log until ``stop`` is set (blocking; run it in a thread).

    ``shared_log`` is the shared subscription to follow the log on (``up`` shares one between the
    projector, the relay and the sequencer), or ``None`` for one of its own.

    Opens its own ``TaskApplication`` over ``config`` (which migrates the schema). A failure (the
    database gone) is logged and the projector started again after ``retry_s``, each view from
    its recorded position.
    """
    while not stop.is_set():
        try:
            app = TaskApplication(config)
            try:
                views = [view for kept in projections if (view := kept.open(app)) is not None]
                projector = Projector(app, views)
                for kept, view in zip(projections, views, strict=True):
                    position = view.max_tracking_id(app.name) or 0
                    log.info("projector: %s following the log after position %d", kept.label, position)
                projector.follow(
                    stop,
                    lag_every_s=lag_every_s,
                    labels=[kept.label for kept in projections],
                    shared_log=shared_log,
                )
            finally:
                app.close()
        except Exception as error:  # noqa: BLE001 - any failure: restart from the recorded positions
            log.warning("projector stopped (%r); restarting in %.1fs", error, retry_s)
            stop.wait(retry_s)


def rebuild_all(store: TaskApplication) -> list[tuple[str, Rebuilt]]:
    """Rebuild every projection from the log (while the projector runs), one after the other."""
    rebuilt = []
    for kept in PROJECTIONS:
        view = kept.open(store)
        assert view is not None
        rebuilt.append((kept.label, view.rebuild(store)))
    return rebuilt


def lags(store: TaskApplication) -> list[tuple[Kept, Lag]]:
    """Every projection's position and lag; none for a memory store."""
    found = []
    for kept in PROJECTIONS:
        view = kept.open(store)
        if view is not None:
            found.append((kept, view.lag(store)))
    return found
