"""Push notification configs: the four methods, the inline config of SendMessage, secrets, the SSRF guard.

Configs live in the task's log (``PushConfigSet``, ``PushConfigRemoved``). A read never shows a
config's ``token`` or ``authentication.credentials``. Names are resolved by a fake DNS here
(``hooks.example.com`` is public, ``intranet.example.com`` private); ``localhost`` resolves for real.
"""

from __future__ import annotations

import json
import socket
from collections.abc import Callable
from typing import Any
from uuid import UUID

import httpx
import pytest
from litestar import Litestar

from longhaul.settings import Settings
from store.log.application import MAX_PUSH_CONFIGS, TaskApplication
from store.public_form.event_json import dumps, event_message
from tests.api.support import A2A_HEADERS, Advance, Rpc, error_of, http_client, log_position, user_message

JSON = dict[str, Any]

HOOK = "https://hooks.example.com/a2a"
TOKEN = "tok-0f3c-very-secret"
CREDENTIALS = "cred-9a1b-very-secret"
FAKE_DNS = {"hooks.example.com": "93.184.215.14", "intranet.example.com": "10.20.30.40"}


@pytest.fixture(autouse=True)
def fake_dns(monkeypatch: pytest.MonkeyPatch) -> None:
    """Answer the names of ``FAKE_DNS``; resolve every other name for real."""
    real = socket.getaddrinfo

    def getaddrinfo(host: Any, port: Any, *args: Any, **kwargs: Any) -> Any:
        if host in FAKE_DNS:
            return [(socket.AF_INET, socket.SOCK_STREAM, 6, "", (FAKE_DNS[host], port))]
        return real(host, port, *args, **kwargs)

    monkeypatch.setattr(socket, "getaddrinfo", getaddrinfo)


async def _task(rpc: Rpc, tenant: str | None = None, **configuration: Any) -> str:
    """Start a task that stays SUBMITTED (no worker runs here); its id."""
    params: JSON = {"message": user_message(), "configuration": {"returnImmediately": True, **configuration}}
    if tenant is not None:
        params["tenant"] = tenant
    response = await rpc("SendMessage", params)
    task_id: str = response["result"]["task"]["id"]
    return task_id


def _config(task_id: str, config_id: str | None = "hook-1", url: str = HOOK, **extra: Any) -> JSON:
    config: JSON = {
        "taskId": task_id,
        "url": url,
        "token": TOKEN,
        "authentication": {"scheme": "Bearer", "credentials": CREDENTIALS},
        **extra,
    }
    if config_id is not None:
        config["id"] = config_id
    return config


def _no_secrets(document: Any) -> None:
    text = json.dumps(document)
    assert TOKEN not in text, document
    assert CREDENTIALS not in text, document
    assert '"token"' not in text, document
    assert '"credentials"' not in text, document


def _event_types(store: TaskApplication, task_id: str) -> list[str]:
    return [type(event).__name__ for event in store.history(UUID(task_id))]


class TestCreate:
    async def test_creates_a_config_in_the_log_and_answers_it_without_secrets(
        self, rpc: Rpc, store: TaskApplication
    ) -> None:
        task_id = await _task(rpc)

        response = await rpc("CreateTaskPushNotificationConfig", _config(task_id))

        assert response["result"] == {
            "id": "hook-1",
            "taskId": task_id,
            "url": HOOK,
            "authentication": {"scheme": "Bearer"},
        }
        assert _event_types(store, task_id)[-1] == "PushConfigSet"
        stored = store.get(UUID(task_id)).push_configs["hook-1"]
        assert stored["token"] == TOKEN  # kept for delivery, never read back
        assert stored["authentication"] == {"scheme": "Bearer", "credentials": CREDENTIALS}

    async def test_an_empty_or_absent_id_is_generated(self, rpc: Rpc) -> None:
        task_id = await _task(rpc)

        first = (await rpc("CreateTaskPushNotificationConfig", _config(task_id, None)))["result"]
        second = (await rpc("CreateTaskPushNotificationConfig", _config(task_id, "")))["result"]

        assert UUID(first["id"]) != UUID(second["id"])
        listed = (await rpc("ListTaskPushNotificationConfigs", {"taskId": task_id}))["result"]
        assert {c["id"] for c in listed["configs"]} == {first["id"], second["id"]}

    async def test_an_existing_id_is_replaced(self, rpc: Rpc) -> None:
        task_id = await _task(rpc)
        await rpc("CreateTaskPushNotificationConfig", _config(task_id))

        other = "https://hooks.example.com/other"
        response = await rpc(
            "CreateTaskPushNotificationConfig", {"taskId": task_id, "id": "hook-1", "url": other}
        )

        assert response["result"] == {"id": "hook-1", "taskId": task_id, "url": other}
        listed = (await rpc("ListTaskPushNotificationConfigs", {"taskId": task_id}))["result"]
        assert listed == {"configs": [response["result"]], "nextPageToken": ""}

    async def test_unknown_and_foreign_tasks_are_not_found(self, rpc: Rpc, store: TaskApplication) -> None:
        task_id = await _task(rpc, tenant="acme")
        before = log_position(store)

        for params in (
            _config(task_id),  # the default tenant's view: acme's task does not exist
            _config(task_id, tenant="globex"),
            _config("00000000-0000-0000-0000-000000000000", tenant="acme"),
            _config("not-a-task", tenant="acme"),
        ):
            error_of(await rpc("CreateTaskPushNotificationConfig", params), -32001, "TASK_NOT_FOUND")
        assert log_position(store) == before
        assert (await rpc("CreateTaskPushNotificationConfig", _config(task_id, tenant="acme")))["result"]

    @pytest.mark.parametrize(
        ("params", "field"),
        [
            ({"url": HOOK}, "taskId"),
            ({"taskId": "x"}, "url"),
            ({"taskId": "x", "url": ""}, "url"),
            ({"taskId": "x", "url": 7}, "url"),
            ({"taskId": "x", "url": HOOK, "authentication": {"credentials": "c"}}, "authentication.scheme"),
        ],
    )
    async def test_bad_params_are_invalid_params(
        self, rpc: Rpc, store: TaskApplication, params: JSON, field: str
    ) -> None:
        before = log_position(store)

        error = error_of(await rpc("CreateTaskPushNotificationConfig", params), -32602, "INVALID_PARAMS")

        assert field in error["message"]
        assert log_position(store) == before

    async def test_a_terminal_task_takes_a_config_and_keeps_no_secrets_of_it(
        self, rpc: Rpc, store: TaskApplication, advance: Advance
    ) -> None:
        """ADR 0025; both bindings and every method: ``test_push_configs_on_ended_tasks.py``."""
        task_id = await _task(rpc)
        advance.complete(UUID(task_id))

        response = await rpc("CreateTaskPushNotificationConfig", _config(task_id))

        assert response["result"]["id"] == "hook-1"
        assert _event_types(store, task_id)[-2:] == ["Completed", "PushConfigSet"]
        _no_secrets(store.get(UUID(task_id)).push_configs)


class TestGetAndList:
    async def test_get_answers_the_config_without_secrets(self, rpc: Rpc) -> None:
        task_id = await _task(rpc)
        await rpc("CreateTaskPushNotificationConfig", _config(task_id))

        response = await rpc("GetTaskPushNotificationConfig", {"taskId": task_id, "id": "hook-1"})

        assert response["result"] == {
            "id": "hook-1",
            "taskId": task_id,
            "url": HOOK,
            "authentication": {"scheme": "Bearer"},
        }

    async def test_a_missing_config_is_task_not_found(self, rpc: Rpc) -> None:
        task_id = await _task(rpc)

        response = await rpc("GetTaskPushNotificationConfig", {"taskId": task_id, "id": "nope"})

        assert "nope" in error_of(response, -32001, "TASK_NOT_FOUND")["message"]

    async def test_another_tenant_sees_neither_the_task_nor_its_configs(self, rpc: Rpc) -> None:
        task_id = await _task(rpc, tenant="acme")
        await rpc("CreateTaskPushNotificationConfig", _config(task_id, tenant="acme"))

        for tenant in (None, "globex"):
            wall = {} if tenant is None else {"tenant": tenant}
            get = await rpc("GetTaskPushNotificationConfig", {"taskId": task_id, "id": "hook-1", **wall})
            error_of(get, -32001, "TASK_NOT_FOUND")
            listed = await rpc("ListTaskPushNotificationConfigs", {"taskId": task_id, **wall})
            error_of(listed, -32001, "TASK_NOT_FOUND")
            deleted = await rpc(
                "DeleteTaskPushNotificationConfig", {"taskId": task_id, "id": "hook-1", **wall}
            )
            error_of(deleted, -32001, "TASK_NOT_FOUND")
        listed = await rpc("ListTaskPushNotificationConfigs", {"taskId": task_id, "tenant": "acme"})
        assert [c["id"] for c in listed["result"]["configs"]] == ["hook-1"]

    async def test_list_pages_through_every_config_by_id_without_secrets(self, rpc: Rpc) -> None:
        task_id = await _task(rpc)
        for config_id in ("c", "a", "b"):
            await rpc("CreateTaskPushNotificationConfig", _config(task_id, config_id))

        everything = (await rpc("ListTaskPushNotificationConfigs", {"taskId": task_id}))["result"]
        pages, token = [], None
        while token != "":
            params: JSON = {"taskId": task_id, "pageSize": 2, **({"pageToken": token} if token else {})}
            page = (await rpc("ListTaskPushNotificationConfigs", params))["result"]
            pages.append([c["id"] for c in page["configs"]])
            token = page["nextPageToken"]

        assert [c["id"] for c in everything["configs"]] == ["a", "b", "c"]
        assert everything["nextPageToken"] == ""
        assert pages == [["a", "b"], ["c"]]
        _no_secrets(everything)

    async def test_a_task_without_configs_lists_none(self, rpc: Rpc) -> None:
        task_id = await _task(rpc)

        response = await rpc("ListTaskPushNotificationConfigs", {"taskId": task_id})

        assert response["result"] == {"configs": [], "nextPageToken": ""}

    async def test_configs_outlast_the_task_until_deleted(self, rpc: Rpc, advance: Advance) -> None:
        task_id = await _task(rpc)
        await rpc("CreateTaskPushNotificationConfig", _config(task_id))
        advance.complete(UUID(task_id))

        listed = await rpc("ListTaskPushNotificationConfigs", {"taskId": task_id})
        got = await rpc("GetTaskPushNotificationConfig", {"taskId": task_id, "id": "hook-1"})

        assert [c["id"] for c in listed["result"]["configs"]] == ["hook-1"]
        assert got["result"]["id"] == "hook-1"
        _no_secrets([listed, got])

    async def test_get_task_never_shows_a_config_or_its_secrets(self, rpc: Rpc) -> None:
        task_id = await _task(rpc)
        await rpc("CreateTaskPushNotificationConfig", _config(task_id))

        response = await rpc("GetTask", {"id": task_id})

        assert response["result"]["id"] == task_id
        _no_secrets(response)

    @pytest.mark.parametrize(
        ("method", "params"),
        [
            ("GetTaskPushNotificationConfig", {"taskId": "x"}),
            ("GetTaskPushNotificationConfig", {"id": "x"}),
            ("ListTaskPushNotificationConfigs", {}),
            ("ListTaskPushNotificationConfigs", {"taskId": "x", "pageSize": 0}),
            ("DeleteTaskPushNotificationConfig", {"taskId": "x"}),
        ],
    )
    async def test_bad_params_are_invalid_params(self, rpc: Rpc, method: str, params: JSON) -> None:
        error_of(await rpc(method, params), -32602, "INVALID_PARAMS")


class TestDelete:
    async def test_delete_removes_the_config_and_is_idempotent(
        self, rpc: Rpc, store: TaskApplication
    ) -> None:
        task_id = await _task(rpc)
        await rpc("CreateTaskPushNotificationConfig", _config(task_id))
        params = {"taskId": task_id, "id": "hook-1"}

        first = await rpc("DeleteTaskPushNotificationConfig", params)
        before = log_position(store)
        again = await rpc("DeleteTaskPushNotificationConfig", params)
        never = await rpc("DeleteTaskPushNotificationConfig", {"taskId": task_id, "id": "never-was"})

        assert first["result"] == again["result"] == never["result"] == {}
        assert log_position(store) == before  # the repeats appended nothing
        assert _event_types(store, task_id)[-2:] == ["PushConfigSet", "PushConfigRemoved"]
        error_of(await rpc("GetTaskPushNotificationConfig", params), -32001, "TASK_NOT_FOUND")

    async def test_deleting_from_an_ended_task_removes_the_config(
        self, rpc: Rpc, store: TaskApplication, advance: Advance
    ) -> None:
        task_id = await _task(rpc)
        await rpc("CreateTaskPushNotificationConfig", _config(task_id))
        advance.complete(UUID(task_id))

        response = await rpc("DeleteTaskPushNotificationConfig", {"taskId": task_id, "id": "hook-1"})

        assert response["result"] == {}
        assert _event_types(store, task_id)[-2:] == ["Completed", "PushConfigRemoved"]
        assert store.get(UUID(task_id)).push_configs == {}

    async def test_an_unknown_task_is_not_found(self, rpc: Rpc) -> None:
        response = await rpc(
            "DeleteTaskPushNotificationConfig", {"taskId": "00000000-0000-0000-0000-000000000000", "id": "x"}
        )

        error_of(response, -32001, "TASK_NOT_FOUND")


REFUSED_URLS = [
    "http://127.0.0.1/hook",
    "http://127.1.2.3:9000/hook",
    "http://10.1.2.3/hook",
    "https://192.168.0.10/hook",
    "http://172.16.5.4/hook",
    "http://169.254.169.254/latest/meta-data",
    "http://[::1]/hook",
    "http://[::ffff:127.0.0.1]/hook",
    "http://[fe80::1]/hook",
    "http://[fd00::1]/hook",
    "http://0.0.0.0/hook",
    "http://224.0.0.1/hook",
    "http://240.0.0.1/hook",
    "http://100.64.0.1/hook",
    "http://localhost/hook",
    "http://localhost:8080/hook",
    "http://intranet.example.com/hook",
]
MALFORMED_URLS = [
    "ftp://hooks.example.com/a2a",
    "file:///etc/passwd",
    "hooks.example.com/a2a",
    "https:///a2a",
    "http://[::1/x",
]


class TestSsrfGuard:
    @pytest.mark.parametrize("url", REFUSED_URLS + MALFORMED_URLS)
    async def test_non_public_and_malformed_urls_are_refused(
        self, rpc: Rpc, store: TaskApplication, url: str
    ) -> None:
        task_id = await _task(rpc)
        before = log_position(store)

        response = await rpc("CreateTaskPushNotificationConfig", _config(task_id, url=url))

        error = error_of(response, -32602, "INVALID_PARAMS")
        assert repr(url) in error["message"]
        assert error["data"][1]["fieldViolations"][0]["field"] == "url"
        assert log_position(store) == before

    async def test_a_private_address_names_the_setting_that_allows_it(self, rpc: Rpc) -> None:
        task_id = await _task(rpc)

        response = await rpc("CreateTaskPushNotificationConfig", _config(task_id, url="http://10.0.0.1/h"))

        assert (
            "LONGHAUL_ALLOW_PRIVATE_WEBHOOKS=true" in error_of(response, -32602, "INVALID_PARAMS")["message"]
        )

    async def test_public_addresses_are_accepted(self, rpc: Rpc) -> None:
        task_id = await _task(rpc)

        for url in (HOOK, "http://93.184.215.14:8443/a2a", "https://[2606:4700::1111]/a2a"):
            response = await rpc("CreateTaskPushNotificationConfig", _config(task_id, url=url))
            assert response["result"]["url"] == url

    @pytest.mark.parametrize("url", REFUSED_URLS)
    async def test_the_setting_allows_private_addresses(
        self, make_app: Callable[..., Litestar], url: str
    ) -> None:
        async with http_client(make_app(allow_private_webhooks=True)) as client:
            rpc = _rpc(client)
            task_id = await _task(rpc)

            response = await rpc("CreateTaskPushNotificationConfig", _config(task_id, url=url))

        assert response["result"]["url"] == url

    @pytest.mark.parametrize("url", MALFORMED_URLS)
    async def test_the_setting_still_wants_http_with_a_host(
        self, make_app: Callable[..., Litestar], url: str
    ) -> None:
        async with http_client(make_app(allow_private_webhooks=True)) as client:
            rpc = _rpc(client)
            task_id = await _task(rpc)

            response = await rpc("CreateTaskPushNotificationConfig", _config(task_id, url=url))

        error_of(response, -32602, "INVALID_PARAMS")


def _rpc(client: httpx.AsyncClient) -> Rpc:
    async def call(method: str, params: Any = None) -> JSON:
        body = {"jsonrpc": "2.0", "id": 1, "method": method, "params": params}
        response = await client.post("/a2a/jsonrpc", json=body, headers=A2A_HEADERS)
        decoded: JSON = response.json()
        return decoded

    return call


class TestInline:
    async def test_send_message_stores_the_config_in_the_submitting_commit(
        self, rpc: Rpc, store: TaskApplication
    ) -> None:
        inline = {
            "url": HOOK,
            "token": TOKEN,
            "authentication": {"scheme": "Bearer", "credentials": CREDENTIALS},
        }
        before = log_position(store)

        response = await rpc(
            "SendMessage",
            {
                "message": user_message(),
                "configuration": {"returnImmediately": True, "taskPushNotificationConfig": inline},
            },
        )

        _no_secrets(response)
        task_id = response["result"]["task"]["id"]
        events = list(store.history(UUID(task_id)))
        assert [type(e).__name__ for e in events] == ["Submitted", "PushConfigSet"]
        assert log_position(store) == before + 2
        listed = (await rpc("ListTaskPushNotificationConfigs", {"taskId": task_id}))["result"]
        (config,) = listed["configs"]
        assert UUID(config["id"])  # generated
        assert config == {
            "id": config["id"],
            "taskId": task_id,
            "url": HOOK,
            "authentication": {"scheme": "Bearer"},
        }

    async def test_the_one_commit_holds_both_events(
        self, rpc: Rpc, store: TaskApplication, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        saves: list[list[str]] = []
        save_tasks = store.save_tasks

        def counting(*tasks: Any) -> list[int]:
            saves.append([type(e).__name__ for t in tasks for e in t.pending_events])
            return save_tasks(*tasks)

        monkeypatch.setattr(store, "save_tasks", counting)

        await _task(rpc, taskPushNotificationConfig={"url": HOOK, "id": "inline"})

        assert saves == [["Submitted", "PushConfigSet"]]

    async def test_a_resend_does_not_register_the_config_again(
        self, rpc: Rpc, store: TaskApplication
    ) -> None:
        message = user_message()
        params = {
            "message": message,
            "configuration": {"returnImmediately": True, "taskPushNotificationConfig": {"url": HOOK}},
        }
        first = await rpc("SendMessage", params)
        second = await rpc("SendMessage", params)

        task_id = first["result"]["task"]["id"]
        assert second["result"]["task"]["id"] == task_id
        assert _event_types(store, task_id) == ["Submitted", "PushConfigSet"]

    async def test_an_answer_can_carry_a_config(
        self, rpc: Rpc, store: TaskApplication, advance: Advance
    ) -> None:
        task_id = await _task(rpc)
        advance.ask(UUID(task_id))

        response = await rpc(
            "SendMessage",
            {
                "message": user_message("yes", taskId=task_id),
                "configuration": {
                    "returnImmediately": True,
                    "taskPushNotificationConfig": {"url": HOOK, "id": "later"},
                },
            },
        )

        assert response["result"]["task"]["status"]["state"] == "TASK_STATE_WORKING"
        assert _event_types(store, task_id)[-2:] == ["InputReceived", "PushConfigSet"]
        assert set(store.get(UUID(task_id)).push_configs) == {"later"}

    @pytest.mark.parametrize(
        "url", ["http://127.0.0.1/hook", "http://localhost/hook", "ftp://hooks.example.com/"]
    )
    async def test_a_refused_url_starts_no_task(self, rpc: Rpc, store: TaskApplication, url: str) -> None:
        before = log_position(store)

        response = await rpc(
            "SendMessage",
            {
                "message": user_message(),
                "configuration": {"returnImmediately": True, "taskPushNotificationConfig": {"url": url}},
            },
        )

        error = error_of(response, -32602, "INVALID_PARAMS")
        assert (
            error["data"][1]["fieldViolations"][0]["field"] == "configuration.taskPushNotificationConfig.url"
        )
        assert log_position(store) == before

    async def test_an_inline_config_names_no_other_task(self, rpc: Rpc, store: TaskApplication) -> None:
        before = log_position(store)
        inline = {"url": HOOK, "taskId": "00000000-0000-0000-0000-000000000000"}

        response = await rpc(
            "SendMessage",
            {"message": user_message(), "configuration": {"taskPushNotificationConfig": inline}},
        )

        error_of(response, -32602, "INVALID_PARAMS")
        assert log_position(store) == before

    async def test_an_inline_config_needs_a_url(self, rpc: Rpc) -> None:
        response = await rpc(
            "SendMessage", {"message": user_message(), "configuration": {"taskPushNotificationConfig": {}}}
        )

        assert "url" in error_of(response, -32602, "INVALID_PARAMS")["message"]


@pytest.mark.postgres  # the events as PostgreSQL stores and replays them
async def test_configs_round_trip_through_postgres(rpc: Rpc, store: TaskApplication) -> None:
    inline = {"url": HOOK, "id": "inline", "token": TOKEN}
    task_id = await _task(rpc, taskPushNotificationConfig=inline)
    await rpc("CreateTaskPushNotificationConfig", _config(task_id, "created"))
    await rpc("DeleteTaskPushNotificationConfig", {"taskId": task_id, "id": "inline"})

    listed = (await rpc("ListTaskPushNotificationConfigs", {"taskId": task_id}))["result"]

    assert [c["id"] for c in listed["configs"]] == ["created"]
    _no_secrets(listed)
    assert _event_types(store, task_id) == [
        "Submitted",
        "PushConfigSet",
        "PushConfigSet",
        "PushConfigRemoved",
    ]
    assert store.get(UUID(task_id)).push_configs["created"]["token"] == TOKEN


def test_the_setting_is_off_unless_set(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("LONGHAUL_ALLOW_PRIVATE_WEBHOOKS", raising=False)
    assert Settings().allow_private_webhooks is False
    monkeypatch.setenv("LONGHAUL_ALLOW_PRIVATE_WEBHOOKS", "true")
    assert Settings().allow_private_webhooks is True


async def test_the_public_form_of_the_event_carries_no_secrets(rpc: Rpc, store: TaskApplication) -> None:
    task_id = await _task(rpc)
    await rpc("CreateTaskPushNotificationConfig", _config(task_id))

    *_, event = store.history(UUID(task_id))
    message = event_message(None, "default", event)

    assert message["type"] == "PushConfigSet"
    assert message["body"]["config"] == {"id": "hook-1", "url": HOOK, "authentication": {"scheme": "Bearer"}}
    _no_secrets(json.loads(dumps(message)))
    assert store.get(UUID(task_id)).push_configs["hook-1"]["token"] == TOKEN  # the log keeps them


async def test_a_task_keeps_at_most_max_push_configs(
    rpc: Rpc, store: TaskApplication, advance: Advance
) -> None:
    task_id = await _task(rpc)
    for n in range(MAX_PUSH_CONFIGS):
        assert (await rpc("CreateTaskPushNotificationConfig", _config(task_id, f"c{n:02d}")))["result"]
    before = log_position(store)

    one_more = await rpc("CreateTaskPushNotificationConfig", _config(task_id, "one-more"))
    advance.ask(UUID(task_id))
    answer_with_one_more = await rpc(
        "SendMessage",
        {
            "message": user_message("yes", taskId=task_id),
            "configuration": {"returnImmediately": True, "taskPushNotificationConfig": {"url": HOOK}},
        },
    )
    replaced = await rpc("CreateTaskPushNotificationConfig", _config(task_id, "c00", url=HOOK + "/new"))

    assert (
        f"{MAX_PUSH_CONFIGS} push notification configs"
        in error_of(one_more, -32602, "INVALID_PARAMS")["message"]
    )
    error_of(answer_with_one_more, -32602, "INVALID_PARAMS")
    assert replaced["result"]["url"] == HOOK + "/new"  # a replacement is not one more
    assert len(store.get(UUID(task_id)).push_configs) == MAX_PUSH_CONFIGS
    assert _event_types(store, task_id)[-2:] == ["InputRequested", "PushConfigSet"]
    assert log_position(store) == before + 3  # the lease and the pause, then the replacement
