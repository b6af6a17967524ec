"""Crash test 5: a pause of a day.

Two access reviews reach TASK_STATE_INPUT_REQUIRED: one with an approval deadline of two days,
one with a deadline of an hour. Every process is stopped. Everything starts again with every
clock a day later (``LONGHAUL_CLOCK_OFFSET_SECONDS=86400``):

- the answer to the one-hour task gets a clear error from SendMessage (its deadline passed) and
  appends nothing; the sweeper then fails it with a status message naming the deadline, and a
  later answer is refused too;
- the answer to the two-day task, a day late, completes it.
"""

from __future__ import annotations

import uuid
from typing import Any

from store.log.application import TaskApplication
from tests.crash.cluster import JSON, Cluster, events, kind, of_kind, rpc, wait_for_state

DAY = 86400


def _start(cluster: Cluster, **overrides: str) -> str:
    cluster.fake_iam()
    worker = cluster.worker(wait=False, **overrides)
    gateway = cluster.gateway(**overrides)
    cluster.wait_for_worker(worker)
    return gateway


def _review(gateway: str, deadline_s: int) -> JSON:
    params = {"systems": 2, "revocations": 3, "approval_deadline_s": deadline_s}
    message = {
        "messageId": uuid.uuid4().hex,
        "role": "ROLE_USER",
        "parts": [{"text": "quarterly review"}, {"data": params}],
        "metadata": {"skill": "access-review"},
    }
    sent = rpc(gateway, "SendMessage", {"message": message})
    assert "result" in sent, sent
    task: JSON = sent["result"]["task"]
    assert task["status"]["state"] == "TASK_STATE_INPUT_REQUIRED", task
    return task


def _answer(gateway: str, task: JSON, approve: bool) -> JSON:
    message = {
        "messageId": uuid.uuid4().hex,
        "role": "ROLE_USER",
        "parts": [{"data": {"approve": approve}}],
        "taskId": task["id"],
        "contextId": task["contextId"],
    }
    return rpc(gateway, "SendMessage", {"message": message})


def _text(message: Any) -> str:
    return " ".join(p.get("text", "") for p in message["parts"])


def test_an_answer_a_day_later_completes_and_a_passed_deadline_fails(
    cluster: Cluster, store: TaskApplication
) -> None:
    gateway = _start(cluster)
    cluster.sweeper()
    patient = _review(gateway, 2 * DAY)
    hasty = _review(gateway, 3600)
    patient_id, hasty_id = uuid.UUID(patient["id"]), uuid.UUID(hasty["id"])

    # Every process stops while both tasks wait; nothing of them lives outside the log.
    cluster.stop_all()
    for task_id in (patient_id, hasty_id):
        waiting = store.get(task_id)
        assert str(waiting.state) == "TASK_STATE_INPUT_REQUIRED"
        assert waiting.lease_owner is None

    # A day later.
    gateway = _start(cluster, clock_offset_seconds=str(DAY))
    hasty_deadline = of_kind(events(store, hasty_id), "InputRequested")[-1].deadline
    version = store.get(hasty_id).version
    late = _answer(gateway, hasty, approve=True)
    assert "error" in late, late
    assert late["error"]["code"] == -32004
    assert "deadline" in late["error"]["message"], late
    assert "passed" in late["error"]["message"], late
    assert store.get(hasty_id).version == version, "a refused answer appended something"

    cluster.sweeper(clock_offset_seconds=str(DAY))
    failed = wait_for_state(store, hasty_id, "TASK_STATE_FAILED", 30, cluster)
    assert failed.status_message is not None
    status_text = _text(failed.status_message)
    assert "deadline" in status_text, status_text
    assert hasty_deadline.isoformat() in status_text, status_text
    assert hasty_deadline.isoformat() in of_kind(events(store, hasty_id), "Failed")[0].reason
    got = rpc(gateway, "GetTask", {"id": hasty["id"]})["result"]
    assert got["status"]["state"] == "TASK_STATE_FAILED"
    assert "deadline" in _text(got["status"]["message"])
    again = _answer(gateway, hasty, approve=True)
    assert again["error"]["code"] == -32004, again
    assert "TASK_STATE_FAILED" in again["error"]["message"], again

    # The patient task is still waiting (its deadline is a day away) and the answer completes it.
    assert str(store.get(patient_id).state) == "TASK_STATE_INPUT_REQUIRED"
    done = _answer(gateway, patient, approve=True)
    assert "result" in done, done
    assert done["result"]["task"]["status"]["state"] == "TASK_STATE_COMPLETED", done
    history = events(store, patient_id)
    asked = of_kind(history, "InputRequested")[-1]
    received = of_kind(history, "InputReceived")[-1]
    waited = (received.timestamp - asked.timestamp).total_seconds()
    assert DAY <= waited < 2 * DAY
    assert received.timestamp < asked.deadline
    assert kind(history[-1]) == "Completed"
    assert len([e for e in of_kind(history, "EffectRecorded") if e.key.startswith("revoke:")]) == 3
