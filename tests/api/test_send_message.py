"""SendMessage: new tasks, skill routing, resends, blocking and follow-up answers."""

from __future__ import annotations

import asyncio
import re
from collections.abc import Callable
from datetime import timedelta
from typing import Any
from uuid import UUID

import pytest
from litestar import Litestar

from api import wire
from store.log.application import TaskApplication
from tests.api.support import (
    Advance,
    FakeClock,
    Rpc,
    error_of,
    http_client,
    log_position,
    task_id_for,
    user_message,
)

JSON = dict[str, Any]
IMMEDIATE = {"returnImmediately": True}
ISO_MILLIS_Z = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z")


async def _send_new(rpc: Rpc, **params: object) -> JSON:
    response = await rpc("SendMessage", {"message": user_message(), "configuration": IMMEDIATE, **params})
    task: JSON = response["result"]["task"]
    return task


class TestNewTask:
    async def test_returns_the_submitted_task_with_the_addressed_user_message(
        self, rpc: Rpc, store: TaskApplication
    ) -> None:
        message = user_message("hello", message_id="m-1")

        response = await rpc("SendMessage", {"message": message, "configuration": IMMEDIATE}, request_id="r1")

        assert response["id"] == "r1"
        task = response["result"]["task"]
        wire.WireTask.model_validate(task)
        assert task["id"] == str(task_id_for("m-1"))
        assert task["status"]["state"] == "TASK_STATE_SUBMITTED"
        assert ISO_MILLIS_Z.fullmatch(task["status"]["timestamp"])
        assert str(UUID(task["contextId"])) == task["contextId"]
        assert task["history"] == [{**message, "taskId": task["id"], "contextId": task["contextId"]}]
        assert task["metadata"] == {"skill": "echo", "skillVersion": 2}
        assert "artifacts" not in task
        stored = store.get(UUID(task["id"]))
        assert stored.history[0]["taskId"] == task["id"]
        assert stored.tenant == "default"

    async def test_keeps_the_clients_context_id(self, rpc: Rpc) -> None:
        task = await _send_new(rpc, message=user_message(contextId="ctx-client"))

        assert task["contextId"] == "ctx-client"

    async def test_history_length_zero_omits_history(self, rpc: Rpc) -> None:
        response = await rpc(
            "SendMessage",
            {"message": user_message(), "configuration": {"returnImmediately": True, "historyLength": 0}},
        )

        assert "history" not in response["result"]["task"]

    async def test_skill_parameters_come_from_the_first_object_data_part(
        self, rpc: Rpc, store: TaskApplication
    ) -> None:
        message = user_message()
        message["parts"] = [
            {"text": "review"},
            {"data": [1, 2]},
            {"data": {"systems": ["crm"]}, "mediaType": "application/json"},
            {"data": {"ignored": True}},
        ]

        task = await _send_new(rpc, message=message)

        assert store.get(UUID(task["id"])).params == {"systems": ["crm"]}

    async def test_without_a_data_part_parameters_are_empty(self, rpc: Rpc, store: TaskApplication) -> None:
        task = await _send_new(rpc)

        assert store.get(UUID(task["id"])).params == {}

    async def test_tenant_is_recorded_and_walls_the_task_off(self, rpc: Rpc, store: TaskApplication) -> None:
        task = await _send_new(rpc, tenant="acme")

        assert store.get(UUID(task["id"])).tenant == "acme"
        error_of(await rpc("GetTask", {"id": task["id"]}), -32001, "TASK_NOT_FOUND")
        error_of(await rpc("GetTask", {"id": task["id"], "tenant": "other"}), -32001, "TASK_NOT_FOUND")
        assert (await rpc("GetTask", {"id": task["id"], "tenant": "acme"}))["result"]["id"] == task["id"]


class TestSkillRouting:
    @pytest.mark.parametrize(
        ("message_metadata", "request_metadata", "skill", "version"),
        [
            (None, None, "echo", 2),
            ({"skill": "research"}, None, "research", 1),
            (None, {"skill": "research"}, "research", 1),
            ({"skill": "echo"}, {"skill": "research"}, "echo", 2),
        ],
    )
    async def test_message_then_request_metadata_then_default_skill(
        self,
        rpc: Rpc,
        message_metadata: dict[str, str] | None,
        request_metadata: dict[str, str] | None,
        skill: str,
        version: int,
    ) -> None:
        message = user_message(metadata=message_metadata) if message_metadata else user_message()
        params: dict[str, object] = {"message": message}
        if request_metadata:
            params["metadata"] = request_metadata

        task = await _send_new(rpc, **params)

        assert task["metadata"] == {"skill": skill, "skillVersion": version}

    async def test_unknown_skill_is_invalid_params_and_appends_nothing(
        self, rpc: Rpc, store: TaskApplication
    ) -> None:
        before = log_position(store)

        response = await rpc("SendMessage", {"message": user_message(metadata={"skill": "nope"})})

        error = error_of(response, -32602, "INVALID_PARAMS")
        assert error["message"] == "unknown skill 'nope' (known: echo, research)"
        assert log_position(store) == before

    async def test_unknown_default_skill_is_invalid_params(
        self, make_app: Callable[..., Litestar], store: TaskApplication
    ) -> None:
        async with http_client(make_app(default_skill="missing")) as http:
            body = {"jsonrpc": "2.0", "id": 1, "method": "SendMessage", "params": {"message": user_message()}}
            response = (await http.post("/a2a/jsonrpc", json=body)).json()

        assert "unknown skill 'missing'" in error_of(response, -32602, "INVALID_PARAMS")["message"]
        assert log_position(store) == 0

    async def test_non_string_skill_is_invalid_params(self, rpc: Rpc, store: TaskApplication) -> None:
        response = await rpc("SendMessage", {"message": user_message(metadata={"skill": 7})})

        error_of(response, -32602, "INVALID_PARAMS")
        assert log_position(store) == 0


class TestResend:
    async def test_a_resent_message_returns_the_same_task_and_appends_nothing(
        self, rpc: Rpc, store: TaskApplication
    ) -> None:
        first = await _send_new(rpc, message=user_message("one", message_id="dup"))
        before = log_position(store)

        again = await _send_new(rpc, message=user_message("one", message_id="dup"))

        assert again == first
        assert log_position(store) == before
        assert len(list(store.history(UUID(str(first["id"]))))) == 1

    async def test_the_same_message_id_in_another_tenant_is_another_task(self, rpc: Rpc) -> None:
        first = await _send_new(rpc, message=user_message(message_id="same"))
        other = await _send_new(rpc, message=user_message(message_id="same"), tenant="acme")

        assert other["id"] != first["id"]

    @pytest.mark.postgres  # the race is decided by PostgreSQL's primary key
    async def test_concurrent_resends_create_one_task(self, rpc: Rpc, store: TaskApplication) -> None:
        sends = [_send_new(rpc, message=user_message(message_id="race")) for _ in range(6)]

        tasks = await asyncio.gather(*sends)

        assert {str(task["id"]) for task in tasks} == {str(task_id_for("race"))}
        assert len(list(store.history(task_id_for("race")))) == 1

    async def test_a_resend_naming_another_context_is_refused(self, rpc: Rpc, store: TaskApplication) -> None:
        await _send_new(rpc, message=user_message(message_id="ctx", contextId="a"))
        before = log_position(store)

        response = await rpc("SendMessage", {"message": user_message(message_id="ctx", contextId="b")})

        error_of(response, -32602, "INVALID_PARAMS")
        assert log_position(store) == before


class TestBlocking:
    async def test_waits_until_the_task_completes(self, rpc: Rpc, advance: Advance) -> None:
        async def worker() -> None:
            await advance.wait_exists(task_id_for("block"))
            await asyncio.sleep(0.05)
            await asyncio.to_thread(advance.start, task_id_for("block"))
            await asyncio.sleep(0.05)
            await asyncio.to_thread(advance.complete, task_id_for("block"), "echoed")

        response, _ = await asyncio.gather(
            rpc("SendMessage", {"message": user_message(message_id="block")}), worker()
        )

        task = response["result"]["task"]
        assert task["status"]["state"] == "TASK_STATE_COMPLETED"
        assert task["status"]["message"]["role"] == "ROLE_AGENT"
        assert task["status"]["message"]["taskId"] == task["id"]
        assert task["status"]["message"]["contextId"] == task["contextId"]
        assert task["status"]["message"]["messageId"]
        assert task["artifacts"] == [{"artifactId": "out", "name": "out", "parts": [{"text": "echoed"}]}]
        wire.WireTask.model_validate(task)

    async def test_returns_when_the_task_asks_for_input(self, rpc: Rpc, advance: Advance) -> None:
        async def worker() -> None:
            await advance.wait_exists(task_id_for("ask"))
            await asyncio.to_thread(advance.ask, task_id_for("ask"), "which systems?")

        response, _ = await asyncio.gather(
            rpc("SendMessage", {"message": user_message(message_id="ask")}), worker()
        )

        task = response["result"]["task"]
        assert task["status"]["state"] == "TASK_STATE_INPUT_REQUIRED"
        assert task["status"]["message"]["parts"] == [{"text": "which systems?"}]

    async def test_return_immediately_does_not_wait(self, rpc: Rpc) -> None:
        task = await asyncio.wait_for(_send_new(rpc), timeout=2)

        assert task["status"]["state"] == "TASK_STATE_SUBMITTED"

    async def test_answers_with_the_current_task_after_the_blocking_timeout(
        self, make_app: Callable[..., Litestar]
    ) -> None:
        async with http_client(make_app(blocking_timeout_s=0.2)) as http:
            body = {"jsonrpc": "2.0", "id": 1, "method": "SendMessage", "params": {"message": user_message()}}
            response = (await http.post("/a2a/jsonrpc", json=body)).json()

        assert response["result"]["task"]["status"]["state"] == "TASK_STATE_SUBMITTED"


class TestFollowUp:
    async def _paused(self, rpc: Rpc, advance: Advance, message_id: str = "first") -> JSON:
        task = await _send_new(rpc, message=user_message(message_id=message_id))
        await asyncio.to_thread(advance.ask, UUID(task["id"]))
        return task

    async def test_an_answer_resumes_the_paused_task(
        self, rpc: Rpc, advance: Advance, store: TaskApplication
    ) -> None:
        task = await self._paused(rpc, advance)
        answer = user_message("yes", taskId=task["id"])

        response = await rpc("SendMessage", {"message": answer, "configuration": IMMEDIATE})

        resumed = response["result"]["task"]
        assert resumed["id"] == task["id"]
        assert resumed["status"]["state"] == "TASK_STATE_WORKING"
        assert resumed["history"][-1] == {**answer, "contextId": task["contextId"]}
        assert store.get(UUID(task["id"])).latest_input["messageId"] == answer["messageId"]

    async def test_blocking_answer_waits_for_the_next_pause_or_the_end(
        self, rpc: Rpc, advance: Advance
    ) -> None:
        task = await self._paused(rpc, advance)
        task_id = UUID(task["id"])

        async def worker() -> None:
            await advance.wait_for(task_id, lambda stored: stored.pause is None)
            await asyncio.to_thread(advance.complete, task_id)

        response, _ = await asyncio.gather(
            rpc("SendMessage", {"message": user_message("go", taskId=task["id"])}), worker()
        )

        assert response["result"]["task"]["status"]["state"] == "TASK_STATE_COMPLETED"

    async def test_a_reused_message_id_with_new_content_is_a_new_answer(
        self, rpc: Rpc, advance: Advance, store: TaskApplication
    ) -> None:
        # The A2A TCK sends a task's first message and both its answers with one messageId.
        task = await self._paused(rpc, advance, message_id="reused")
        task_id = UUID(task["id"])

        for text in ["answer 1", "answer 2"]:
            answer = user_message(text, message_id="reused", taskId=task["id"])
            response = await rpc("SendMessage", {"message": answer, **_now()})
            assert response["result"]["task"]["status"]["state"] == "TASK_STATE_WORKING"
            await asyncio.to_thread(advance.ask, task_id)

        history = store.get(task_id).history
        assert [m["parts"][0]["text"] for m in history if m["role"] == "ROLE_USER"] == [
            "hello",
            "answer 1",
            "answer 2",
        ]
        assert _count(store, task_id, "InputReceived") == 2

    async def test_the_first_message_sent_again_with_its_task_id_is_an_answer(
        self, rpc: Rpc, advance: Advance, store: TaskApplication
    ) -> None:
        first = user_message("hello", message_id="first")
        task = await self._paused(rpc, advance, message_id="first")

        response = await rpc("SendMessage", {"message": {**first, "taskId": task["id"]}, **_now()})

        assert response["result"]["task"]["status"]["state"] == "TASK_STATE_WORKING"
        assert _count(store, UUID(task["id"]), "InputReceived") == 1

    async def _answered(self, rpc: Rpc, advance: Advance) -> tuple[JSON, JSON, JSON]:
        """A paused task answered once: the task as sent, the answer, and the answer's result."""
        task = await self._paused(rpc, advance)
        answer = user_message("yes", message_id="answer-1", taskId=task["id"])
        result = (await rpc("SendMessage", {"message": answer, **_now()}))["result"]["task"]
        return task, answer, result

    async def test_a_resent_answer_returns_the_task_and_appends_nothing(
        self, rpc: Rpc, advance: Advance, store: TaskApplication
    ) -> None:
        task, answer, first = await self._answered(rpc, advance)
        task_id = UUID(task["id"])
        before = log_position(store)

        again = await rpc("SendMessage", {"message": {**answer, "contextId": task["contextId"]}, **_now()})

        assert again["result"]["task"] == first
        assert log_position(store) == before
        assert _count(store, task_id, "InputReceived") == 1

    async def test_a_resent_answer_after_the_task_paused_again_or_ended_appends_nothing(
        self, rpc: Rpc, advance: Advance, store: TaskApplication
    ) -> None:
        task, answer, _ = await self._answered(rpc, advance)
        task_id = UUID(task["id"])
        await asyncio.to_thread(advance.ask, task_id, "and the second question?")

        paused = await rpc("SendMessage", {"message": answer, **_now()})

        assert paused["result"]["task"]["status"]["state"] == "TASK_STATE_INPUT_REQUIRED"
        assert _count(store, task_id, "InputReceived") == 1
        second = user_message("no", message_id="answer-2", taskId=task["id"])
        await rpc("SendMessage", {"message": second, **_now()})
        await asyncio.to_thread(advance.complete, task_id)
        before = log_position(store)
        for resent in [answer, second]:
            ended = await rpc("SendMessage", {"message": resent, **_now()})
            assert ended["result"]["task"]["status"]["state"] == "TASK_STATE_COMPLETED"
        assert log_position(store) == before
        assert _count(store, task_id, "InputReceived") == 2

    @pytest.mark.postgres  # the race is decided by PostgreSQL's primary key
    async def test_concurrent_resends_of_an_answer_append_it_once(
        self, rpc: Rpc, advance: Advance, store: TaskApplication
    ) -> None:
        task = await self._paused(rpc, advance)
        answer = user_message("yes", message_id="answer-race", taskId=task["id"])

        answers = await asyncio.gather(*[rpc("SendMessage", {"message": answer, **_now()}) for _ in range(6)])

        assert all("result" in response for response in answers), answers
        assert _count(store, UUID(task["id"]), "InputReceived") == 1

    async def test_an_unknown_task_is_task_not_found(self, rpc: Rpc, store: TaskApplication) -> None:
        for task_id in [str(task_id_for("never-sent")), "not-a-uuid", str(task_id_for("x")).upper()]:
            response = await rpc("SendMessage", {"message": user_message(taskId=task_id)})
            error_of(response, -32001, "TASK_NOT_FOUND")
        assert log_position(store) == 0

    async def test_another_tenants_task_is_task_not_found(
        self, rpc: Rpc, advance: Advance, store: TaskApplication
    ) -> None:
        task = await self._paused(rpc, advance)
        before = log_position(store)

        response = await rpc(
            "SendMessage", {"message": user_message(taskId=task["id"]), "tenant": "intruder"}
        )

        assert error_of(response, -32001, "TASK_NOT_FOUND")["message"] == f"task {task['id']!r} not found"
        assert log_position(store) == before

    async def test_a_mismatching_context_is_invalid_params(
        self, rpc: Rpc, advance: Advance, store: TaskApplication
    ) -> None:
        task = await self._paused(rpc, advance)
        before = log_position(store)

        response = await rpc(
            "SendMessage", {"message": user_message(taskId=task["id"], contextId="elsewhere")}
        )

        assert "does not match" in error_of(response, -32602, "INVALID_PARAMS")["message"]
        assert log_position(store) == before

    async def test_a_terminal_task_is_immutable(
        self, rpc: Rpc, advance: Advance, store: TaskApplication
    ) -> None:
        task = await _send_new(rpc)
        await asyncio.to_thread(advance.complete, UUID(task["id"]))
        before = log_position(store)

        response = await rpc("SendMessage", {"message": user_message(taskId=task["id"])})

        error = error_of(response, -32004, "UNSUPPORTED_OPERATION")
        assert error["message"].startswith("task is TASK_STATE_COMPLETED; terminal tasks are immutable")
        assert log_position(store) == before

    @pytest.mark.parametrize("started", [False, True])
    async def test_a_task_that_is_not_paused_refuses_input(
        self, rpc: Rpc, advance: Advance, store: TaskApplication, started: bool
    ) -> None:
        task = await _send_new(rpc)
        if started:
            await asyncio.to_thread(advance.start, UUID(task["id"]))
        before = log_position(store)

        response = await rpc("SendMessage", {"message": user_message(taskId=task["id"])})

        state = "TASK_STATE_WORKING" if started else "TASK_STATE_SUBMITTED"
        error = error_of(response, -32004, "UNSUPPORTED_OPERATION")
        assert error["message"].startswith(f"task is {state} and is not waiting for input")
        assert log_position(store) == before

    async def test_an_answer_after_the_deadline_is_refused_with_the_deadline(
        self, rpc: Rpc, advance: Advance, store: TaskApplication, clock: FakeClock
    ) -> None:
        task = await self._paused(rpc, advance)  # deadline: one day after the clock's now
        deadline = clock() + timedelta(days=1)
        clock.advance(timedelta(days=2))
        before = log_position(store)

        response = await rpc("SendMessage", {"message": user_message(taskId=task["id"])})

        error = error_of(response, -32004, "UNSUPPORTED_OPERATION")
        assert "deadline" in error["message"]
        assert deadline.strftime("%Y-%m-%dT%H:%M:%S") in error["message"]
        assert log_position(store) == before

    async def test_an_expired_task_is_not_found_and_says_so(
        self, rpc: Rpc, advance: Advance, store: TaskApplication
    ) -> None:
        task = await _send_new(rpc)
        await asyncio.to_thread(advance.expire, UUID(task["id"]))
        before = log_position(store)

        response = await rpc("SendMessage", {"message": user_message(taskId=task["id"])})

        assert "expired" in error_of(response, -32001, "TASK_NOT_FOUND")["message"]
        assert log_position(store) == before

    @pytest.mark.postgres
    async def test_a_conflicting_append_is_retried_after_reloading(
        self, rpc: Rpc, advance: Advance, store: TaskApplication, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        task = await self._paused(rpc, advance)
        task_id = UUID(task["id"])
        _race_once(store, monkeypatch, task_id)

        response = await rpc("SendMessage", {"message": user_message("yes", taskId=task["id"]), **_now()})

        assert response["result"]["task"]["status"]["state"] == "TASK_STATE_WORKING"
        assert store.get(task_id).push_configs  # the racing append survived


def _now() -> dict[str, object]:
    return {"configuration": IMMEDIATE}


def _race_once(store: TaskApplication, monkeypatch: pytest.MonkeyPatch, task_id: UUID) -> None:
    """Make the next save lose a race: another writer appends to the task just before it."""
    original = store.save_tasks
    raced = False

    def save_tasks(*tasks: object) -> list[int]:
        nonlocal raced
        if not raced:
            raced = True
            rival = store.get(task_id)
            rival.set_push_config(
                now=rival.modified_on, config={"id": "rival", "url": "https://example.com/hook"}
            )
            original(rival)
        return original(*tasks)  # type: ignore[arg-type]

    monkeypatch.setattr(store, "save_tasks", save_tasks)


def _count(store: TaskApplication, task_id: UUID, event: str) -> int:
    """How many events of type ``event`` the task's log holds."""
    return sum(type(e).__name__ == event for e in store.history(task_id))
