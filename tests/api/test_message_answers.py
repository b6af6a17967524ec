"""SendMessage answered with a bare Message: the task runs and is logged, the send gets its reply.

The ``conformance`` skill answers ``tck-message-response-…`` this way (ADR 0020); no worker runs
here, ``Advance`` plays it.
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import AsyncIterator, Callable
from datetime import timedelta
from typing import Any
from uuid import UUID, uuid4

import httpx
import pytest_asyncio
from litestar import Litestar

from api import wire
from domain.messages import agent_message
from domain.skill import SkillRegistry
from store.log.application import TaskApplication
from tests.api.support import Advance, Rpc, http_client, log_position, task_id_for, user_message
from workers.skills.conformance import conformance_skills

JSON = dict[str, Any]
REPLY_ID = "tck-message-response-0a1b2c3d"
IMMEDIATE = {"returnImmediately": True}


@pytest_asyncio.fixture
async def client(make_app: Callable[..., Litestar]) -> AsyncIterator[httpx.AsyncClient]:
    app = make_app(registry=SkillRegistry(conformance_skills()), default_skill="conformance")
    async with http_client(app) as http:
        yield http


async def _worker(advance: Advance, message_id: str, text: str = "Direct message response") -> None:
    """Complete the task as the step runner does: with an agent message addressed to it."""
    task_id = task_id_for(message_id)
    await advance.wait_exists(task_id)
    await asyncio.sleep(0.05)  # the send is waiting by now
    task = advance.start(task_id)
    task.complete(
        epoch=task.lease_epoch,
        now=advance.clock(),
        message=agent_message(task, text, message_id=str(uuid4())),
    )
    await asyncio.to_thread(advance.store.save_tasks, task)


async def _send(rpc: Rpc, message_id: str, **params: object) -> JSON:
    answer: JSON = await rpc("SendMessage", {"message": user_message(message_id=message_id), **params})
    return answer


async def test_the_send_answers_with_the_reply_message_and_the_task_is_logged(
    rpc: Rpc, advance: Advance, store: TaskApplication
) -> None:
    answer, _ = await asyncio.gather(_send(rpc, REPLY_ID), _worker(advance, REPLY_ID))

    result = answer["result"]
    assert set(result) == {"message"}
    message = wire.Message.model_validate(result["message"])
    assert message.role == "ROLE_AGENT"
    assert result["message"]["parts"] == [{"text": "Direct message response"}]
    task = store.get(task_id_for(REPLY_ID))
    assert result["message"]["taskId"] == str(task.id)
    assert result["message"]["contextId"] == task.context_id
    assert result["message"] == task.status_message  # the reply is in the log
    got = await rpc("GetTask", {"id": str(task.id)})
    assert got["result"]["status"]["state"] == "TASK_STATE_COMPLETED"


async def test_return_immediately_has_no_effect_on_a_message_answer(rpc: Rpc, advance: Advance) -> None:
    answer, _ = await asyncio.gather(
        _send(rpc, REPLY_ID, configuration=IMMEDIATE), _worker(advance, REPLY_ID)
    )

    assert answer["result"]["message"]["parts"] == [{"text": "Direct message response"}]


async def test_a_resend_gets_the_same_message_and_appends_nothing(
    rpc: Rpc, advance: Advance, store: TaskApplication
) -> None:
    first, _ = await asyncio.gather(_send(rpc, REPLY_ID), _worker(advance, REPLY_ID))
    before = log_position(store)

    again = await _send(rpc, REPLY_ID)

    assert again["result"] == first["result"]
    assert log_position(store) == before


async def test_a_task_that_does_not_complete_answers_with_the_task(
    rpc: Rpc, advance: Advance, store: TaskApplication
) -> None:
    async def fail() -> None:
        task_id = task_id_for(REPLY_ID)
        await advance.wait_exists(task_id)
        await asyncio.sleep(0.05)
        task = store.get(task_id)
        now = advance.clock()
        epoch = task.grant_lease(worker="w", now=now, until=now + timedelta(hours=1))
        task.fail(epoch=epoch, now=now, reason="broken", message=None)
        await asyncio.to_thread(store.save_tasks, task)

    answer, _ = await asyncio.gather(_send(rpc, REPLY_ID), fail())

    assert answer["result"]["task"]["status"]["state"] == "TASK_STATE_FAILED"


async def test_other_scenarios_of_the_skill_answer_with_the_task(rpc: Rpc, advance: Advance) -> None:
    message_id = "tck-complete-task-0a1b2c3d"
    answer, _ = await asyncio.gather(_send(rpc, message_id), _worker(advance, message_id, "Hello from TCK"))

    task = answer["result"]["task"]
    assert task["id"] == str(task_id_for(message_id))
    assert UUID(task["id"])
    assert task["status"]["state"] == "TASK_STATE_COMPLETED"


async def test_a_resend_to_a_task_of_a_dropped_skill_version_answers_with_the_task(
    make_app: Callable[..., Litestar], advance: Advance
) -> None:
    async with http_client(
        make_app(registry=SkillRegistry(conformance_skills()), default_skill="conformance")
    ) as old:
        body = {
            "jsonrpc": "2.0",
            "id": 1,
            "method": "SendMessage",
            "params": {"message": user_message(message_id=REPLY_ID)},
        }
        await asyncio.gather(old.post("/a2a/jsonrpc", json=body), _worker(advance, REPLY_ID))
    newer = SkillRegistry([dataclasses.replace(conformance_skills()[-1], version=3)])

    async with http_client(make_app(registry=newer, default_skill="conformance")) as http:
        answer = (await http.post("/a2a/jsonrpc", json=body)).json()

    assert answer["result"]["task"]["status"]["state"] == "TASK_STATE_COMPLETED"
