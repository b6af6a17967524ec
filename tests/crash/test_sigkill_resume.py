"""Crash test 1: SIGKILL the worker while it fetches system 23 of 40; another worker resumes at 23.

Two worker processes run; whichever claims the access review is SIGKILLed as soon as the log holds
22 fetched systems (23, if the victim commits one more before the signal lands). The survivor
claims the task once the dead worker's lease has expired and fetches from the next system on. The
log and the fake IAM's call list both show every system before it fetched exactly once, and the
resume time (kill -> the survivor's first commit) is measured against the lease length.
"""

from __future__ import annotations

import time
from collections import Counter
from typing import Any
from uuid import UUID

from store.log.application import TaskApplication
from tests.crash.cluster import (
    Cluster,
    epoch_of,
    events,
    holder_pid,
    iam_calls,
    of_kind,
    submit,
    timestamp,
    wait_for_state,
)
from tests.support.processes import wait_until

SYSTEMS = 40
KILL_AT = 23
FETCH_DELAY_MS = 250
RESUME_MARGIN_S = 3.0
"""Generous slack over the lease for a noisy two-core machine (the target is lease + 1 s)."""


def _fetched(store: TaskApplication, task_id: UUID) -> int:
    return len(store.get(task_id).checkpoint.get("fetched", []))


def _lease_end(event: Any) -> float | None:
    end = getattr(event, "lease_until", None) or getattr(event, "until", None)
    return end.timestamp() if end is not None else None


def test_sigkill_mid_fetch_resumes_at_the_next_system(cluster: Cluster, store: TaskApplication) -> None:
    iam = cluster.fake_iam()
    workers = cluster.workers(2)
    lease_s = cluster.settings.lease_seconds
    task_id = submit(
        store, "access-review", {"systems": SYSTEMS, "fetch_delay_ms": FETCH_DELAY_MS, "revocations": 0}
    )

    wait_until(lambda: _fetched(store, task_id) >= KILL_AT - 1, 60, "22 fetched systems", interval=0.01)
    pid = holder_pid(store, task_id)
    victim = next(w for w in workers if w.pid == pid)
    survivor = next(w for w in workers if w.pid != pid)
    killed_at = time.time()
    victim.kill()
    at_kill = _fetched(store, task_id)
    # Mid-task: at least the 22 polled for; one more if the victim committed it before the signal
    # landed (a loaded machine can take longer than a fetch between the poll and the kill).
    assert KILL_AT - 1 <= at_kill < SYSTEMS, f"the kill came late: {at_kill} systems were fetched"
    resumed_at = at_kill + 1
    """The first system the survivor fetches: the one after the last committed."""

    wait_for_state(store, task_id, "TASK_STATE_COMPLETED", 60, cluster)
    history = events(store, task_id)

    # Systems 1..40 each entered the checkpoint exactly once, 1..22 (or 23) under the killed
    # worker's epoch and the rest under the survivor's, which started at the next one.
    grants = of_kind(history, "LeaseGranted")
    assert [g.epoch for g in grants[:2]] == [1, 2]
    assert f":{victim.pid}:" in grants[0].worker
    assert f":{survivor.pid}:" in grants[1].worker
    fetch_commits = [e for e in of_kind(history, "CheckpointSaved", "StepCompleted") if e.step == 1]
    newly: list[int] = []
    previous: list[int] = []
    for commit in fetch_commits:
        fetched = commit.checkpoint["fetched"]
        assert fetched[: len(previous)] == previous, fetched
        assert len(fetched) == len(previous) + 1, fetched
        newly.append(fetched[-1])
        previous = fetched
    assert newly == list(range(1, SYSTEMS + 1))
    by_epoch = {n: commit.epoch for n, commit in zip(newly, fetch_commits, strict=True)}
    assert {n for n, e in by_epoch.items() if e == 1} == set(range(1, resumed_at))
    assert {n for n, e in by_epoch.items() if e == 2} == set(range(resumed_at, SYSTEMS + 1))

    # The fake IAM served every system before ``resumed_at`` exactly once, ``resumed_at`` at most
    # twice (the killed worker may have asked for it before dying), every later system once.
    gets = Counter(
        c["path"] for c in iam_calls(iam, task_id) if c["method"] == "GET" and c["path"].endswith("/grants")
    )
    for n in range(1, SYSTEMS + 1):
        expected = (1, 2) if n == resumed_at else (1,)
        assert gets[f"/systems/{n}/grants"] in expected, (n, gets)

    # At most one holder: the survivor's grant came after the dead worker's lease had ended.
    dead_lease_end = max(filter(None, (_lease_end(e) for e in history if epoch_of(e) == 1)))
    claim = timestamp(grants[1])
    first_progress = timestamp(next(e for e in fetch_commits if e.epoch == 2))
    assert claim >= dead_lease_end
    resume = first_progress - killed_at
    print(
        f"\nSIGKILL resume: lease {lease_s:.1f}s; kill -> claim {claim - killed_at:.2f}s, "
        f"kill -> first commit of system {resumed_at} {resume:.2f}s "
        f"(lease end -> claim {claim - dead_lease_end:.2f}s)"
    )
    assert claim - killed_at <= lease_s + RESUME_MARGIN_S
    assert resume <= lease_s + RESUME_MARGIN_S + FETCH_DELAY_MS / 1000
    assert survivor.alive()
