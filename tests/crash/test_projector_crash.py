"""The projector SIGKILLed in the middle of a backlog: restarted, every view equals a rebuild.

Thousands of events are committed while no projector runs, each task's in three commits (so the
projector's batches cut across tasks); a ``longhaul projector`` process starts on the backlog and
is killed once the current-task view applied a third of it, inside some batch's transaction or
between two (ADR 0048). More is committed while none runs; the next projector resumes each view
after its own recorded position. Every row of every view (the current-task view, the retention
index, the file index: each task holds a file) must then be what a rebuild from the log makes of
it: an event applied twice, or skipped, would leave a row that differs.
"""

from __future__ import annotations

import hashlib
import signal
import time
from datetime import UTC, datetime, timedelta

from domain.files import FileRef, file_part
from domain.task import Task
from projections.projector import PROJECTIONS, lags
from store.log.application import TaskApplication
from tests.crash.cluster import Cluster
from tests.support.processes import wait_until
from tests.support.tasks import new_task

TASKS, PROGRESS = 400, 10
WAIT_S = 60.0


def _commit_backlog(store: TaskApplication, now: datetime, tasks: int) -> list[Task]:
    """``tasks`` tasks, each submitted, then leased with progress, then (every other one) completed."""
    made = [new_task(now, tenant="acme" if i % 2 else "default") for i in range(tasks)]
    for task in made:
        store.save_tasks(task)
    for task in made:
        task.grant_lease(worker="w", now=now, until=now + timedelta(hours=1))
        for i in range(PROGRESS):
            task.report_progress(epoch=task.lease_epoch, now=now, message={"parts": [{"text": f"{i}"}]})
        # A file artifact, so the file index has a row per task too.
        file = file_part(FileRef(hashlib.sha256(task.id.bytes).hexdigest(), 10), media_type="text/plain")
        task.append_artifact(epoch=task.lease_epoch, now=now, artifact={"artifactId": "f", "parts": [file]})
        store.save_tasks(task)
    for task in made[::2]:
        task.complete(epoch=task.lease_epoch, now=now + timedelta(seconds=1), message=None)
        store.save_tasks(task)
    return made


def _positions(store: TaskApplication) -> dict[str, int]:
    return {kept.key: lag.position for kept, lag in lags(store)}


def _view_position(store: TaskApplication) -> int:
    view = PROJECTIONS[0].open(store)
    assert view is not None
    return view.max_tracking_id(store.name) or 0


def test_a_projector_killed_mid_backlog_resumes_and_both_views_equal_a_rebuild(
    cluster: Cluster, store: TaskApplication
) -> None:
    now = datetime.now(UTC)
    made = _commit_backlog(store, now, TASKS)
    total = store.recorder.max_notification_id() or 0
    assert total >= TASKS * (PROGRESS + 2)

    projector = cluster.start(["projector"])
    # A tight poll: a batch is up to 500 events, the backlog a dozen batches.
    wait_until(
        lambda: _view_position(store) >= total // 3, WAIT_S, "a third of the backlog applied", interval=0.002
    )
    projector.signal(signal.SIGKILL)
    projector.popen.wait(timeout=10)
    at_kill = _positions(store)
    assert all(position < total for position in at_kill.values()), (
        f"the projector was killed at {at_kill} of {total}: past the backlog"
    )

    for task in made[1::2]:  # more while none runs: the odd tasks end, new ones come
        task.complete(epoch=task.lease_epoch, now=now + timedelta(seconds=2), message=None)
        store.save_tasks(task)
    _commit_backlog(store, now + timedelta(seconds=3), 20)
    end = store.recorder.max_notification_id() or 0

    cluster.start(["projector"])
    wait_until(lambda: min(_positions(store).values()) >= end, WAIT_S, "both views to reach the log's end")
    time.sleep(0.5)  # a projector that applied something twice would have written it by now
    assert _positions(store) == {kept.key: end for kept in PROJECTIONS}

    for kept in PROJECTIONS:
        view = kept.open(store)
        assert view is not None
        live = view.rows()
        assert len(live) == TASKS + 20
        view.rebuild(store)
        assert view.rows() == live, f"{kept.label}: the rows differ from a rebuild"
