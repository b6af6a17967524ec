"""The HTTP+JSON binding: every route reaches the method JSON-RPC reaches, with the same answer."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import httpx
import pytest
from litestar import Litestar

from longhaul.serving import listen, serve
from store.log.application import TaskApplication
from store.log.config import StoreConfig
from tests.api.support import Advance, Rpc, http_client, log_position, task_id_for, user_message
from tests.support.projector import projector_running

JSON = dict[str, Any]
REST = "/a2a/rest"


def status_of(response: httpx.Response, http_status: int, reason: str) -> JSON:
    """Assert ``response`` is a ``google.rpc.Status`` body with ``http_status`` and ErrorInfo ``reason``."""
    assert response.status_code == http_status, response.text
    body: JSON = response.json()
    assert set(body) == {"error"}, body
    error: JSON = body["error"]
    assert set(error) == {"code", "status", "message", "details"}, error
    assert error["code"] == http_status
    assert error["message"]
    assert error["details"][0] == {
        "@type": "type.googleapis.com/google.rpc.ErrorInfo",
        "reason": reason,
        "domain": "a2a-protocol.org",
        "metadata": {},
    }
    return error


async def send(client: httpx.AsyncClient, prefix: str = REST, **configuration: Any) -> JSON:
    body = {"message": user_message(), "configuration": {"returnImmediately": True, **configuration}}
    response = await client.post(f"{prefix}/message:send", json=body)
    assert response.status_code == 200, response.text
    task: JSON = response.json()["task"]
    return task


class TestTasks:
    async def test_send_get_and_cancel_answer_what_jsonrpc_answers(
        self, client: httpx.AsyncClient, rpc: Rpc
    ) -> None:
        task = await send(client)
        assert task["status"]["state"] == "TASK_STATE_SUBMITTED"

        got = await client.get(f"{REST}/tasks/{task['id']}")
        assert got.status_code == 200
        assert got.headers["content-type"] == "application/json"
        assert got.json() == (await rpc("GetTask", {"id": task["id"]}))["result"]

        canceled = await client.post(f"{REST}/tasks/{task['id']}:cancel")
        assert canceled.status_code == 200
        assert canceled.json()["status"]["state"] == "TASK_STATE_CANCELED"
        assert canceled.json() == (await rpc("GetTask", {"id": task["id"]}))["result"]

    async def test_a_blocking_send_answers_when_the_task_settles(
        self, client: httpx.AsyncClient, advance: Advance
    ) -> None:
        message = user_message()
        answer = asyncio.ensure_future(client.post(f"{REST}/message:send", json={"message": message}))
        task_id = task_id_for(message["messageId"])
        await advance.wait_exists(task_id)
        advance.complete(task_id, "fine")

        response = await answer

        assert response.status_code == 200
        assert response.json()["task"]["status"]["state"] == "TASK_STATE_COMPLETED"

    async def test_history_length_comes_from_the_query(self, client: httpx.AsyncClient) -> None:
        task = await send(client)

        full = (await client.get(f"{REST}/tasks/{task['id']}")).json()
        none = (await client.get(f"{REST}/tasks/{task['id']}", params={"historyLength": "0"})).json()

        assert len(full["history"]) == 1
        assert "history" not in none

    async def test_cancel_takes_an_empty_body_or_a_json_one(self, client: httpx.AsyncClient) -> None:
        first, second = await send(client), await send(client)

        empty = await client.post(f"{REST}/tasks/{first['id']}:cancel", content=b"")
        with_metadata = await client.post(
            f"{REST}/tasks/{second['id']}:cancel", json={"metadata": {"why": "x"}}
        )

        assert empty.status_code == with_metadata.status_code == 200

    async def test_a_terminal_task_is_not_cancelable(self, client: httpx.AsyncClient) -> None:
        task = await send(client)
        await client.post(f"{REST}/tasks/{task['id']}:cancel")

        status_of(await client.post(f"{REST}/tasks/{task['id']}:cancel"), 400, "TASK_NOT_CANCELABLE")

    @pytest.mark.parametrize("task_id", ["5a76c3b8-d2cc-5d9c-8ec0-fe5e8893c99a", "nope"])
    async def test_an_unknown_task_is_404(self, client: httpx.AsyncClient, task_id: str) -> None:
        error = status_of(await client.get(f"{REST}/tasks/{task_id}"), 404, "TASK_NOT_FOUND")

        assert error["status"] == "NOT_FOUND"


class TestTenants:
    async def test_the_path_names_the_tenant(self, client: httpx.AsyncClient) -> None:
        task = await send(client, f"{REST}/acme")

        assert (await client.get(f"{REST}/acme/tasks/{task['id']}")).status_code == 200
        status_of(await client.get(f"{REST}/tasks/{task['id']}"), 404, "TASK_NOT_FOUND")
        status_of(await client.get(f"{REST}/globex/tasks/{task['id']}"), 404, "TASK_NOT_FOUND")

    async def test_the_path_tenant_wins_over_the_body_tenant(self, client: httpx.AsyncClient) -> None:
        body = {"message": user_message(), "tenant": "globex", "configuration": {"returnImmediately": True}}
        task = (await client.post(f"{REST}/acme/message:send", json=body)).json()["task"]

        assert (await client.get(f"{REST}/acme/tasks/{task['id']}")).status_code == 200
        status_of(await client.get(f"{REST}/globex/tasks/{task['id']}"), 404, "TASK_NOT_FOUND")

    async def test_without_a_path_tenant_the_body_names_it(self, client: httpx.AsyncClient) -> None:
        body = {"message": user_message(), "tenant": "acme", "configuration": {"returnImmediately": True}}
        task = (await client.post(f"{REST}/message:send", json=body)).json()["task"]

        assert (await client.get(f"{REST}/acme/tasks/{task['id']}")).status_code == 200


class TestVerbRoutes:
    """``GET /tasks/{id}:subscribe`` must not be read as GetTask of the id ``{id}:subscribe``."""

    @pytest.mark.parametrize("method", ["GET", "POST"])
    async def test_subscribe_is_its_own_route(self, client: httpx.AsyncClient, method: str) -> None:
        task = await send(client)

        response = await client.request(method, f"{REST}/tasks/{task['id']}:subscribe")

        assert "SubscribeToTask" in status_of(response, 400, "UNSUPPORTED_OPERATION")["message"]

    async def test_streaming_send_is_its_own_route(
        self, client: httpx.AsyncClient, store: TaskApplication
    ) -> None:
        before = log_position(store)

        response = await client.post(f"{REST}/message:stream", json={"message": user_message()})

        assert "SendStreamingMessage" in status_of(response, 400, "UNSUPPORTED_OPERATION")["message"]
        assert log_position(store) == before

    @pytest.mark.parametrize(
        ("method", "path"), [("POST", "/tasks/x:explode"), ("GET", "/nowhere"), ("POST", "/message:shout")]
    )
    async def test_an_unknown_route_is_404_method_not_found(
        self, client: httpx.AsyncClient, method: str, path: str
    ) -> None:
        error = status_of(await client.request(method, REST + path), 404, "METHOD_NOT_FOUND")

        assert path in error["message"]

    async def test_a_route_with_the_wrong_method_is_405(self, client: httpx.AsyncClient) -> None:
        error = status_of(await client.put(f"{REST}/message:send", json={}), 405, "METHOD_NOT_FOUND")

        assert "POST" in error["message"]

    async def test_other_paths_keep_litestar_answers(self, client: httpx.AsyncClient) -> None:
        response = await client.get("/nowhere:cancel")

        assert response.status_code == 404
        assert "error" not in response.json()


class TestPushConfigs:
    async def test_create_get_list_and_delete(self, make_app: Callable[..., Litestar]) -> None:
        async with http_client(make_app(allow_private_webhooks=True)) as client:
            task = await send(client)
            configs = f"{REST}/tasks/{task['id']}/pushNotificationConfigs"
            body = {"id": "hook", "url": "http://127.0.0.1:9/hook", "token": "secret"}

            created = await client.post(configs, json=body)
            assert created.status_code == 200, created.text
            expected = {"id": "hook", "taskId": task["id"], "url": "http://127.0.0.1:9/hook"}
            assert created.json() == expected
            assert (await client.get(f"{configs}/hook")).json() == expected
            assert (await client.get(configs, params={"pageSize": "10"})).json() == {
                "configs": [expected],
                "nextPageToken": "",
            }

            deleted = await client.delete(f"{configs}/hook")
            assert (deleted.status_code, deleted.json()) == (200, {})
            assert (await client.delete(f"{configs}/hook")).json() == {}  # idempotent
            status_of(await client.get(f"{configs}/hook"), 404, "TASK_NOT_FOUND")

    async def test_the_path_names_the_task(self, make_app: Callable[..., Litestar]) -> None:
        async with http_client(make_app(allow_private_webhooks=True)) as client:
            task = await send(client)
            body = {"taskId": "another", "url": "http://127.0.0.1:9/hook"}

            created = await client.post(f"{REST}/tasks/{task['id']}/pushNotificationConfigs", json=body)

            assert created.json()["taskId"] == task["id"]


class TestCardAndMediaTypes:
    async def test_the_extended_card_is_unsupported(self, client: httpx.AsyncClient) -> None:
        status_of(await client.get(f"{REST}/extendedAgentCard"), 400, "UNSUPPORTED_OPERATION")
        status_of(await client.get(f"{REST}/acme/extendedAgentCard"), 400, "UNSUPPORTED_OPERATION")

    async def test_answers_use_the_configured_media_type(self, make_app: Callable[..., Litestar]) -> None:
        async with http_client(make_app(rest_media_type="application/a2a+json")) as client:
            task = await send(client)
            got = await client.get(f"{REST}/tasks/{task['id']}")
            missing = await client.get(f"{REST}/tasks/{task['id'][::-1]}")

        assert got.headers["content-type"] == "application/a2a+json"
        assert missing.headers["content-type"] == "application/a2a+json"

    @pytest.mark.parametrize("content_type", ["application/json", "application/a2a+json; charset=utf-8"])
    async def test_both_json_request_types_are_read(
        self, client: httpx.AsyncClient, content_type: str
    ) -> None:
        body = b'{"message": {"messageId": "m", "role": "ROLE_USER", "parts": [{"text": "hi"}]},'
        body += b' "configuration": {"returnImmediately": true}}'

        response = await client.post(
            f"{REST}/message:send", content=body, headers={"Content-Type": content_type}
        )

        assert response.status_code == 200, response.text

    async def test_a2a_version_is_checked_as_on_jsonrpc(self, client: httpx.AsyncClient) -> None:
        task = await send(client)
        url = f"{REST}/tasks/{task['id']}"

        status_of(await client.get(url, headers={"A2A-Version": "99.0"}), 400, "VERSION_NOT_SUPPORTED")
        status_of(
            await client.get(url, params={"A2A-Version": "0.3"}, headers={"A2A-Version": ""}),
            400,
            "VERSION_NOT_SUPPORTED",
        )
        assert (await client.get(url, headers={"A2A-Version": "1.0.3"})).status_code == 200


@pytest.mark.postgres
async def test_list_tasks_reads_its_filters_from_the_query(
    client: httpx.AsyncClient, rpc: Rpc, store: TaskApplication, store_config: StoreConfig
) -> None:
    tasks = [await send(client) for _ in range(3)]
    await client.post(f"{REST}/tasks/{tasks[0]['id']}:cancel")
    with projector_running(store_config) as runner:
        await asyncio.to_thread(runner.wait, log_position(store), 20.0)

    query = {
        "status": "TASK_STATE_SUBMITTED",
        "pageSize": "1",
        "historyLength": "0",
        "includeArtifacts": "true",
    }
    first = (await client.get(f"{REST}/tasks", params=query)).json()
    second = (await client.get(f"{REST}/tasks", params={**query, "pageToken": first["nextPageToken"]})).json()

    rpc_params: JSON = {
        "status": "TASK_STATE_SUBMITTED",
        "pageSize": 1,
        "historyLength": 0,
        "includeArtifacts": True,
    }
    assert first == (await rpc("ListTasks", rpc_params))["result"]
    assert first["totalSize"] == 2
    assert {first["tasks"][0]["id"], second["tasks"][0]["id"]} == {tasks[1]["id"], tasks[2]["id"]}
    assert second["nextPageToken"] == ""
    status_of(await client.get(f"{REST}/tasks", params={"includeArtifacts": "yes"}), 400, "INVALID_PARAMS")


async def test_served_by_uvicorn_the_card_leads_to_the_binding(make_app: Callable[..., Litestar]) -> None:
    """Over a real socket: the card's HTTP+JSON URL takes a send, and ``:subscribe`` is its own route."""
    sock = listen("127.0.0.1", 0)
    base = f"http://127.0.0.1:{sock.getsockname()[1]}"
    stop = asyncio.Event()
    serving = asyncio.ensure_future(serve(make_app(public_url=base), sock, stop))
    try:
        async with httpx.AsyncClient(headers={"A2A-Version": "1.0"}) as client:
            card = await _card(client, base)
            interfaces = {i["protocolBinding"]: i["url"] for i in card["supportedInterfaces"]}
            url = interfaces["HTTP+JSON"]
            body = {"message": user_message(), "configuration": {"returnImmediately": True}}

            sent = await client.post(f"{url}/message:send", json=body)
            task = sent.json()["task"]
            got = await client.get(f"{url}/tasks/{task['id']}")
            subscribed = await client.get(f"{url}/tasks/{task['id']}:subscribe")
    finally:
        stop.set()
        await serving

    assert (sent.status_code, got.status_code) == (200, 200)
    assert got.json()["id"] == task["id"]
    status_of(subscribed, 400, "UNSUPPORTED_OPERATION")


async def _card(client: httpx.AsyncClient, base: str) -> JSON:
    async with asyncio.timeout(10):
        while True:
            try:
                card: JSON = (await client.get(f"{base}/.well-known/agent-card.json")).json()
                return card
            except httpx.ConnectError:
                await asyncio.sleep(0.02)
