"""A real projector (``projections.projector.run_projector``) in a thread of the test, and a wait
until it applied a log position."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager

from projections.projector import PROJECTIONS, Kept, run_projector
from store.log.application import TaskApplication
from store.log.config import StoreConfig


class RunningProjector:
    """The projector a test runs; ``wait`` until its views applied a position."""

    def __init__(self, app: TaskApplication, projections: Sequence[Kept]) -> None:
        self._app = app
        self._views = [view for kept in projections if (view := kept.open(app)) is not None]

    def wait(self, position: int | None, timeout: float) -> None:
        """Until every view has recorded ``position`` or later; ``TimeoutError`` past ``timeout``."""
        deadline = time.monotonic() + timeout
        while any((v.max_tracking_id(self._app.name) or 0) < (position or 0) for v in self._views):
            if time.monotonic() > deadline:
                raise TimeoutError(f"the projector did not apply position {position} in {timeout}s")
            time.sleep(0.02)


@contextmanager
def projector_running(
    config: StoreConfig, *, projections: Sequence[Kept] = PROJECTIONS
) -> Iterator[RunningProjector]:
    """``run_projector`` over ``config`` in a thread until the block ends (then stopped and joined)."""
    stop = threading.Event()
    thread = threading.Thread(
        target=run_projector,
        args=(config, stop),
        kwargs={"retry_s": 0.2, "projections": projections},
        name="test-projector",
        daemon=True,
    )
    app = TaskApplication(config)
    thread.start()
    try:
        yield RunningProjector(app, projections)
    finally:
        stop.set()
        thread.join(30)
        app.close()
        assert not thread.is_alive(), "the projector did not stop"
