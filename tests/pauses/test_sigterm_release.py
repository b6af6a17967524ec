"""SIGTERM on a worker mid-task: it stops claiming, stops the running step at its next commit
(within the grace period), and releases the lease, so another worker resumes at once, long
before the lease (30 s here) would have expired.
"""

from __future__ import annotations

import time
from uuid import UUID

from store.log.application import TaskApplication
from tests.crash.cluster import Cluster, events, holder_pid, kind, of_kind, submit, timestamp, wait_for_state
from tests.support.processes import wait_until

LEASE_S = 30.0
TICKS = 40


def _ticks(store: TaskApplication, task_id: UUID) -> int:
    return int(store.get(task_id).checkpoint.get("ticks", 0))


def test_sigterm_releases_the_lease_and_another_worker_resumes_at_once(
    cluster: Cluster, store: TaskApplication
) -> None:
    workers = cluster.workers(2, lease_seconds=str(LEASE_S))
    task_id = submit(store, "crash-ticker", {"ticks": TICKS, "tick_ms": 300})
    wait_until(lambda: _ticks(store, task_id) >= 3, 30, "three ticks")
    leaving = next(w for w in workers if w.pid == holder_pid(store, task_id))
    staying = next(w for w in workers if w is not leaving)

    terminated_at = time.time()
    assert leaving.stop() == 0, leaving.log()
    wait_for_state(store, task_id, "TASK_STATE_COMPLETED", 60, cluster)
    history = events(store, task_id)

    released = of_kind(history, "LeaseReleased")
    assert [(r.epoch, r.reason) for r in released] == [(1, "worker shutting down")]
    grants = of_kind(history, "LeaseGranted")
    assert [g.epoch for g in grants] == [1, 2]
    assert f":{staying.pid}:" in grants[1].worker
    assert history.index(released[0]) < history.index(grants[1])
    # Nothing of epoch 1 after the release; the new holder went on from the stored tick.
    after = history[history.index(released[0]) :]
    assert all(getattr(e, "epoch", 2) != 1 for e in after[1:]), [kind(e) for e in after]
    ticks = [
        e.checkpoint["ticks"] for e in of_kind(history, "CheckpointSaved", "StepCompleted") if e.step == 0
    ]
    assert ticks == list(range(1, TICKS + 1))

    # At once: the claim followed the release, long before the released lease would have ended.
    last_epoch1_end = max(
        e.lease_until for e in of_kind(history, "CheckpointSaved") if e.epoch == 1
    ).timestamp()
    release_at, claim_at = timestamp(released[0]), timestamp(grants[1])
    print(
        f"\nSIGTERM: release {release_at - terminated_at:.2f}s after the signal (grace "
        f"{cluster.settings.worker_grace_seconds:.0f}s), claim {claim_at - release_at:.2f}s after the "
        f"release, {last_epoch1_end - claim_at:.1f}s before the {LEASE_S:.0f}s lease would have ended"
    )
    assert claim_at - release_at < 5
    # The step stopped at its next sub-step commit (a tick is 0.3 s), not at the end of the grace.
    assert release_at - terminated_at < cluster.settings.worker_grace_seconds
    assert claim_at < last_epoch1_end - LEASE_S / 2
