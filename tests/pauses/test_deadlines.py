"""Every pause has a deadline kept in the log: the step's, capped by ``LONGHAUL_MAX_PAUSE``, or
the maximum pause when the step names none. A paused task holds no lease and nobody writes to it
while it waits. Past its deadline the sweeper fails or cancels it (as the step said) with a status
message naming the deadline; an answer before the deadline resumes it at the next step.
"""

from __future__ import annotations

import time
from datetime import timedelta
from typing import Any
from uuid import UUID

from store.log.application import TaskApplication
from tests.crash.cluster import Cluster, answer, events, kind, of_kind, submit, wait_for_state

MAX_PAUSE = timedelta(hours=1)


def _asked(store: TaskApplication, task_id: UUID) -> Any:
    return of_kind(events(store, task_id), "InputRequested")[-1]


def _text(message: Any) -> str:
    return " ".join(p.get("text", "") for p in message["parts"])


def test_pause_deadlines_are_kept_and_enforced(cluster: Cluster, store: TaskApplication) -> None:
    worker = cluster.worker(wait=False, max_pause="PT1H")
    cluster.sweeper(max_pause="PT1H")
    cluster.wait_for_worker(worker)
    default = submit(store, "crash-asker", {})
    capped = submit(store, "crash-asker", {"deadline_s": 7200})
    canceling = submit(store, "crash-asker", {"deadline_s": 2, "on_deadline": "cancel"})
    failing = submit(store, "crash-asker", {"deadline_s": 2, "on_deadline": "fail"})
    for task_id in (default, capped):
        wait_for_state(store, task_id, "TASK_STATE_INPUT_REQUIRED", 30, cluster)

    # The deadline is in the log: the maximum pause when the step named none, or was longer.
    for task_id in (default, capped):
        asked = _asked(store, task_id)
        assert asked.deadline - asked.timestamp == MAX_PAUSE
        assert asked.on_deadline == "fail"
        row = store.run_queue.row(task_id)
        assert row is not None
        assert row.lease_owner is None
        assert row.deadline == asked.deadline

    # Past their deadlines the sweeper ends the short pauses, as each step asked.
    for task_id, state, event in (
        (canceling, "TASK_STATE_CANCELED", "Canceled"),
        (failing, "TASK_STATE_FAILED", "Failed"),
    ):
        ended = wait_for_state(store, task_id, state, 30, cluster)
        deadline = _asked(store, task_id).deadline
        assert ended.status_message is not None
        status = _text(ended.status_message)
        assert "deadline" in status, status
        assert deadline.isoformat() in status, status
        history = events(store, task_id)
        assert kind(history[-1]) == event
        assert history[-1].timestamp >= deadline
        assert deadline.isoformat() in history[-1].reason

    # While waiting, nobody wrote to the long pauses: no lease, no renewals, no polling.
    waiting_version = store.get(default).version
    time.sleep(cluster.settings.lease_seconds + 0.5)
    assert store.get(default).version == waiting_version
    assert kind(events(store, default)[-1]) == "InputRequested"

    # An answer before the deadline resumes the task at its next step, on any free worker.
    answer(store, default, {"note": "all good"})
    done = wait_for_state(store, default, "TASK_STATE_COMPLETED", 30, cluster)
    assert done.status_message is not None
    assert _text(done.status_message) == "answered: answer"
    kinds = [kind(e) for e in events(store, default)]
    assert kinds[kinds.index("InputReceived") :][:2] == ["InputReceived", "LeaseGranted"]
    assert str(store.get(capped).state) == "TASK_STATE_INPUT_REQUIRED"
