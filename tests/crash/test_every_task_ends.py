"""Every task ends: a step that kills its worker, one that hangs, one that blocks its event loop.

Real ``longhaul worker`` processes on the test's schema (lease 2 s). The test restarts a worker
that died, as systemd or Kubernetes would; the attempt count lives in the log, so the restarts do
not start it again.
"""

from __future__ import annotations

import time
from pathlib import Path

from store.log.application import TaskApplication
from tests.crash.cluster import (
    Cluster,
    events,
    iam_calls,
    of_kind,
    submit,
    wait_for_state,
)
from tests.support.processes import LonghaulProcess, wait_until

ATTEMPTS = 3


def test_a_step_that_kills_its_worker_fails_its_task_after_the_policys_attempts(
    cluster: Cluster, store: TaskApplication
) -> None:
    workers = cluster.workers(2, step_max_attempts=str(ATTEMPTS))
    poison = submit(store, "crash-suicide", {})
    others = [submit(store, "crash-noop", {}) for _ in range(6)]

    started: list[LonghaulProcess] = list(workers)
    deadline = time.monotonic() + 120
    while not store.get(poison).is_terminal:
        assert time.monotonic() < deadline, f"the poison task never ended\n{cluster.logs()}"
        for index, process in enumerate(workers):
            if not process.alive():  # the supervisor: a dead worker is started again
                workers[index] = cluster.worker(wait=False, step_max_attempts=str(ATTEMPTS))
                started.append(workers[index])
        time.sleep(0.05)

    task = store.get(poison)
    assert str(task.state) == "TASK_STATE_FAILED"
    reason = task.status_message["parts"][0]["text"] if task.status_message else ""
    assert reason == f"step 0 (kill_own_worker) lost its worker {ATTEMPTS} times"
    history = events(store, poison)
    attempts = of_kind(history, "StepAttemptFailed")
    grants = of_kind(history, "LeaseGranted")
    # The step ran ATTEMPTS times, each on a worker it killed; the next claim recorded each loss,
    # and the claim after the last loss failed the task without running the step again.
    assert [a.attempt for a in attempts] == list(range(1, ATTEMPTS + 1))
    assert {a.cause for a in attempts} == {"lease_lost"}
    assert [(a.worker, a.epoch) for a in attempts] == [(g.worker, g.epoch) for g in grants[:ATTEMPTS]]
    assert len(grants) == ATTEMPTS + 1
    assert len({a.worker for a in attempts}) == ATTEMPTS, "each attempt killed another worker process"
    dead = [p for p in started if not p.alive()]
    assert len(dead) == ATTEMPTS, [p.pid for p in dead]
    failed = of_kind(history, "Failed")
    assert [f.epoch for f in failed] == [grants[-1].epoch]

    # The other tasks on those workers all complete; the history command shows every attempt.
    for task_id in others:
        wait_for_state(store, task_id, "TASK_STATE_COMPLETED", 60, cluster)
    shown = cluster.run(["history", str(poison)])
    assert shown.returncode == 0, shown.stderr
    lines = [line for line in shown.stdout.splitlines() if "StepAttemptFailed" in line]
    assert len(lines) == ATTEMPTS, shown.stdout
    for line, attempt in zip(lines, attempts, strict=True):
        assert f"epoch {attempt.epoch}" in line, line
        assert attempt.worker in line, line
        assert "lease_lost" in line, line


def test_a_step_that_awaits_for_ever_ends_by_its_timeout(cluster: Cluster, store: TaskApplication) -> None:
    worker = cluster.worker(step_max_attempts="2", step_timeout="PT1S")
    task_id = submit(store, "crash-hang", {})

    task = wait_for_state(store, task_id, "TASK_STATE_FAILED", 60, cluster)

    reason = task.status_message["parts"][0]["text"] if task.status_message else ""
    assert reason == "step 0 (hang) timed out 2 times"
    attempts = of_kind(events(store, task_id), "StepAttemptFailed")
    assert [(a.cause, a.epoch) for a in attempts] == [("timeout", 1), ("timeout", 1)]
    assert "ran past its timeout of 1 second" in attempts[0].detail
    assert worker.alive()
    log = worker.log()
    assert log.count("attempt 1 failed (timeout)") == 1, log
    assert "attempt 2 failed (timeout)" in log, log


def test_a_step_that_blocks_the_loop_never_calls_beside_the_next_holder(
    cluster: Cluster, store: TaskApplication, tmp_path: Path
) -> None:
    iam = cluster.fake_iam()
    first = cluster.worker()
    marker = tmp_path / "blocked"
    lease_s = cluster.settings.lease_seconds
    task_id = submit(store, "crash-blocker", {"marker": str(marker), "block_s": 4 * lease_s, "iam": iam})
    wait_until(marker.exists, 30, "the first worker to block its loop")
    blocked_pid = int(marker.read_text())
    assert blocked_pid == first.pid
    second = cluster.worker()  # takes the task over once the blocked worker's lease has ended

    task = wait_for_state(store, task_id, "TASK_STATE_COMPLETED", 60, cluster)

    assert task.status_message is not None
    assert f"in {second.pid}" in task.status_message["parts"][0]["text"]
    # The blocked worker woke after its lease had passed to the second: its ``once`` renewed the
    # lease first, was refused, and never called the IAM. One call, from the holder.
    posts = [c for c in iam_calls(iam, task_id) if c["method"] == "POST"]
    assert len(posts) == 1, posts
    history = events(store, task_id)
    (lost,) = of_kind(history, "StepAttemptFailed")
    assert (lost.cause, lost.epoch) == ("lease_lost", 1)
    assert f":{first.pid}:" in lost.worker
    wait_until(
        lambda: "the worker gives the task up" in first.log() or "stopped" in first.log(), 30, "the log"
    )
    assert first.alive(), first.log()
