"""Crash test 3: a network error after 9 of 14 revocations. The retried step gets the first 9
results from the effect ledger and applies only the other 5; the fake IAM applied each
idempotency key exactly once.

Real processes: a worker and the fake IAM. The owners' approval goes into the log the way the
gateway appends it.
"""

from __future__ import annotations

from collections import Counter

from store.log.application import TaskApplication
from tests.crash.cluster import Cluster, answer, events, iam_calls, kind, of_kind, submit, wait_for_state

REVOCATIONS = 14
FAIL_AFTER = 9
ERROR_KEY = "simulated-network-error"


def test_network_error_after_9_of_14_revocations_applies_only_the_other_5(
    cluster: Cluster, store: TaskApplication
) -> None:
    iam = cluster.fake_iam()
    worker = cluster.worker()
    params = {"systems": 3, "revocations": REVOCATIONS, "fail_after_revocations": FAIL_AFTER}
    task_id = submit(store, "access-review", params)
    wait_for_state(store, task_id, "TASK_STATE_INPUT_REQUIRED", 60, cluster)
    answer(store, task_id, {"approve": True})
    task = wait_for_state(store, task_id, "TASK_STATE_COMPLETED", 60, cluster)
    history = events(store, task_id)

    # The step failed once, with the simulated error, and was retried.
    assert "simulated network error after 9 revocations" in worker.log()

    # The effect ledger: 9 revocations, the error, then the other 5; 14 distinct results.
    effects = of_kind(history, "EffectRecorded")
    keys = [e.key for e in effects]
    assert keys.count(ERROR_KEY) == 1
    error_at = keys.index(ERROR_KEY)
    revocations = [k for k in keys if k.startswith("revoke:")]
    assert len(revocations) == REVOCATIONS
    assert len(set(revocations)) == REVOCATIONS
    assert all(k.startswith("revoke:") for k in keys[:error_at])
    assert len(keys[:error_at]) == FAIL_AFTER
    assert len(keys[error_at + 1 :]) == REVOCATIONS - FAIL_AFTER
    assert len(task.effects) == REVOCATIONS + 1
    results = [e.result for e in effects if e.key.startswith("revoke:")]
    assert all(r["status"] == "revoked" for r in results)
    assert len({r["revocation_id"] for r in results}) == REVOCATIONS

    # The fake IAM: 14 POSTs in all, 9 before the error and 5 after, each key applied once.
    posts = [c for c in iam_calls(iam, task_id) if c["method"] == "POST" and c["path"] == "/revocations"]
    error_time = effects[error_at].timestamp.timestamp()
    assert len([c for c in posts if c["at"] < error_time]) == FAIL_AFTER
    assert len([c for c in posts if c["at"] > error_time]) == REVOCATIONS - FAIL_AFTER
    assert len(posts) == REVOCATIONS
    by_key = Counter(c["idempotency_key"] for c in posts)
    assert len(by_key) == REVOCATIONS
    assert set(by_key.values()) == {1}
    assert all(c["applied"] for c in posts)
    assert {c["idempotency_key"] for c in posts} == {f"{task_id}:{k}" for k in revocations}

    # The report says so, and nothing follows the completion.
    assert kind(history[-1]) == "Completed"
    report = next(iter(task.artifacts.values()))["parts"][0]["text"]
    assert f"## Applied revocations ({REVOCATIONS})" in report
