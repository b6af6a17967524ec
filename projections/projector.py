"""The projector: keeps both read models following the log (``longhaul projector``, and ``up``).

The read models are the current-task view (``projections.task_view``) and the retention index
(``projections.retention_index``), both ``FoldedView``s. The projector follows the log once, on
the library's subscription (``projections.log_follower.LogFollower``), and applies each batch
that arrived to both views in one transaction (``Projector.apply``, ADR 0047): each view folds
its part in memory, reads the rows it needs in one query, upserts each changed row once and
writes its own position. Each view keeps its own position, so each resumes where it stopped
(the part of a batch a view already applied is skipped for it) and is rebuilt on its own; a
batch any part of which a view had applied already (another projector ran it) is refused whole
and rolled back, and the projector restarts from the recorded positions.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from projections import retention_index, task_view
from projections.folded_view import FoldedView, Lag, Rebuilt
from projections.log_follower import Followed, LogFollower
from store.application import TaskApplication
from store.config import StoreConfig
from store.retry import retry_lost_connection

log = logging.getLogger(__name__)

LAG_LOG_S = 60.0
"""How often a running projector logs its lag."""
_WAIT_S = 0.1
"""How long the projector waits for a batch before it looks at its stop event again."""


@dataclass(frozen=True)
class Kept:
    """One read model the projector keeps: its names, how to open its view."""

    key: str
    """Its name in metrics (the ``projection`` label)."""
    label: str
    """Its name in logs and ``longhaul projections``."""
    open: Callable[[TaskApplication], FoldedView[Any] | None]


PROJECTIONS = (
    Kept("task_view", "current-task view", task_view.open_view),
    Kept("retention_index", "retention index", retention_index.open_index),
)


class Progress:
    """The positions a running projector committed, one per read model, to wait on (tests, tools)."""

    def __init__(self) -> None:
        self._changed = threading.Condition()
        self._positions: tuple[int, ...] | None = None

    def set(self, positions: Sequence[int]) -> None:
        """Record the views' positions (after a commit, or read at a start)."""
        with self._changed:
            self._positions = tuple(positions)
            self._changed.notify_all()

    def wait(self, position: int, timeout: float) -> None:
        """Block until every view applied the log up to ``position``; ``TimeoutError`` after ``timeout``."""
        with self._changed:
            if not self._changed.wait_for(
                lambda: self._positions is not None and min(self._positions) >= position, timeout
            ):
                raise TimeoutError(f"the projector did not reach log position {position} in {timeout}s")


class Projector:
    """Both read models over one store, each at its own position; a batch to both in one transaction."""

    def __init__(self, store: TaskApplication) -> None:
        self.store = store
        views = [kept.open(store) for kept in PROJECTIONS]
        if any(view is None for view in views):
            raise ValueError("the projector needs a PostgreSQL store")
        self.views: list[FoldedView[Any]] = [view for view in views if view is not None]
        self.positions = [view.max_tracking_id(store.name) or 0 for view in self.views]
        """Each view's position: the last it applied (0 before the first)."""
        self.transactions = 0
        """The transactions committed (one per batch that any view had not applied)."""

    @property
    def after(self) -> int:
        """Where to follow the log from: the position of the view furthest behind."""
        return min(self.positions)

    def apply(self, batch: Sequence[Followed]) -> None:
        """Apply ``batch`` (events in log order) to both views, in one transaction.

        Each view gets only the part after its own position; no transaction when neither has
        any. A lost connection rolls the transaction back and the whole batch is tried again
        (``retry_lost_connection``); ``IntegrityError`` when a view had applied part of its part
        already (nothing is written then).
        """
        parts = [[f for f in batch if f[1].notification_id > at] for at in self.positions]
        if not any(parts):
            return
        retry_lost_connection(functools.partial(self._apply, parts))
        self.transactions += 1
        self.positions = [
            part[-1][1].notification_id if part else at
            for part, at in zip(parts, self.positions, strict=True)
        ]

    def _apply(self, parts: list[list[Followed]]) -> None:
        with self.views[0].datastore.transaction(commit=True) as curs:
            for view, part in zip(self.views, parts, strict=True):
                view.fold(curs, part)


def run_projector(
    config: StoreConfig,
    stop: threading.Event,
    *,
    retry_s: float = 1.0,
    lag_every_s: float = LAG_LOG_S,
    progress: Progress | None = None,
) -> None:
    """Keep both read models following the log until ``stop`` is set (blocking; run it in a thread).

    Logs each read model's lag every ``lag_every_s`` seconds. A failure (the database gone, a
    position recorded by another projector) is logged and the projector restarted, each view
    from its recorded position. ``progress`` learns the positions as they are committed.
    """
    while not stop.is_set():
        try:
            asyncio.run(_follow(config, stop, lag_every_s, progress or Progress()))
        except Exception as error:  # noqa: BLE001 - any failure: restart from the recorded positions
            log.warning("projector stopped (%r); restarting in %.1fs", error, retry_s)
            stop.wait(retry_s)


async def _follow(config: StoreConfig, stop: threading.Event, lag_every_s: float, progress: Progress) -> None:
    """Follow the log from the view furthest behind, a batch at a time, until ``stop``.

    The batches are applied on this thread's own event loop, which serves nothing else.
    """
    store = TaskApplication(config)
    try:
        projector = Projector(store)
        for kept, position in zip(PROJECTIONS, projector.positions, strict=True):
            log.info("projector: %s following the log after position %d", kept.label, position)
        progress.set(projector.positions)
        async with LogFollower(store, after=projector.after) as follower:
            next_log = time.monotonic() + lag_every_s
            while not stop.is_set():
                batch = await follower.next_batch(_WAIT_S)
                if batch:
                    projector.apply(batch)
                    progress.set(projector.positions)
                if time.monotonic() >= next_log:
                    for kept, view in zip(PROJECTIONS, projector.views, strict=True):
                        lag = view.lag(store)
                        log.info(
                            "projector: %s at position %d of %d (%d behind)",
                            kept.label,
                            lag.position,
                            lag.log_position,
                            lag.behind,
                        )
                    next_log = time.monotonic() + lag_every_s
    finally:
        store.close()


@contextlib.contextmanager
def running_projector(config: StoreConfig, *, retry_s: float = 0.1) -> Iterator[Progress]:
    """``run_projector`` in a thread of its own while the block runs (tests, benchmarks), then stopped."""
    stop, progress = threading.Event(), Progress()
    thread = threading.Thread(
        target=run_projector,
        args=(config, stop),
        kwargs={"retry_s": retry_s, "progress": progress},
        name="projector",
        daemon=True,
    )
    thread.start()
    try:
        yield progress
    finally:
        stop.set()
        thread.join()


def rebuild_all(store: TaskApplication) -> list[tuple[str, Rebuilt]]:
    """Rebuild every read model from the log (while the projector runs), one after the other."""
    rebuilt = []
    for kept in PROJECTIONS:
        view = kept.open(store)
        assert view is not None
        rebuilt.append((kept.label, view.rebuild(store)))
    return rebuilt


def lags(store: TaskApplication) -> list[tuple[Kept, Lag]]:
    """Every read model's position and lag; none for a memory store."""
    found = []
    for kept in PROJECTIONS:
        view = kept.open(store)
        if view is not None:
            found.append((kept, view.lag(store)))
    return found
