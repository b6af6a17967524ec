"""The audit reads over HTTP: a task's events with their actors, its state at a version, its effects.

Two tenants with API keys. acme's task is submitted, paused, answered and configured over
JSON-RPC with acme's key (so its events carry that key's id), and moved by a stand-in worker.
The reads answer what the log holds: the state at every version equals a fold of the first N
events written out here; another tenant's task is TaskNotFound exactly like a missing one; a
version the task does not have is InvalidParams naming ``version``; every refusal is a
``google.rpc.Status`` body, and none appends anything.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from datetime import timedelta
from typing import Any
from uuid import UUID, uuid4

import httpx
import pytest
import pytest_asyncio
from litestar import Litestar

from api.api_keys import KeyRing, digest_of, key_id_of, parse_pairs
from domain.task import Task
from store.log.application import TaskApplication
from store.public_form.task_state import task_state_json
from tests.api.support import A2A_HEADERS, Advance, FakeClock, http_client, log_position, user_message
from tests.support.audited_task import replayed

JSON = dict[str, Any]

ACME_KEY = "acme-key-0123456789abcdef"
GLOBEX_KEY = "globex-key-0123456789abcdef"
ACME_KEY_ID = key_id_of(digest_of(ACME_KEY))
HOOK = "http://127.0.0.1:9/hook"
AUDIT = "/audit/v1/tasks"


def bearer(key: str) -> JSON:
    return {**A2A_HEADERS, "Authorization": f"Bearer {key}"}


@pytest_asyncio.fixture
async def http(make_app: Callable[..., Litestar]) -> AsyncIterator[httpx.AsyncClient]:
    app = make_app(
        api_keys=KeyRing(parse_pairs(f"acme={ACME_KEY},globex={GLOBEX_KEY}")), allow_private_webhooks=True
    )
    async with http_client(app) as client:
        yield client


async def _rpc(http: httpx.AsyncClient, method: str, params: JSON, key: str = ACME_KEY) -> JSON:
    body = {"jsonrpc": "2.0", "id": 1, "method": method, "params": params}
    response = await http.post("/a2a/jsonrpc", json=body, headers=bearer(key))
    assert response.status_code == 200, response.text
    decoded: JSON = response.json()
    assert "result" in decoded, decoded
    return decoded


def _finish_with_an_effect(store: TaskApplication, clock: FakeClock, task_id: UUID) -> None:
    """A second worker resumes the answered task, records an effect and completes it."""
    task = store.get(task_id)
    now = clock()
    epoch = task.grant_lease(worker="w-2", now=now, until=now + timedelta(minutes=5))
    task.record_effect(epoch=epoch, now=now, key="revoke:alice", result={"revoked": True})
    task.complete(epoch=epoch, now=now, message={"role": "ROLE_AGENT", "parts": [{"text": "done"}]})
    store.save_tasks(task)


@pytest_asyncio.fixture
async def task_id(
    http: httpx.AsyncClient, advance: Advance, store: TaskApplication, clock: FakeClock
) -> UUID:
    """acme's task: submitted with a push config, paused, answered, config removed, completed."""
    configuration = {"returnImmediately": True, "taskPushNotificationConfig": {"url": HOOK, "id": "hook-1"}}
    sent = await _rpc(
        http, "SendMessage", {"message": user_message("review"), "configuration": configuration}
    )
    task_id = UUID(sent["result"]["task"]["id"])
    await asyncio.to_thread(advance.ask, task_id)
    clock.advance(timedelta(seconds=1))
    answer = user_message("approved", taskId=str(task_id))
    await _rpc(http, "SendMessage", {"message": answer, "configuration": {"returnImmediately": True}})
    await _rpc(http, "DeleteTaskPushNotificationConfig", {"taskId": str(task_id), "id": "hook-1"})
    clock.advance(timedelta(seconds=1))
    await asyncio.to_thread(_finish_with_an_effect, store, clock, task_id)
    return task_id


async def _get(
    http: httpx.AsyncClient, path: str, key: str | None = ACME_KEY, **params: str
) -> httpx.Response:
    headers = bearer(key) if key is not None else A2A_HEADERS
    return await http.get(path, params=params, headers=headers)


def _status(response: httpx.Response, http_status: int, reason: str) -> JSON:
    assert response.status_code == http_status, response.text
    error: JSON = response.json()["error"]
    assert error["code"] == http_status
    assert error["details"][0]["reason"] == reason
    return error


async def test_the_events_name_each_actor(http: httpx.AsyncClient, task_id: UUID) -> None:
    response = await _get(http, f"{AUDIT}/{task_id}/events")

    assert response.status_code == 200, response.text
    document = response.json()
    assert (document["taskId"], document["tenant"]) == (str(task_id), "acme")
    client = {
        "kind": "client",
        "tenant": "acme",
        "keyId": ACME_KEY_ID,
        "text": f"client acme (key {ACME_KEY_ID})",
    }
    worker_1 = {
        "kind": "worker",
        "workerId": "test-worker",
        "epoch": 1,
        "text": "worker test-worker (epoch 1)",
    }
    worker_2 = {"kind": "worker", "workerId": "w-2", "epoch": 2, "text": "worker w-2 (epoch 2)"}
    assert [(e["version"], e["type"], e["actor"]) for e in document["events"]] == [
        (1, "Submitted", client),
        (2, "PushConfigSet", client),
        (3, "LeaseGranted", worker_1),
        (4, "InputRequested", worker_1),
        (5, "InputReceived", client),
        (6, "PushConfigRemoved", client),
        (7, "LeaseGranted", worker_2),
        (8, "EffectRecorded", worker_2),
        (9, "Completed", worker_2),
    ]
    assert document["events"][0]["fields"]["key_id"] == ACME_KEY_ID
    assert document["events"][4]["summary"] == "answer received: approved"


async def test_the_state_at_every_version_equals_a_replay(
    http: httpx.AsyncClient, task_id: UUID, store: TaskApplication
) -> None:
    events = list(store.history(task_id))

    for version in range(1, len(events) + 1):
        response = await _get(http, f"{AUDIT}/{task_id}/state", version=str(version))
        assert response.status_code == 200, response.text
        assert response.json() == task_state_json(replayed(events, version)), version

    paused = (await _get(http, f"{AUDIT}/{task_id}/state", version="4")).json()
    assert paused["task"]["status"]["state"] == "TASK_STATE_INPUT_REQUIRED"
    assert paused["longhaul"]["pushConfigIds"] == ["hook-1"]
    assert paused["version"] == 4
    now = await _rpc(http, "GetTask", {"id": str(task_id)})
    assert (await _get(http, f"{AUDIT}/{task_id}/state", version="9")).json()["task"] == now["result"]


async def test_the_effects_with_their_results(
    http: httpx.AsyncClient, task_id: UUID, store: TaskApplication
) -> None:
    response = await _get(http, f"{AUDIT}/{task_id}/effects")

    assert response.status_code == 200, response.text
    (recorded,) = [e for e in store.history(task_id) if isinstance(e, Task.EffectRecorded)]
    assert response.json() == {
        "taskId": str(task_id),
        "effects": [
            {
                "key": "revoke:alice",
                "result": {"revoked": True},
                "time": recorded.timestamp.isoformat().replace("+00:00", "Z"),
                "version": 8,
            }
        ],
    }


@pytest.mark.parametrize("read", ["events", "state?version=1", "effects"])
async def test_another_tenants_task_is_not_found_like_a_missing_one(
    http: httpx.AsyncClient, task_id: UUID, store: TaskApplication, read: str
) -> None:
    before = log_position(store)
    missing = uuid4()

    foreign = await http.get(f"{AUDIT}/{task_id}/{read}", headers=bearer(GLOBEX_KEY))
    unknown = await http.get(f"{AUDIT}/{missing}/{read}", headers=bearer(GLOBEX_KEY))

    foreign_error, unknown_error = (
        _status(foreign, 404, "TASK_NOT_FOUND"),
        _status(unknown, 404, "TASK_NOT_FOUND"),
    )
    assert foreign_error == {
        **unknown_error,
        "message": unknown_error["message"].replace(str(missing), str(task_id)),
    }
    named = await http.get(f"{AUDIT}/{task_id}/{read}", params={"tenant": "acme"}, headers=bearer(GLOBEX_KEY))
    _status(named, 400, "INVALID_PARAMS")  # naming another tenant than the key's is refused
    assert log_position(store) == before


@pytest.mark.parametrize("read", ["events", "state?version=1", "effects"])
async def test_a_caller_without_a_known_key_is_refused(
    http: httpx.AsyncClient, task_id: UUID, read: str
) -> None:
    no_key = await http.get(f"{AUDIT}/{task_id}/{read}", headers=A2A_HEADERS)
    bad_key = await http.get(f"{AUDIT}/{task_id}/{read}", headers=bearer("not-a-key-of-anyone"))

    for response in (no_key, bad_key):
        _status(response, 401, "UNAUTHENTICATED")


@pytest.mark.parametrize(
    ("version", "says"),
    [
        ("0", "there is no version 0"),
        ("10", "versions 1 to 9; there is no version 10"),
        ("-3", "there is no version -3"),
        ("abc", "'abc' is not a version"),
        ("1.5", "'1.5' is not a version"),
        ("", "'' is not a version"),
    ],
)
async def test_a_version_the_task_does_not_have_is_invalid_params(
    http: httpx.AsyncClient, task_id: UUID, store: TaskApplication, version: str, says: str
) -> None:
    before = log_position(store)

    response = await _get(http, f"{AUDIT}/{task_id}/state", version=version)

    error = _status(response, 400, "INVALID_PARAMS")
    assert says in error["message"]
    assert error["details"][1]["fieldViolations"][0]["field"] == "version"
    assert log_position(store) == before


async def test_a_state_read_without_a_version_is_invalid_params(
    http: httpx.AsyncClient, task_id: UUID
) -> None:
    error = _status(await _get(http, f"{AUDIT}/{task_id}/state"), 400, "INVALID_PARAMS")

    assert "version" in error["message"]


async def test_an_open_gateway_reads_as_the_named_tenant(
    make_app: Callable[..., Litestar], store: TaskApplication, advance: Advance
) -> None:
    async with http_client(make_app()) as open_http:
        body = {
            "jsonrpc": "2.0",
            "id": 1,
            "method": "SendMessage",
            "params": {
                "message": user_message("hi"),
                "tenant": "team-a",
                "configuration": {"returnImmediately": True},
            },
        }
        task = (await open_http.post("/a2a/jsonrpc", json=body)).json()["result"]["task"]

        named = await open_http.get(f"{AUDIT}/{task['id']}/events", params={"tenant": "team-a"})
        default = await open_http.get(f"{AUDIT}/{task['id']}/events")

    assert named.status_code == 200, named.text
    (submitted,) = named.json()["events"]
    assert submitted["actor"] == {"kind": "client", "tenant": "team-a", "text": "client team-a (no key)"}
    _status(default, 404, "TASK_NOT_FOUND")


async def test_the_http_json_binding_records_the_callers_key_id_too(
    http: httpx.AsyncClient, store: TaskApplication
) -> None:
    sent = await http.post(
        "/a2a/rest/message:send",
        json={"message": user_message("over rest"), "configuration": {"returnImmediately": True}},
        headers=bearer(ACME_KEY),
    )
    assert sent.status_code == 200, sent.text
    task_id = sent.json()["task"]["id"]
    canceled = await http.post(f"/a2a/rest/tasks/{task_id}:cancel", headers=bearer(ACME_KEY))
    assert canceled.status_code == 200, canceled.text

    events = (await _get(http, f"{AUDIT}/{task_id}/events")).json()["events"]

    assert [(e["type"], e["actor"].get("keyId")) for e in events] == [
        ("Submitted", ACME_KEY_ID),
        ("Canceled", ACME_KEY_ID),
    ]
    assert events[1]["fields"]["by"] == "client"
    assert events[1]["actor"]["kind"] == "client"
