"""Issue 9's "done when": a task that paused, survived a worker crash and completed verifies.

Real processes on real PostgreSQL: two workers run an access review; the one holding it is
SIGKILLed mid-fetch, the other resumes it, it pauses for the owners' approval, the answer comes
(appended by this process, as the gateway would), and it completes. Its events were written by
three processes, none of which knew the chain heads of the others' commits. ``longhaul verify``
passes; one byte changed behind longhaul's back is then named, and nothing else.
"""

from __future__ import annotations

from uuid import UUID

import psycopg
from psycopg import sql

from store.application import TaskApplication
from store.config import StoreConfig
from tests.crash.cluster import Cluster, answer, events, holder_pid, of_kind, submit, wait_for_state
from tests.support.processes import wait_until

SYSTEMS = 6
KILL_AFTER = 3


def _fetched(store: TaskApplication, task_id: UUID) -> int:
    return len(store.get(task_id).checkpoint.get("fetched", []))


def test_a_paused_crashed_completed_task_verifies_and_a_changed_byte_is_named(
    cluster: Cluster, store: TaskApplication
) -> None:
    cluster.fake_iam()
    workers = cluster.workers(2)
    params = {"systems": SYSTEMS, "fetch_delay_ms": 300, "revocations": 2}
    task_id = submit(store, "access-review", params)
    wait_until(lambda: _fetched(store, task_id) >= KILL_AFTER, 60, "3 fetched systems", interval=0.01)
    pid = holder_pid(store, task_id)
    next(w for w in workers if w.pid == pid).kill()

    wait_for_state(store, task_id, "TASK_STATE_INPUT_REQUIRED", 90, cluster)
    answer(store, task_id, {"approve": True})
    wait_for_state(store, task_id, "TASK_STATE_COMPLETED", 60, cluster)
    history = events(store, task_id)
    assert [g.epoch for g in of_kind(history, "LeaseGranted")][:2] == [1, 2]  # it did survive a crash
    assert of_kind(history, "InputRequested")
    assert of_kind(history, "InputReceived")

    done = cluster.run(["verify"])
    assert done.returncode == 0, done.stdout + done.stderr
    assert "every chain verifies (1 tasks," in done.stdout

    version = of_kind(history, "InputReceived")[0].originator_version
    config = store.config
    assert isinstance(config, StoreConfig)
    with psycopg.connect(config.database_url, autocommit=True) as conn:
        conn.execute(
            sql.SQL(
                "UPDATE {} SET state = overlay(state placing '\\x20'::bytea from 1 for 1)"
                " WHERE originator_id = %s AND originator_version = %s"
            ).format(sql.Identifier(config.schema, "longhaul_events")),
            (task_id, version),
        )
    done = cluster.run(["verify"])
    assert done.returncode == 1
    faults = [line for line in done.stdout.splitlines() if line.startswith("task ")]
    assert faults == [
        f"task {task_id} version {version}: hash-mismatch: the event does not match its hash: it was altered"
    ]
