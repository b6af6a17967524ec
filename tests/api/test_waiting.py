"""Waiting for a task to change: the polling waiter and a waiter passed to the app."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from uuid import UUID

from litestar import Litestar

from api.waiting import STATE_EVENTS, PollingWaiter
from domain.states import INTERRUPTED, TERMINAL
from domain.task import Task
from store.log.application import TaskApplication
from tests.api.support import Advance, Rpc, http_client, task_id_for, user_message


async def _submitted(rpc: Rpc, message_id: str) -> UUID:
    params = {"message": user_message(message_id=message_id), "configuration": {"returnImmediately": True}}
    await rpc("SendMessage", params)
    return task_id_for(message_id)


async def test_returns_at_the_timeout_when_nothing_changes(rpc: Rpc, store: TaskApplication) -> None:
    task_id = await _submitted(rpc, "idle")
    started = time.monotonic()

    await PollingWaiter(store).wait_for_change(store.get(task_id), timeout=0.3)

    assert 0.3 <= time.monotonic() - started < 1.0


async def test_returns_at_once_when_a_newer_version_exists(rpc: Rpc, store: TaskApplication) -> None:
    task_id = await _submitted(rpc, "old")
    started = time.monotonic()

    seen = store.get(task_id)
    seen.version = 0  # as a caller that read the task before its first event would hold it
    await PollingWaiter(store).wait_for_change(seen, timeout=5)

    assert time.monotonic() - started < 0.5


async def test_returns_soon_after_a_commit(rpc: Rpc, store: TaskApplication, advance: Advance) -> None:
    task_id = await _submitted(rpc, "moving")

    async def commit_later() -> float:
        await asyncio.sleep(0.3)
        await asyncio.to_thread(advance.start, task_id)
        return time.monotonic()

    waited = asyncio.create_task(PollingWaiter(store).wait_for_change(store.get(task_id), timeout=10))
    committed_at = await commit_later()
    await waited

    assert time.monotonic() - committed_at < 0.5  # the backoff is capped at 200 ms


class RecordingWaiter:
    """A waiter that records its calls and waits a little."""

    def __init__(self) -> None:
        self.calls: list[tuple[UUID, int]] = []

    async def wait_for_change(self, task: Task, timeout: float) -> None:  # noqa: ASYNC109
        self.calls.append((task.id, task.version))
        await asyncio.sleep(min(timeout, 0.05))


async def test_the_app_waits_with_the_waiter_it_was_given(make_app: Callable[..., Litestar]) -> None:
    waiter = RecordingWaiter()
    async with http_client(make_app(waiter=waiter, blocking_timeout_s=0.3)) as http:
        body = {
            "jsonrpc": "2.0",
            "id": 1,
            "method": "SendMessage",
            "params": {"message": user_message(message_id="w")},
        }
        await http.post("/a2a/jsonrpc", json=body)

    assert waiter.calls
    assert set(waiter.calls) == {(task_id_for("w"), 1)}


def test_the_feed_waiter_wakes_on_the_events_that_set_the_state_and_no_others() -> None:
    assert {
        "Submitted",
        "LeaseGranted",
        "InputReceived",
        "InputRequested",
        "AuthRequested",
        "Completed",
        "Failed",
        "Canceled",
        "Rejected",
    } == STATE_EVENTS
    # Every event that settles the task is among them (the waiter cannot miss an answer).
    settling = {name for name, state in Task.states_entered().items() if state in TERMINAL | INTERRUPTED}
    assert settling <= STATE_EVENTS
    assert len(settling) == 6
