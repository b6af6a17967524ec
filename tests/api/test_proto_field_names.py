"""Params by their proto field names: ProtoJSON parsers accept ``task_id`` as well as ``taskId``.

The TCK's JSON-RPC client sends ``task_id`` for the push notification config methods.
"""

from __future__ import annotations

from typing import Any

from tests.api.support import Rpc, error_of, user_message

JSON = dict[str, Any]
HOOK = "https://93.184.215.14/hook"  # a public address literal: no DNS; never called here


async def _task(rpc: Rpc) -> str:
    response = await rpc(
        "SendMessage", {"message": user_message(), "configuration": {"return_immediately": True}}
    )
    task: JSON = response["result"]["task"]
    assert task["status"]["state"] == "TASK_STATE_SUBMITTED"  # return_immediately was read
    task_id: str = task["id"]
    return task_id


async def test_push_config_methods_take_task_id(rpc: Rpc) -> None:
    task_id = await _task(rpc)

    created = await rpc("CreateTaskPushNotificationConfig", {"task_id": task_id, "id": "h1", "url": HOOK})
    got = await rpc("GetTaskPushNotificationConfig", {"task_id": task_id, "id": "h1"})
    listed = await rpc("ListTaskPushNotificationConfigs", {"task_id": task_id, "page_size": 5})
    deleted = await rpc("DeleteTaskPushNotificationConfig", {"task_id": task_id, "id": "h1"})

    expected = {"id": "h1", "taskId": task_id, "url": HOOK}
    assert created["result"] == expected
    assert got["result"] == expected
    assert listed["result"] == {"configs": [expected], "nextPageToken": ""}
    assert deleted["result"] == {}


async def test_a_message_by_proto_field_names(rpc: Rpc) -> None:
    message = {
        "message_id": "snake-1",
        "role": "ROLE_USER",
        "parts": [{"text": "hi", "media_type": "text/plain"}],
    }

    response = await rpc(
        "SendMessage",
        {"message": message, "configuration": {"history_length": 0, "return_immediately": True}},
    )

    task = response["result"]["task"]
    assert "history" not in task  # history_length was read
    got = await rpc("GetTask", {"id": task["id"], "history_length": 1})
    assert got["result"]["history"][0]["messageId"] == "snake-1"
    assert got["result"]["history"][0]["parts"] == [{"text": "hi", "mediaType": "text/plain"}]


async def test_a_misspelt_member_is_still_no_member(rpc: Rpc) -> None:
    response = await rpc("GetTaskPushNotificationConfig", {"taskid": "x", "id": "h1"})

    error_of(response, -32602, "INVALID_PARAMS")
