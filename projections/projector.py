"""The projector: keeps every projection following the log (``longhaul projector``, and ``up``).

The projections are the current-task view (``projections.task_view``) and the retention index
(``projections.retention_index``), each run by the library's ``ProjectionRunner`` with its own
position, so each resumes where it stopped and can be rebuilt on its own.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import Any

from eventsourcing.projection import ProjectionRunner

from projections import retention_index, task_view
from projections.folded_view import FoldedView, Lag, Rebuilt
from store.application import TaskApplication
from store.config import StoreConfig

log = logging.getLogger(__name__)

LAG_LOG_S = 60.0
"""How often a running projector logs its lag."""


@dataclass(frozen=True)
class Kept:
    """One projection the projector keeps: its names, its runner, how to open its view."""

    key: str
    """Its name in metrics (the ``projection`` label)."""
    label: str
    """Its name in logs and ``longhaul projections``."""
    runner: Callable[[StoreConfig], AbstractContextManager[ProjectionRunner[TaskApplication, Any]]]
    open: Callable[[TaskApplication], FoldedView[Any] | None]


PROJECTIONS = (
    Kept("task_view", "current-task view", task_view.projection_runner, task_view.open_view),
    Kept("retention_index", "retention index", retention_index.projection_runner, retention_index.open_index),
)


@contextlib.contextmanager
def _runners(config: StoreConfig) -> Iterator[list[ProjectionRunner[TaskApplication, Any]]]:
    with contextlib.ExitStack() as stack:
        yield [stack.enter_context(kept.runner(config)) for kept in PROJECTIONS]


def run_projector(
    config: StoreConfig, stop: threading.Event, *, retry_s: float = 1.0, lag_every_s: float = LAG_LOG_S
) -> None:
    """Keep every projection following the log until ``stop`` is set (blocking; run it in a thread).

    Logs each projection's lag every ``lag_every_s`` seconds. A failure of a runner (the database
    gone, a position recorded by a rebuild the runner did not know of) is logged and the runners
    restarted, each from its recorded position.
    """
    while not stop.is_set():
        try:
            with _runners(config) as runners:
                for kept, runner in zip(PROJECTIONS, runners, strict=True):
                    position = runner.view.lag(runner.app).position
                    log.info("projector: %s following the log after position %d", kept.label, position)
                next_log = time.monotonic() + lag_every_s
                while not stop.is_set() and not any(r.is_interrupted.is_set() for r in runners):
                    for runner in runners:
                        runner.run_forever(timeout=0.1)
                    if time.monotonic() >= next_log:
                        for kept, runner in zip(PROJECTIONS, runners, strict=True):
                            lag = runner.view.lag(runner.app)
                            log.info(
                                "projector: %s at position %d of %d (%d behind)",
                                kept.label,
                                lag.position,
                                lag.log_position,
                                lag.behind,
                            )
                        next_log = time.monotonic() + lag_every_s
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
