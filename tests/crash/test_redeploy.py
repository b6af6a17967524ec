"""Crash test 4: a redeploy mid-task.

Release A has ``deploy-demo`` v1 only; release B has v1 and v2; release C has v2 only.

A v1 task pauses for input under release A; release C refuses to start while it lives, naming
the task and the version. The answer arrives, the task runs its slow step, and the workers are
stopped (SIGTERM: the lease is released). Release B resumes the old task on v1 from its stored
tick, while a new task (through B's gateway) starts on v2. ``longhaul skills`` shows the live
count per version before and after; once the v1 task is done, release C starts.
"""

from __future__ import annotations

import json
import uuid
from uuid import UUID

from store.log.application import TaskApplication
from tests.crash.cluster import (
    Cluster,
    answer,
    events,
    kind,
    of_kind,
    rpc,
    submit,
    wait_for_state,
)
from tests.support.processes import wait_until

RELEASE_A = json.dumps(["tests.support.deploy_skills_v1"])
RELEASE_B = json.dumps(["tests.support.deploy_skills_v1_v2"])
RELEASE_C = json.dumps(["tests.support.deploy_skills_v2"])
TICKS = 12


def _skills(cluster: Cluster, release: str) -> dict[int, tuple[int, str]]:
    """``longhaul skills`` under ``release``: deploy-demo version -> (live tasks, status)."""
    done = cluster.run(["skills"], skill_modules=release)
    assert done.returncode == 0, done.stderr
    rows = {}
    for line in done.stdout.splitlines():
        fields = line.split(maxsplit=3)
        if fields and fields[0] == "deploy-demo":
            rows[int(fields[1])] = (int(fields[2]), fields[3])
    return rows


def _ticks(store: TaskApplication, task_id: UUID) -> int:
    return int(store.get(task_id).checkpoint.get("ticks", 0))


def test_redeploy_mid_task_finishes_old_tasks_on_v1_and_starts_new_ones_on_v2(
    cluster: Cluster, store: TaskApplication
) -> None:
    # Release A: the task starts on v1 and pauses.
    worker_a = cluster.worker(skill_modules=RELEASE_A)
    old = submit(store, "deploy-demo", {"ticks": TICKS, "tick_ms": 400}, version=1)
    wait_for_state(store, old, "TASK_STATE_INPUT_REQUIRED", 30, cluster)

    # Release C (v2 only) refuses to start while a v1 task lives, and says which.
    refused = cluster.run(["worker"], skill_modules=RELEASE_C)
    assert refused.returncode != 0
    assert str(old) in refused.stderr, refused.stderr
    assert "deploy-demo v1" in refused.stderr, refused.stderr
    live, status = _skills(cluster, RELEASE_C)[1]
    assert live == 1
    assert status.startswith("MISSING"), status

    # The answer arrives; mid-way through the slow step the workers are stopped.
    answer(store, old, {"go": True})
    wait_until(lambda: _ticks(store, old) >= 2, 30, "two ticks of the slow step")
    assert worker_a.stop() == 0, worker_a.log()
    history = events(store, old)
    assert kind(history[-1]) == "LeaseReleased", [kind(e) for e in history]
    assert history[-1].reason == "worker shutting down"
    stopped_at = _ticks(store, old)
    assert stopped_at < TICKS
    assert str(store.get(old).state) == "TASK_STATE_WORKING"
    assert _skills(cluster, RELEASE_B) == {
        1: (1, "draining"),
        2: (0, "newest: new tasks start here"),
    }

    # Release B: the old task resumes on v1 at the stored tick; a new task starts on v2.
    worker_b = cluster.worker(wait=False, skill_modules=RELEASE_B)
    gateway = cluster.gateway(skill_modules=RELEASE_B)
    cluster.wait_for_worker(worker_b)
    finished = wait_for_state(store, old, "TASK_STATE_COMPLETED", 60, cluster)
    assert finished.skill_version == 1
    marks = finished.artifacts["marks"]["parts"][0]["text"]
    assert marks == "v1:start v1:wait_for_go v1:slow v1:finish"
    history = events(store, old)
    ticks = [e for e in of_kind(history, "CheckpointSaved") if e.step == 2]
    assert [e.checkpoint["ticks"] for e in ticks] == list(range(1, TICKS + 1))
    assert {e.epoch for e in ticks if e.checkpoint["ticks"] > stopped_at} == {3}
    assert {e.epoch for e in ticks if e.checkpoint["ticks"] <= stopped_at} == {2}
    assert of_kind(history, "StepAttemptFailed") == [], "a takeover after a drain is no failed attempt"

    message = {
        "messageId": uuid.uuid4().hex,
        "role": "ROLE_USER",
        "parts": [{"text": "new"}],
        "metadata": {"skill": "deploy-demo"},
    }
    sent = rpc(gateway, "SendMessage", {"message": message})
    assert "result" in sent, sent
    new = sent["result"]["task"]
    assert new["status"]["state"] == "TASK_STATE_COMPLETED", new
    assert new["metadata"]["skillVersion"] == 2
    assert new["artifacts"][0]["parts"][0]["text"] == "v2:start v2:work v2:finish"

    # v1 has drained: the skills listing says so, and release C may start now.
    assert _skills(cluster, RELEASE_B) == {
        1: (0, "drained: can be removed"),
        2: (0, "newest: new tasks start here"),
    }
    release_c = cluster.worker(skill_modules=RELEASE_C)
    assert release_c.stop() == 0, release_c.log()
