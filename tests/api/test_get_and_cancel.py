"""GetTask and CancelTask."""

from __future__ import annotations

import asyncio
from typing import Any
from uuid import UUID

import pytest

from api import wire
from store.log.application import TaskApplication
from tests.api.support import Advance, Rpc, error_of, log_position, task_id_for, user_message

JSON = dict[str, Any]


async def _new_task(rpc: Rpc, **message: Any) -> JSON:
    params = {"message": user_message(**message), "configuration": {"returnImmediately": True}}
    task: JSON = (await rpc("SendMessage", params))["result"]["task"]
    return task


class TestGetTask:
    async def test_returns_the_task_as_sendmessage_did(self, rpc: Rpc) -> None:
        sent = await _new_task(rpc)

        got = (await rpc("GetTask", {"id": sent["id"]}))["result"]

        assert got == sent
        wire.WireTask.model_validate(got)

    async def test_reflects_what_the_log_holds_now(self, rpc: Rpc, advance: Advance) -> None:
        sent = await _new_task(rpc)
        await asyncio.to_thread(advance.complete, UUID(sent["id"]), "result")

        got = (await rpc("GetTask", {"id": sent["id"]}))["result"]

        assert got["status"]["state"] == "TASK_STATE_COMPLETED"
        assert got["artifacts"][0]["parts"] == [{"text": "result"}]

    async def test_history_length(self, rpc: Rpc, advance: Advance) -> None:
        sent = await _new_task(rpc)
        await asyncio.to_thread(advance.ask, UUID(sent["id"]), "more?")

        one = (await rpc("GetTask", {"id": sent["id"], "historyLength": 1}))["result"]
        none = (await rpc("GetTask", {"id": sent["id"], "historyLength": 0}))["result"]
        everything = (await rpc("GetTask", {"id": sent["id"]}))["result"]

        assert [m["parts"][0]["text"] for m in one["history"]] == ["more?"]
        assert "history" not in none
        assert len(everything["history"]) == 2

    @pytest.mark.parametrize("task_id", [str(task_id_for("nobody")), "nope", ""])
    async def test_unknown_ids(self, rpc: Rpc, task_id: str) -> None:
        response = await rpc("GetTask", {"id": task_id})

        code, reason = (-32602, "INVALID_PARAMS") if task_id == "" else (-32001, "TASK_NOT_FOUND")
        error_of(response, code, reason)

    async def test_negative_history_length_is_invalid_params(self, rpc: Rpc) -> None:
        sent = await _new_task(rpc)

        response = await rpc("GetTask", {"id": sent["id"], "historyLength": -1})

        assert "historyLength" in error_of(response, -32602, "INVALID_PARAMS")["message"]

    async def test_an_expired_task_is_not_found_with_a_message_that_says_it_expired(
        self, rpc: Rpc, advance: Advance
    ) -> None:
        sent = await _new_task(rpc)
        await asyncio.to_thread(advance.expire, UUID(sent["id"]))

        response = await rpc("GetTask", {"id": sent["id"]})

        assert "expired" in error_of(response, -32001, "TASK_NOT_FOUND")["message"]

    async def test_another_tenant_cannot_learn_an_expired_task_existed(
        self, rpc: Rpc, advance: Advance
    ) -> None:
        sent = await _new_task(rpc)
        await asyncio.to_thread(advance.expire, UUID(sent["id"]))

        response = await rpc("GetTask", {"id": sent["id"], "tenant": "other"})

        assert "expired" not in error_of(response, -32001, "TASK_NOT_FOUND")["message"]


class TestCancelTask:
    @pytest.mark.parametrize("stage", ["submitted", "working", "input-required"])
    async def test_cancels_a_live_task(
        self, rpc: Rpc, advance: Advance, store: TaskApplication, stage: str
    ) -> None:
        sent = await _new_task(rpc)
        task_id = UUID(sent["id"])
        if stage == "working":
            await asyncio.to_thread(advance.start, task_id)
        elif stage == "input-required":
            await asyncio.to_thread(advance.ask, task_id)

        canceled = (await rpc("CancelTask", {"id": sent["id"]}))["result"]

        wire.WireTask.model_validate(canceled)
        assert canceled["status"]["state"] == "TASK_STATE_CANCELED"
        status_message = canceled["status"]["message"]
        assert status_message["role"] == "ROLE_AGENT"
        assert (status_message["taskId"], status_message["contextId"]) == (sent["id"], sent["contextId"])
        stored = store.get(task_id)
        assert stored.state == "TASK_STATE_CANCELED"
        assert stored.lease_owner is None
        assert (await rpc("GetTask", {"id": sent["id"]}))["result"] == canceled

    async def test_a_terminal_task_is_not_cancelable(
        self, rpc: Rpc, advance: Advance, store: TaskApplication
    ) -> None:
        sent = await _new_task(rpc)
        await asyncio.to_thread(advance.complete, UUID(sent["id"]))
        before = log_position(store)

        response = await rpc("CancelTask", {"id": sent["id"]})

        assert "TASK_STATE_COMPLETED" in error_of(response, -32002, "TASK_NOT_CANCELABLE")["message"]
        assert log_position(store) == before

    async def test_canceling_twice_is_not_cancelable(self, rpc: Rpc, store: TaskApplication) -> None:
        sent = await _new_task(rpc)
        await rpc("CancelTask", {"id": sent["id"]})
        before = log_position(store)

        response = await rpc("CancelTask", {"id": sent["id"]})

        error_of(response, -32002, "TASK_NOT_CANCELABLE")
        assert log_position(store) == before

    async def test_unknown_and_foreign_tasks_are_not_found(self, rpc: Rpc, store: TaskApplication) -> None:
        sent = await _new_task(rpc)
        before = log_position(store)

        error_of(await rpc("CancelTask", {"id": str(task_id_for("ghost"))}), -32001, "TASK_NOT_FOUND")
        error_of(await rpc("CancelTask", {"id": sent["id"], "tenant": "other"}), -32001, "TASK_NOT_FOUND")
        assert log_position(store) == before

    async def test_an_expired_task_is_not_found(
        self, rpc: Rpc, advance: Advance, store: TaskApplication
    ) -> None:
        sent = await _new_task(rpc)
        await asyncio.to_thread(advance.expire, UUID(sent["id"]))
        before = log_position(store)

        response = await rpc("CancelTask", {"id": sent["id"]})

        assert "expired" in error_of(response, -32001, "TASK_NOT_FOUND")["message"]
        assert log_position(store) == before

    async def test_a_conflicting_append_is_retried_after_reloading(
        self, rpc: Rpc, advance: Advance, store: TaskApplication, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        sent = await _new_task(rpc)
        task_id = UUID(sent["id"])
        original = store.save_tasks
        raced = False

        def save_tasks(*tasks: Any) -> list[int]:
            nonlocal raced
            if not raced:
                raced = True
                advance.start(task_id)  # a worker claims the task in between
            return original(*tasks)

        monkeypatch.setattr(store, "save_tasks", save_tasks)

        canceled = (await rpc("CancelTask", {"id": sent["id"]}))["result"]

        assert canceled["status"]["state"] == "TASK_STATE_CANCELED"
        assert [type(e).__name__ for e in store.history(task_id)] == ["Submitted", "LeaseGranted", "Canceled"]
