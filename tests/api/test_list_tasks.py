"""ListTasks, served from the current-task view that the projector keeps.

Every test runs on PostgreSQL with a real projector (``tests.support.projector``)
following this test's schema; the tasks are made through the gateway and moved by ``Advance``.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Iterator
from datetime import timedelta
from typing import Any
from uuid import UUID

import pytest

from api import wire
from store.log.application import TaskApplication
from store.log.config import StoreConfig
from tests.api.support import Advance, FakeClock, Rpc, error_of, log_position, user_message
from tests.support.projector import projector_running

JSON = dict[str, Any]
WAIT_S = 20.0

pytestmark = pytest.mark.postgres

CaughtUp = Callable[[], Awaitable[None]]


@pytest.fixture
def caught_up(store_config: StoreConfig, store: TaskApplication) -> Iterator[CaughtUp]:
    """A running projector; awaiting the fixture's value waits until it applied the whole log."""
    with projector_running(store_config) as runner:

        async def wait() -> None:
            await asyncio.to_thread(runner.wait, log_position(store), WAIT_S)

        yield wait


async def new_task(rpc: Rpc, clock: FakeClock, *, tenant: str | None = None, **message: Any) -> JSON:
    clock.advance(timedelta(seconds=1))
    params: JSON = {"message": user_message(**message), "configuration": {"returnImmediately": True}}
    if tenant is not None:
        params["tenant"] = tenant
    task: JSON = (await rpc("SendMessage", params))["result"]["task"]
    return task


async def list_all(rpc: Rpc, params: JSON) -> tuple[list[JSON], list[JSON]]:
    """Every page of ListTasks with ``params``: the tasks in order, and the raw pages."""
    tasks: list[JSON] = []
    pages: list[JSON] = []
    token = ""
    while True:
        response = await rpc("ListTasks", {**params, "pageToken": token})
        page: JSON = response["result"]
        pages.append(page)
        tasks += page["tasks"]
        token = page["nextPageToken"]
        if token == "":
            return tasks, pages
        assert len(pages) < 50, "pagination does not end"


async def test_pages_newest_status_first_across_pages(
    rpc: Rpc, clock: FakeClock, advance: Advance, caught_up: CaughtUp
) -> None:
    made = [await new_task(rpc, clock) for _ in range(7)]
    clock.advance(timedelta(seconds=1))
    await asyncio.to_thread(advance.complete, UUID(made[2]["id"]))  # now the newest status
    await caught_up()

    tasks, pages = await list_all(rpc, {"pageSize": 3})

    expected = [made[2]["id"]] + [t["id"] for t in reversed(made) if t["id"] != made[2]["id"]]
    assert [t["id"] for t in tasks] == expected
    assert [len(p["tasks"]) for p in pages] == [3, 3, 1]
    assert all(p["totalSize"] == 7 and p["pageSize"] == 3 for p in pages)
    assert [p["nextPageToken"] == "" for p in pages] == [False, False, True]
    for page in pages:
        assert set(page) == {"tasks", "nextPageToken", "pageSize", "totalSize"}
    for task in tasks:
        wire.WireTask.model_validate(task)
    stamps = [t["status"]["timestamp"] for t in tasks]
    assert stamps == sorted(stamps, reverse=True)


async def test_equal_status_times_are_ordered_by_id_and_no_task_is_lost(
    rpc: Rpc, clock: FakeClock, caught_up: CaughtUp
) -> None:
    params = {"message": user_message(), "configuration": {"returnImmediately": True}}
    ids = []
    for _ in range(5):  # the clock does not move: one status timestamp for all
        params["message"] = user_message()
        ids.append((await rpc("SendMessage", params))["result"]["task"]["id"])
    await caught_up()

    tasks, _ = await list_all(rpc, {"pageSize": 2})

    assert [t["id"] for t in tasks] == sorted(ids, key=UUID, reverse=True)


async def test_default_page_size_is_50(rpc: Rpc, clock: FakeClock, caught_up: CaughtUp) -> None:
    await new_task(rpc, clock)
    await caught_up()

    page = (await rpc("ListTasks", {}))["result"]

    assert (page["pageSize"], page["totalSize"], page["nextPageToken"]) == (50, 1, "")


async def test_the_tenant_wall(rpc: Rpc, clock: FakeClock, caught_up: CaughtUp) -> None:
    mine = [await new_task(rpc, clock, tenant="acme") for _ in range(2)]
    theirs = [await new_task(rpc, clock, tenant="globex") for _ in range(3)]
    default = await new_task(rpc, clock)
    await caught_up()

    acme, _ = await list_all(rpc, {"tenant": "acme", "pageSize": 1})
    globex, _ = await list_all(rpc, {"tenant": "globex"})
    unnamed, _ = await list_all(rpc, {})
    nobody = (await rpc("ListTasks", {"tenant": "initech"}))["result"]

    assert {t["id"] for t in acme} == {t["id"] for t in mine}
    assert {t["id"] for t in globex} == {t["id"] for t in theirs}
    assert [t["id"] for t in unnamed] == [default["id"]]
    assert nobody == {"tasks": [], "nextPageToken": "", "pageSize": 50, "totalSize": 0}


async def test_a_page_token_of_another_tenant_shows_nothing_of_theirs(
    rpc: Rpc, clock: FakeClock, caught_up: CaughtUp
) -> None:
    for _ in range(3):
        await new_task(rpc, clock, tenant="globex")
    mine = await new_task(rpc, clock, tenant="acme")
    await caught_up()
    token = (await rpc("ListTasks", {"tenant": "globex", "pageSize": 1}))["result"]["nextPageToken"]

    page = (await rpc("ListTasks", {"tenant": "acme", "pageToken": token}))["result"]

    assert all(t["id"] == mine["id"] for t in page["tasks"])
    assert page["totalSize"] == 1


async def test_filters_context_status_and_status_time(
    rpc: Rpc, clock: FakeClock, advance: Advance, caught_up: CaughtUp
) -> None:
    a1 = await new_task(rpc, clock, contextId="ctx-a")
    a2 = await new_task(rpc, clock, contextId="ctx-a")
    b1 = await new_task(rpc, clock, contextId="ctx-b")
    clock.advance(timedelta(minutes=1))
    since = clock.now
    await asyncio.to_thread(advance.start, UUID(a1["id"]))
    clock.advance(timedelta(seconds=1))
    await asyncio.to_thread(advance.ask, UUID(b1["id"]))
    await caught_up()

    async def ids(**params: Any) -> list[str]:
        tasks, pages = await list_all(rpc, params)
        assert all(p["totalSize"] == len(tasks) for p in pages)
        return [t["id"] for t in tasks]

    assert await ids(contextId="ctx-a") == [a1["id"], a2["id"]]
    assert await ids(status="TASK_STATE_WORKING") == [a1["id"]]
    assert await ids(status="TASK_STATE_INPUT_REQUIRED") == [b1["id"]]
    assert await ids(status="TASK_STATE_UNSPECIFIED") == [b1["id"], a1["id"], a2["id"]]
    assert await ids(contextId="ctx-a", status="TASK_STATE_SUBMITTED") == [a2["id"]]
    stamp = since.isoformat().replace("+00:00", "Z")
    assert await ids(statusTimestampAfter=stamp) == [b1["id"], a1["id"]]
    assert await ids(statusTimestampAfter=stamp, contextId="ctx-b") == [b1["id"]]
    assert await ids(contextId="ctx-none") == []


async def test_artifacts_only_when_asked_and_history_length(
    rpc: Rpc, clock: FakeClock, advance: Advance, caught_up: CaughtUp
) -> None:
    task = await new_task(rpc, clock)
    await asyncio.to_thread(advance.ask, UUID(task["id"]), "more?")
    answer = {"message": user_message("yes", taskId=task["id"]), "configuration": {"returnImmediately": True}}
    await rpc("SendMessage", answer)
    await asyncio.to_thread(advance.complete, UUID(task["id"]), "result")
    await caught_up()
    got = (await rpc("GetTask", {"id": task["id"]}))["result"]

    plain = (await rpc("ListTasks", {}))["result"]["tasks"][0]
    full = (await rpc("ListTasks", {"includeArtifacts": True}))["result"]["tasks"][0]
    short = (await rpc("ListTasks", {"historyLength": 1}))["result"]["tasks"][0]
    none = (await rpc("ListTasks", {"historyLength": 0, "includeArtifacts": False}))["result"]["tasks"][0]

    assert "artifacts" not in plain
    assert full == got  # with artifacts, a listed task is what GetTask answers
    assert {k: v for k, v in got.items() if k != "artifacts"} == plain
    assert [m["parts"][0]["text"] for m in short["history"]] == ["yes"]
    assert len(plain["history"]) == 3
    assert "history" not in none
    assert "artifacts" not in none


async def test_expired_tasks_are_not_listed(
    rpc: Rpc, clock: FakeClock, advance: Advance, caught_up: CaughtUp
) -> None:
    kept = await new_task(rpc, clock)
    gone = await new_task(rpc, clock)
    await asyncio.to_thread(advance.expire, UUID(gone["id"]))
    await caught_up()

    page = (await rpc("ListTasks", {}))["result"]

    assert [t["id"] for t in page["tasks"]] == [kept["id"]]
    assert page["totalSize"] == 1


@pytest.mark.parametrize(
    ("params", "field"),
    [
        ({"pageSize": 0}, "pageSize"),
        ({"pageSize": 101}, "pageSize"),
        ({"pageSize": "ten"}, "pageSize"),
        ({"pageSize": 10.5}, "pageSize"),
        ({"pageSize": True}, "pageSize"),
        ({"historyLength": -1}, "historyLength"),
        ({"status": "TASK_STATE_DONE"}, "status"),
        ({"status": "working"}, "status"),
        ({"statusTimestampAfter": "yesterday"}, "statusTimestampAfter"),
        ({"statusTimestampAfter": "2026-03-01T09:30:00"}, "statusTimestampAfter"),
        ({"statusTimestampAfter": 1767225600}, "statusTimestampAfter"),
        ({"includeArtifacts": "yes"}, "includeArtifacts"),
        ({"pageToken": "not-a-token"}, "pageToken"),
        ({"contextId": 7}, "contextId"),
    ],
)
async def test_bad_params_are_invalid_params_and_append_nothing(
    rpc: Rpc, store: TaskApplication, clock: FakeClock, caught_up: CaughtUp, params: JSON, field: str
) -> None:
    await new_task(rpc, clock)
    before = log_position(store)

    error = error_of(await rpc("ListTasks", params), -32602, "INVALID_PARAMS")

    violations = error["data"][1]["fieldViolations"]
    assert [v["field"] for v in violations] == [field], violations
    assert log_position(store) == before


async def test_a_task_the_view_has_not_seen_yet_is_listed_once_it_has(
    rpc: Rpc, clock: FakeClock, store_config: StoreConfig, store: TaskApplication
) -> None:
    task = await new_task(rpc, clock)
    before = (await rpc("ListTasks", {}))["result"]
    assert before == {"tasks": [], "nextPageToken": "", "pageSize": 50, "totalSize": 0}

    with projector_running(store_config) as runner:
        await asyncio.to_thread(runner.wait, log_position(store), WAIT_S)

    after = (await rpc("ListTasks", {}))["result"]
    assert [t["id"] for t in after["tasks"]] == [task["id"]]
