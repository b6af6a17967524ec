"""Push configs on a terminal task (ADR 0025), over both bindings: JSON-RPC and HTTP+JSON.

A terminal task takes push configs (create, get, list, delete), and nothing else changes: the
Task a client reads is the same before and after, a message is still UnsupportedOperation, a
cancel TaskNotCancelable. An expired task is TaskNotFound on all four methods. The A2A TCK's
PUSH-CREATE-001/002, PUSH-GET-001, PUSH-LIST-001 and PUSH-DEL-001/002 do this on a completed task.
"""

from __future__ import annotations

import json
import socket
from dataclasses import dataclass
from datetime import timedelta
from typing import Any
from uuid import UUID

import httpx
import pytest

from domain.task import Task
from store.log.application import TaskApplication
from tests.api.support import Advance, log_position, user_message

JSON = dict[str, Any]
BINDINGS = ["jsonrpc", "rest"]
REST = "/a2a/rest"
HOOK = "https://hooks.example.com/late"
TOKEN = "tok-late-very-secret"
CREDENTIALS = "cred-late-very-secret"
CODES = {"TASK_NOT_FOUND": -32001, "TASK_NOT_CANCELABLE": -32002, "UNSUPPORTED_OPERATION": -32004}
HTTP_STATUS = {"TASK_NOT_FOUND": 404, "TASK_NOT_CANCELABLE": 400, "UNSUPPORTED_OPERATION": 400}


@pytest.fixture(autouse=True)
def public_hooks(monkeypatch: pytest.MonkeyPatch) -> None:
    """``hooks.example.com`` resolves to a public address (the SSRF guard lets it through)."""
    real = socket.getaddrinfo

    def getaddrinfo(host: Any, port: Any, *args: Any, **kwargs: Any) -> Any:
        if host == "hooks.example.com":
            return [(socket.AF_INET, socket.SOCK_STREAM, 6, "", ("93.184.215.14", port))]
        return real(host, port, *args, **kwargs)

    monkeypatch.setattr(socket, "getaddrinfo", getaddrinfo)


@dataclass
class Answer:
    """One binding's answer: the result, or the ErrorInfo reason (checked against code and status)."""

    result: Any = None
    reason: str | None = None


async def call(client: httpx.AsyncClient, binding: str, method: str, params: JSON) -> Answer:
    """``method`` over ``binding``; an error's JSON-RPC code or HTTP status must match its reason."""
    if binding == "jsonrpc":
        body = {"jsonrpc": "2.0", "id": 1, "method": method, "params": params}
        response = await client.post("/a2a/jsonrpc", json=body)
        assert response.status_code == 200, response.text
        document: JSON = response.json()
        if "result" in document:
            return Answer(result=document["result"])
        reason = document["error"]["data"][0]["reason"]
        assert document["error"]["code"] == CODES[reason], document
        return Answer(reason=reason)
    response = await _rest(client, method, params)
    if response.status_code == 200:
        return Answer(result=response.json())
    status = response.json()["error"]
    reason = status["details"][0]["reason"]
    assert response.status_code == HTTP_STATUS[reason], response.text
    return Answer(reason=reason)


async def _rest(client: httpx.AsyncClient, method: str, params: JSON) -> httpx.Response:
    rest = {k: v for k, v in params.items() if k not in {"taskId", "id"}}
    if method in {"SendMessage", "GetTask", "CancelTask"}:
        return await _rest_task(client, method, params)
    configs = f"{REST}/tasks/{params['taskId']}/pushNotificationConfigs"
    if method == "CreateTaskPushNotificationConfig":
        return await client.post(configs, json={**rest, **({"id": params["id"]} if "id" in params else {})})
    if method == "GetTaskPushNotificationConfig":
        return await client.get(f"{configs}/{params['id']}")
    if method == "ListTaskPushNotificationConfigs":
        return await client.get(configs, params={k: str(v) for k, v in rest.items()})
    assert method == "DeleteTaskPushNotificationConfig"
    return await client.delete(f"{configs}/{params['id']}")


async def _rest_task(client: httpx.AsyncClient, method: str, params: JSON) -> httpx.Response:
    if method == "SendMessage":
        return await client.post(f"{REST}/message:send", json=params)
    if method == "GetTask":
        return await client.get(f"{REST}/tasks/{params['id']}")
    return await client.post(f"{REST}/tasks/{params['id']}:cancel")


def _config(task_id: str, config_id: str) -> JSON:
    return {
        "taskId": task_id,
        "id": config_id,
        "url": HOOK,
        "token": TOKEN,
        "authentication": {"scheme": "Bearer", "credentials": CREDENTIALS},
    }


def _wire(task_id: str, config_id: str) -> JSON:
    return {"id": config_id, "taskId": task_id, "url": HOOK, "authentication": {"scheme": "Bearer"}}


async def _ended(client: httpx.AsyncClient, binding: str, advance: Advance, how: str) -> str:
    """A task that ended ``how`` (completed or canceled), with config ``early`` set while it ran."""
    started = await call(
        client,
        binding,
        "SendMessage",
        {"message": user_message(), "configuration": {"returnImmediately": True}},
    )
    task_id: str = started.result["task"]["id"]
    assert (await call(client, binding, "CreateTaskPushNotificationConfig", _config(task_id, "early"))).result
    if how == "completed":
        advance.complete(UUID(task_id))
    else:
        assert (await call(client, binding, "CancelTask", {"id": task_id})).result
    return task_id


@pytest.mark.parametrize("binding", BINDINGS)
@pytest.mark.parametrize("how", ["completed", "canceled"])
async def test_create_get_list_and_delete_work_on_an_ended_task(
    client: httpx.AsyncClient, store: TaskApplication, advance: Advance, binding: str, how: str
) -> None:
    task_id = await _ended(client, binding, advance, how)
    before = (await call(client, binding, "GetTask", {"id": task_id})).result
    advance.clock.advance(timedelta(days=3))

    created = await call(client, binding, "CreateTaskPushNotificationConfig", _config(task_id, "late"))
    got = await call(client, binding, "GetTaskPushNotificationConfig", {"taskId": task_id, "id": "late"})
    listed = await call(client, binding, "ListTaskPushNotificationConfigs", {"taskId": task_id})
    deleted = await call(
        client, binding, "DeleteTaskPushNotificationConfig", {"taskId": task_id, "id": "early"}
    )
    position = log_position(store)
    again = await call(
        client, binding, "DeleteTaskPushNotificationConfig", {"taskId": task_id, "id": "early"}
    )
    gone = await call(client, binding, "GetTaskPushNotificationConfig", {"taskId": task_id, "id": "early"})
    after = await call(client, binding, "ListTaskPushNotificationConfigs", {"taskId": task_id})

    assert created.result == got.result == _wire(task_id, "late")
    assert listed.result == {
        "configs": [_wire(task_id, "early"), _wire(task_id, "late")],
        "nextPageToken": "",
    }
    assert deleted.result == again.result == {}
    assert log_position(store) == position  # deleting again appended nothing
    assert gone.reason == "TASK_NOT_FOUND"
    assert after.result == {"configs": [_wire(task_id, "late")], "nextPageToken": ""}
    # What a client reads of the task did not change; the log holds the two config events.
    assert (await call(client, binding, "GetTask", {"id": task_id})).result == before
    events = list(store.history(UUID(task_id)))
    assert [type(e).__name__ for e in events[-2:]] == ["PushConfigSet", "PushConfigRemoved"]
    # Nothing will be delivered after the end: the late config's secrets are not kept.
    late = store.get(UUID(task_id)).push_configs["late"]
    assert TOKEN not in json.dumps(late)
    assert CREDENTIALS not in json.dumps(late)
    assert (
        store.get(UUID(task_id)).ended_at == next(e for e in events if isinstance(e, Task._Ended)).timestamp
    )


@pytest.mark.parametrize("binding", BINDINGS)
async def test_an_ended_task_still_refuses_messages_and_cancels(
    client: httpx.AsyncClient, store: TaskApplication, advance: Advance, binding: str
) -> None:
    task_id = await _ended(client, binding, advance, "completed")
    await call(client, binding, "CreateTaskPushNotificationConfig", _config(task_id, "late"))
    position = log_position(store)

    message = await call(client, binding, "SendMessage", {"message": user_message(taskId=task_id)})
    cancel = await call(client, binding, "CancelTask", {"id": task_id})

    assert message.reason == "UNSUPPORTED_OPERATION"
    assert cancel.reason == "TASK_NOT_CANCELABLE"
    assert log_position(store) == position
    assert store.get(UUID(task_id)).state == "TASK_STATE_COMPLETED"


@pytest.mark.parametrize("binding", BINDINGS)
async def test_an_expired_task_is_not_found_on_every_config_method(
    client: httpx.AsyncClient, store: TaskApplication, advance: Advance, binding: str
) -> None:
    task_id = await _ended(client, binding, advance, "completed")
    advance.expire(UUID(task_id))
    position = log_position(store)
    calls = {
        "CreateTaskPushNotificationConfig": _config(task_id, "late"),
        "GetTaskPushNotificationConfig": {"taskId": task_id, "id": "early"},
        "ListTaskPushNotificationConfigs": {"taskId": task_id},
        "DeleteTaskPushNotificationConfig": {"taskId": task_id, "id": "early"},
    }

    for method, params in calls.items():
        assert (await call(client, binding, method, params)).reason == "TASK_NOT_FOUND", method
    assert log_position(store) == position
