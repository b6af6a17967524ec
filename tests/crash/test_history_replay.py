"""An auditor's replay of a task that paused, was resumed, and lost its worker to SIGKILL.

Real processes: two workers, a gateway with an API key, the fake IAM. The client submits an
access review and answers its approval question through the gateway; the worker holding the task
is SIGKILLed mid-fetch and the other resumes it. Then ``longhaul history`` (a real CLI process)
names every event's actor — the client's tenant and key id, each worker with its epoch — and, at
every version, ``history --at-version N`` and the gateway's ``GET /audit/v1/tasks/{id}/state``
answer the same state as a fold of the first N events done here.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any
from uuid import UUID

import httpx

from api.api_keys import digest_of, key_id_of
from store.log.application import TaskApplication
from store.public_form.event_json import dumps
from store.public_form.task_state import task_state_json
from tests.crash.cluster import Cluster, events, holder_pid, user_message, wait_for_state, worker_id
from tests.support.audited_task import replayed
from tests.support.processes import wait_until

JSON = dict[str, Any]
KEY = "acme-audit-key-0123456789"
KEY_ID = key_id_of(digest_of(KEY))
HEADERS = {"A2A-Version": "1.0", "Authorization": f"Bearer {KEY}"}


def _fetched(store: TaskApplication, task_id: UUID) -> int:
    return len(store.get(task_id).checkpoint.get("fetched", []))


def _send(base: str, message: JSON) -> JSON:
    body = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "SendMessage",
        "params": {"message": message, "configuration": {"returnImmediately": True}},
    }
    answer = httpx.post(f"{base}/a2a/jsonrpc", json=body, headers=HEADERS, timeout=30).json()
    assert "result" in answer, answer
    task: JSON = answer["result"]["task"]
    return task


def test_history_and_the_http_state_equal_a_replay_after_a_pause_and_a_crash(
    cluster: Cluster, store: TaskApplication, cli: Callable[..., tuple[int, str, str]]
) -> None:
    cluster.fake_iam()
    workers = cluster.workers(2)
    base = cluster.gateway(api_keys=f"acme={KEY}")
    params = {"systems": 6, "fetch_delay_ms": 300, "revocations": 3}
    first = {**user_message(params, "review"), "metadata": {"skill": "access-review"}}
    task_id = UUID(_send(base, first)["id"])

    wait_until(lambda: _fetched(store, task_id) >= 2, 60, "two fetched systems", interval=0.01)
    victim = next(w for w in workers if w.pid == holder_pid(store, task_id))
    survivor = next(w for w in workers if w is not victim)
    victim.kill()
    paused = wait_for_state(store, task_id, "TASK_STATE_INPUT_REQUIRED", 60, cluster)
    answer = {
        **user_message({"approve": True}, "approved"),
        "taskId": str(task_id),
        "contextId": paused.context_id,
    }
    _send(base, answer)
    wait_for_state(store, task_id, "TASK_STATE_COMPLETED", 60, cluster)
    history = events(store, task_id)

    done = cluster.run(["history", str(task_id), "--json"])
    assert done.returncode == 0, done.stderr
    audited = json.loads(done.stdout)["events"]
    actors = [(e["type"], e["actor"]) for e in audited]
    client = {"kind": "client", "tenant": "acme", "keyId": KEY_ID, "text": f"client acme (key {KEY_ID})"}
    assert actors[0] == ("Submitted", client)
    assert [a for t, a in actors if t == "InputReceived"] == [client]
    grants = [a for t, a in actors if t == "LeaseGranted"]
    assert grants[:2] == [
        {
            "kind": "worker",
            "workerId": worker_id(victim),
            "epoch": 1,
            "text": f"worker {worker_id(victim)} (epoch 1)",
        },
        {
            "kind": "worker",
            "workerId": worker_id(survivor),
            "epoch": 2,
            "text": f"worker {worker_id(survivor)} (epoch 2)",
        },
    ]
    by_grant = {a["epoch"]: a["workerId"] for a in grants}
    for kind, actor in actors:
        if actor["kind"] == "worker":
            assert actor["workerId"] == by_grant[actor["epoch"]], kind
    effects = [a for t, a in actors if t == "EffectRecorded"]
    assert len(effects) == 3
    assert all(a["kind"] == "worker" and a["epoch"] >= 2 for a in effects)

    for version in range(1, len(history) + 1):
        expected = json.loads(dumps(task_state_json(replayed(history, version))))
        code, out, err = cli("history", str(task_id), "--at-version", str(version), "--json")
        assert (code, err) == (0, ""), version
        assert json.loads(out) == expected, version
        response = httpx.get(
            f"{base}/audit/v1/tasks/{task_id}/state", params={"version": version}, headers=HEADERS, timeout=30
        )
        assert response.status_code == 200, response.text
        assert response.json() == expected, version
    states = [
        json.loads(dumps(task_state_json(replayed(history, v))))["task"]["status"]["state"]
        for v in range(1, len(history) + 1)
    ]
    assert "TASK_STATE_INPUT_REQUIRED" in states
    assert states[-1] == "TASK_STATE_COMPLETED"
