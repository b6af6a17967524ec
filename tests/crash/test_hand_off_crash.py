"""Crash test: SIGKILL ``longhaul up`` while it runs a task its gateway handed to its own worker.

``up`` grants a blocking send's new task's lease to its worker in the submission's commit
(ADR 0032): the grant has the submission's own time, and no claim follows. The step commits
under that lease, then the process is SIGKILLed. A separate worker process takes the task over
once the lease has expired (epoch 2), exactly as after any worker's death, and completes it;
nothing was committed under epoch 1 after the take-over.
"""

from __future__ import annotations

import contextlib
import threading
from pathlib import Path
from typing import Any
from uuid import UUID

import httpx

from store.log.application import TaskApplication, task_id_for
from store.log.errors import TaskNotFoundError
from tests.crash.cluster import Cluster, events, of_kind, rpc, user_message, wait_for_state
from tests.support.processes import free_port, wait_for_http, wait_until

SLEEP_S = 4.0
"""How long the step sleeps after its first commit: the kill comes well inside it."""


def _started(store: TaskApplication, task_id: UUID) -> bool:
    try:
        return store.get(task_id).checkpoint.get("started") is True
    except TaskNotFoundError:
        return False  # not submitted yet


def _send_ignoring_errors(base: str, params: dict[str, Any]) -> None:
    with contextlib.suppress(httpx.HTTPError, ValueError):  # the process was killed under the call
        rpc(base, "SendMessage", params, timeout=30)


def test_a_handed_over_task_is_taken_over_after_the_process_dies(
    cluster: Cluster, store: TaskApplication, tmp_path: Path
) -> None:
    port = free_port()
    up = cluster.start(["up"], port=str(port))
    base = f"http://127.0.0.1:{port}"
    wait_for_http(f"{base}/.well-known/agent-card.json", 60, up)
    message = user_message({"sleep_s": SLEEP_S, "marker": str(tmp_path / "marker")})
    params = {"message": message, "metadata": {"skill": "crash-sleeper"}}
    # A blocking send: the only kind that hands its task over. It never answers: up dies first.
    caller = threading.Thread(target=_send_ignoring_errors, args=(base, params), daemon=True)
    caller.start()
    task_id = task_id_for("default", message["messageId"])

    wait_until(lambda: _started(store, task_id), 30, "the step's first commit")
    history = events(store, task_id)
    assert [type(e).__name__ for e in history[:2]] == ["Submitted", "LeaseGranted"]
    handed = history[1]
    assert (handed.epoch, f":{up.pid}:" in handed.worker) == (1, True)
    assert handed.timestamp == history[0].timestamp  # granted in the submission's commit, not claimed
    up.kill()
    assert of_kind(events(store, task_id), "LeaseGranted") == [handed]  # no claim by anyone yet

    survivor = cluster.worker()
    done = wait_for_state(store, task_id, "TASK_STATE_COMPLETED", 60, cluster)

    history = events(store, task_id)
    grants = of_kind(history, "LeaseGranted")
    assert [g.epoch for g in grants] == [1, 2]
    assert f":{survivor.pid}:" in grants[1].worker
    assert grants[1].timestamp >= handed.until  # taken over once the handed-over lease expired
    after = history[history.index(grants[1]) + 1 :]
    assert all(getattr(e, "epoch", 2) == 2 for e in after), after  # the fence held
    assert done.version == len(history)
