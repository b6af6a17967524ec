"""Crash test 6: three worker processes race over 200 tasks of a three-step no-op skill.

Every task completes exactly once, no (task, step) is committed twice, every worker-side event
carries the epoch of the lease granted last before it, and no task is left behind.
"""

from __future__ import annotations

from collections import Counter

from store.log.application import TaskApplication
from tests.crash.cluster import Cluster, epoch_of, events, kind, new_task
from tests.support.processes import wait_until

TASKS = 200
STEPS = 3


def test_three_workers_race_over_200_tasks(cluster: Cluster, store: TaskApplication) -> None:
    workers = cluster.workers(3)
    tasks = [new_task("crash-noop", {}) for _ in range(TASKS)]
    store.save_tasks(*tasks)

    def live() -> int:
        return sum(n for _, _, n in store.run_queue.live_versions())

    try:
        wait_until(lambda: live() == 0, 120, "every task to finish", interval=0.2)
    except AssertionError:
        raise AssertionError(f"{live()} tasks are stuck\n{cluster.logs()}") from None

    ran_by: Counter[str] = Counter()
    for task in tasks:
        history = events(store, task.id)
        kinds = [kind(e) for e in history]
        assert kinds.count("Completed") == 1, (task.id, kinds)
        assert kinds[-1] == "Completed", (task.id, kinds)
        steps = [e.step for e in history if kind(e) == "StepCompleted"]
        assert steps == list(range(STEPS)), (task.id, steps)
        # The fence: epochs grow by one per grant, and every worker-side event carries the
        # epoch granted last before it.
        epoch = 0
        for event in history:
            if kind(event) == "LeaseGranted":
                assert event.epoch == epoch + 1, (task.id, kinds)
                epoch = event.epoch
                ran_by[event.worker.split(":")[-2]] += 1
            elif epoch_of(event) is not None:
                assert epoch_of(event) == epoch, (task.id, kind(event), epoch_of(event), epoch)
        assert str(store.get(task.id).state) == "TASK_STATE_COMPLETED"

    print(f"\nrace: leases granted per worker pid {dict(ran_by)}")
    assert len(ran_by) >= 2, f"only one worker ever claimed: {ran_by}"
    assert set(ran_by) <= {str(w.pid) for w in workers}
    for worker in workers:
        assert worker.stop() == 0, worker.log()
