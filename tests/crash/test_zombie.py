"""Crash test 2: a zombie worker. SIGSTOP the lease holder mid-step until its lease is gone,
let another worker claim the task (epoch 2) and make progress, then SIGCONT the zombie: its
commit is refused, its log says the lease is lost, and the log holds nothing of epoch 1 after
the epoch-2 grant.

The second test gives the zombie a clock five seconds slow (and a lease of six seconds by its
own clock), so that after SIGCONT it still believes its lease holds. Its step shields its
sub-step commits from cancellation, so the worker's watch (which cancels the step once it sees
the lease gone) cannot stop a commit already under way: that commit reaches the store, and only
the fence there (the version check, then the epoch check after the reload) can refuse it.
"""

from __future__ import annotations

import signal
from typing import Any
from uuid import UUID

from store.log.application import TaskApplication
from tests.crash.cluster import (
    Cluster,
    epoch_of,
    events,
    holder_pid,
    kind,
    of_kind,
    submit,
    wait_for_state,
)
from tests.support.processes import LonghaulProcess, wait_until


def _ticks(store: TaskApplication, task_id: UUID) -> int:
    return int(store.get(task_id).checkpoint.get("ticks", 0))


def _progress_after(store: TaskApplication, task_id: UUID, epoch: int) -> int:
    """Checkpoints committed under any lease later than ``epoch``.

    Not only epoch 2: the zombie may be stopped inside a commit, holding the event table's lock
    until PostgreSQL ends its idle transaction (5 s), and the new holder's lease can lapse
    meanwhile, so its progress may come under epoch 3.
    """
    return sum(1 for e in events(store, task_id) if kind(e) == "CheckpointSaved" and e.epoch > epoch)


def _check_log(history: list[Any], ticks: int) -> None:
    grants = of_kind(history, "LeaseGranted")
    assert [g.epoch for g in grants] == list(range(1, len(grants) + 1)), [(g.epoch, g.worker) for g in grants]
    assert len(grants) >= 2
    regrant = history.index(grants[1])
    late = [(kind(e), e.originator_version) for e in history[regrant:] if epoch_of(e) == 1]
    assert late == [], f"the zombie (epoch 1) committed after the epoch-2 grant: {late}"
    # Every tick was committed once, in order: the new holder went on from the stored checkpoint.
    tick_commits = [e for e in of_kind(history, "CheckpointSaved", "StepCompleted") if e.step == 0]
    committed = [e.checkpoint["ticks"] for e in tick_commits]
    assert committed == list(range(1, ticks + 1)), committed
    assert kind(history[-1]) == "Completed"


def _wait_for_refusal(zombie: LonghaulProcess, task_id: UUID) -> str:
    line = f"task {task_id}: stopped"
    wait_until(lambda: line in zombie.log(), 20, "the zombie to notice it lost the lease")
    found = next(x for x in zombie.log().splitlines() if line in x)
    assert "lease" in found, found
    return found


def test_zombie_past_its_lease_never_commits_again(cluster: Cluster, store: TaskApplication) -> None:
    workers = cluster.workers(2)
    ticks = 40
    task_id = submit(store, "crash-ticker", {"ticks": ticks, "tick_ms": 200})
    wait_until(lambda: _ticks(store, task_id) >= 5, 30, "five ticks")
    zombie = next(w for w in workers if w.pid == holder_pid(store, task_id))
    zombie.signal(signal.SIGSTOP)

    # The other worker claims the task once the lease has expired, and makes progress.
    wait_until(lambda: _progress_after(store, task_id, 1) >= 3, 30, "progress under a later epoch")
    zombie.signal(signal.SIGCONT)
    refusal = _wait_for_refusal(zombie, task_id)
    wait_for_state(store, task_id, "TASK_STATE_COMPLETED", 60, cluster)

    _check_log(events(store, task_id), ticks)
    print(f"\nzombie: {refusal.split(': ', 1)[-1]}")
    assert zombie.alive()
    assert zombie.stop() == 0, zombie.log()


def test_zombie_with_a_slow_clock_never_commits_again(cluster: Cluster, store: TaskApplication) -> None:
    # The zombie's clock runs 5 s slow and it grants itself 6 s leases: to everyone else its lease
    # ends 1 s after its last commit, while by its own clock it still holds for 6 s.
    zombie = cluster.worker(clock_offset_seconds="-5", lease_seconds="6")
    ticks = 100  # 20 s of work: the second worker may take 10 s to start on a loaded machine
    task_id = submit(store, "crash-ticker", {"ticks": ticks, "tick_ms": 200, "shield": True})
    wait_until(lambda: holder_pid(store, task_id) == zombie.pid, 30, "the zombie to claim the task")
    cluster.worker()
    assert _ticks(store, task_id) < ticks - 20, "the task ran too far before the second worker started"
    zombie.signal(signal.SIGSTOP)

    wait_until(lambda: _progress_after(store, task_id, 1) >= 2, 30, "progress under a later epoch")
    zombie.signal(signal.SIGCONT)
    refusal = _wait_for_refusal(zombie, task_id)
    wait_for_state(store, task_id, "TASK_STATE_COMPLETED", 60, cluster)

    _check_log(events(store, task_id), ticks)
    print(f"\nslow-clock zombie: {refusal.split(': ', 1)[-1]}")
    assert zombie.stop() == 0, zombie.log()
