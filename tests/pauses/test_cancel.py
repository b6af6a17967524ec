"""CancelTask on a working task: the cancel is in the log when the call returns; the worker
holding the task cancels the running step's coroutine promptly (long before its next lease
renewal would find the lease gone: the lease is 30 s here) and commits nothing more.
"""

from __future__ import annotations

import time
import uuid
from pathlib import Path

from store.log.application import TaskApplication
from tests.crash.cluster import Cluster, events, kind, rpc, submit, wait_for_state
from tests.support.processes import wait_until

LEASE_S = 30.0
PROMPT_S = 8.0
"""The step must be cancelled within this long: before the first renewal, at a third of the lease."""


def test_cancel_stops_the_running_step_and_nothing_is_committed_after_it(
    cluster: Cluster, store: TaskApplication, tmp_path: Path
) -> None:
    worker = cluster.worker(wait=False, lease_seconds=str(LEASE_S))
    gateway = cluster.gateway()
    cluster.wait_for_worker(worker)
    marker = tmp_path / "step-cancelled"
    message = {
        "messageId": uuid.uuid4().hex,
        "role": "ROLE_USER",
        "parts": [{"data": {"marker": str(marker), "sleep_s": 600}}],
        "metadata": {"skill": "crash-sleeper"},
    }
    sent = rpc(gateway, "SendMessage", {"message": message, "configuration": {"returnImmediately": True}})
    task_id = uuid.UUID(sent["result"]["task"]["id"])
    wait_until(lambda: store.get(task_id).checkpoint.get("started") is True, 30, "the step to start")
    assert str(store.get(task_id).state) == "TASK_STATE_WORKING"

    canceled_at = time.monotonic()
    canceled = rpc(gateway, "CancelTask", {"id": str(task_id)})
    assert canceled["result"]["status"]["state"] == "TASK_STATE_CANCELED", canceled
    history = events(store, task_id)
    assert kind(history[-1]) == "Canceled", [kind(e) for e in history]
    canceled_version = history[-1].originator_version

    # The worker cancels the step's coroutine (the step wrote its marker while unwinding).
    wait_until(marker.exists, PROMPT_S, "the running step to be cancelled")
    assert marker.read_text() == "cancelled"
    took = time.monotonic() - canceled_at
    print(f"\ncancel: the step's coroutine was cancelled {took:.2f}s after CancelTask")
    wait_until(lambda: f"task {task_id}: stopped" in worker.log(), 15, "the worker to let the task go")
    assert "TASK_STATE_CANCELED" in worker.log()

    # Nothing after the cancel, even after a few more watch and commit intervals.
    time.sleep(3)
    history = events(store, task_id)
    assert history[-1].originator_version == canceled_version, [kind(e) for e in history]
    assert str(store.get(task_id).state) == "TASK_STATE_CANCELED"

    # The worker is free and well: it runs the next task.
    other = submit(store, "crash-noop", {})
    wait_for_state(store, other, "TASK_STATE_COMPLETED", 30, cluster)
    assert worker.stop() == 0, worker.log()
