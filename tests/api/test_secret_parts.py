"""The gateway and secret parts: a marked part is stored sealed and shown redacted on both bindings."""

from __future__ import annotations

import json
from typing import Any
from uuid import UUID

import httpx

from store.log.application import TaskApplication
from store.secrets.secret_parts import REDACTED_PART, SECRET_EXTENSION
from tests.api.support import A2A_HEADERS, Rpc, user_message

SECRET = "sk-gateway-secret-0123456789"


def marked(**extra: Any) -> dict[str, Any]:
    return user_message(
        "research tides",
        parts=[
            {"text": "research tides"},
            {"data": {"api_key": SECRET}, "metadata": {SECRET_EXTENSION: True}},
            {"data": {"chunks": 2}},
        ],
        **extra,
    )


async def test_a_marked_part_is_redacted_in_every_answer_and_sealed_in_the_log(
    rpc: Rpc, client: httpx.AsyncClient, store: TaskApplication
) -> None:
    sent = await rpc("SendMessage", {"message": marked(), "configuration": {"returnImmediately": True}})
    task = sent["result"]["task"]

    got_rpc = (await rpc("GetTask", {"id": task["id"]}))["result"]
    got_rest = (await client.get(f"/a2a/rest/tasks/{task['id']}", headers=A2A_HEADERS)).json()

    for shown in (task, got_rpc, got_rest):
        assert SECRET not in json.dumps(shown)
        assert shown["history"][0]["parts"] == [
            {"text": "research tides"},
            REDACTED_PART,
            {"data": {"chunks": 2}},
        ]
    stored = store.get(UUID(task["id"]))
    assert stored.params == {"chunks": 2}
    assert SECRET not in "".join(e.state.decode() for e in store.recorder.select_events(stored.id))
    opened = store.reveal(stored, stored.latest_input)
    assert opened["parts"][1] == {"data": {"api_key": SECRET}, "metadata": {SECRET_EXTENSION: True}}


async def test_a_resent_first_message_with_a_secret_finds_its_task(rpc: Rpc) -> None:
    message = marked()
    first = await rpc("SendMessage", {"message": message, "configuration": {"returnImmediately": True}})
    again = await rpc("SendMessage", {"message": message, "configuration": {"returnImmediately": True}})

    assert again["result"]["task"]["id"] == first["result"]["task"]["id"]
    assert SECRET not in json.dumps(again)
