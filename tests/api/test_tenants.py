"""Tenants are walls: with API keys, every JSON-RPC method runs as the key's tenant.

Two tenants, acme and globex, each with a key. Whatever globex sends about acme's task, every
method answers TaskNotFound and the log does not grow; a request naming another tenant in its
``tenant`` field is refused; a request without a known key gets 401 and appends nothing.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from typing import Any
from uuid import UUID

import httpx
import pytest
import pytest_asyncio
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from litestar import Litestar
from litestar.connection import ASGIConnection

from api.api_keys import KeyRing, parse_pairs
from api.authentication import caller_tenant
from api.errors import UnauthenticatedError
from store.log.application import TaskApplication
from store.log.config import StoreConfig
from tests.api.support import (
    A2A_HEADERS,
    Advance,
    error_of,
    http_client,
    log_position,
    task_id_for,
    user_message,
)
from tests.support.projector import projector_running

JSON = dict[str, Any]

ACME_KEY = "acme-key-0123456789abcdef"
GLOBEX_KEY = "globex-key-0123456789abcdef"
KEYS = f"acme={ACME_KEY},globex={GLOBEX_KEY}"
HOOK = "http://127.0.0.1:9/hook"
IMMEDIATE = {"returnImmediately": True}


def bearer(key: str) -> JSON:
    return {**A2A_HEADERS, "Authorization": f"Bearer {key}"}


class Caller:
    """JSON-RPC calls with one set of headers (one tenant's key, or none)."""

    def __init__(self, http: httpx.AsyncClient, headers: JSON) -> None:
        self.http, self.headers = http, headers

    async def post(self, method: str, params: JSON) -> httpx.Response:
        body = {"jsonrpc": "2.0", "id": 1, "method": method, "params": params}
        return await self.http.post("/a2a/jsonrpc", json=body, headers=self.headers)

    async def call(self, method: str, params: JSON) -> JSON:
        response = await self.post(method, params)
        assert response.status_code == 200, response.text
        decoded: JSON = response.json()
        return decoded

    async def new_task(self, **params: Any) -> JSON:
        sent = await self.call(
            "SendMessage", {"message": user_message(), "configuration": IMMEDIATE, **params}
        )
        task: JSON = sent["result"]["task"]
        return task


@pytest_asyncio.fixture
async def http(make_app: Callable[..., Litestar]) -> AsyncIterator[httpx.AsyncClient]:
    app = make_app(api_keys=KeyRing(parse_pairs(KEYS)), allow_private_webhooks=True)
    async with http_client(app) as client:
        yield client


@pytest.fixture
def acme(http: httpx.AsyncClient) -> Caller:
    return Caller(http, bearer(ACME_KEY))


@pytest.fixture
def globex(http: httpx.AsyncClient) -> Caller:
    return Caller(http, bearer(GLOBEX_KEY))


class TestAnotherTenantsTask:
    """globex addresses acme's task by its id: every method answers as if it did not exist."""

    @pytest.mark.parametrize(
        ("method", "params"),
        [
            ("GetTask", lambda task_id: {"id": task_id}),
            ("CancelTask", lambda task_id: {"id": task_id}),
            ("SendMessage", lambda task_id: {"message": user_message("mine now", taskId=task_id)}),
            ("CreateTaskPushNotificationConfig", lambda task_id: {"taskId": task_id, "url": HOOK}),
            ("GetTaskPushNotificationConfig", lambda task_id: {"taskId": task_id, "id": "hook-1"}),
            ("ListTaskPushNotificationConfigs", lambda task_id: {"taskId": task_id}),
            ("DeleteTaskPushNotificationConfig", lambda task_id: {"taskId": task_id, "id": "hook-1"}),
        ],
    )
    async def test_is_task_not_found_and_appends_nothing(
        self,
        acme: Caller,
        globex: Caller,
        advance: Advance,
        store: TaskApplication,
        method: str,
        params: Callable[[str], JSON],
    ) -> None:
        task = await acme.new_task()
        await asyncio.to_thread(advance.ask, UUID(task["id"]))  # paused: an answer would be taken
        configured = await acme.call(
            "CreateTaskPushNotificationConfig", {"taskId": task["id"], "url": HOOK, "id": "hook-1"}
        )
        assert "result" in configured, configured
        before = log_position(store)

        response = await globex.call(method, params(task["id"]))

        error_of(response, -32001, "TASK_NOT_FOUND")
        assert log_position(store) == before
        assert (await acme.call("GetTask", {"id": task["id"]}))["result"]["status"]["state"] == (
            "TASK_STATE_INPUT_REQUIRED"
        )

    async def test_the_same_message_id_is_each_tenants_own_task(
        self, acme: Caller, globex: Caller, store: TaskApplication
    ) -> None:
        ours = await acme.new_task(message=user_message("a", message_id="same"))
        theirs = await globex.new_task(message=user_message("g", message_id="same"))

        assert ours["id"] == str(task_id_for("same", tenant="acme"))
        assert theirs["id"] == str(task_id_for("same", tenant="globex"))
        assert store.get(UUID(ours["id"])).tenant == "acme"
        assert store.get(UUID(theirs["id"])).tenant == "globex"


class TestNamingATenant:
    async def test_naming_ones_own_tenant_is_the_same_as_naming_none(
        self, acme: Caller, store: TaskApplication
    ) -> None:
        task = await acme.new_task(tenant="acme")

        assert store.get(UUID(task["id"])).tenant == "acme"
        assert (await acme.call("GetTask", {"id": task["id"], "tenant": "acme"}))["result"]["id"] == task[
            "id"
        ]

    @pytest.mark.parametrize(
        ("method", "params"),
        [
            ("SendMessage", {"message": user_message(), "tenant": "globex"}),
            ("GetTask", {"id": str(task_id_for("x", tenant="globex")), "tenant": "globex"}),
            ("ListTasks", {"tenant": "globex"}),
            (
                "DeleteTaskPushNotificationConfig",
                {"taskId": str(task_id_for("x")), "id": "h", "tenant": "default"},
            ),
        ],
    )
    async def test_naming_another_tenant_is_refused(
        self, acme: Caller, store: TaskApplication, method: str, params: JSON
    ) -> None:
        response = await acme.call(method, params)

        error = error_of(response, -32602, "INVALID_PARAMS")
        assert error["data"][1]["fieldViolations"][0]["field"] == "tenant"
        assert log_position(store) == 0


@pytest.mark.postgres  # ListTasks reads the current-task view on PostgreSQL
async def test_list_tasks_shows_only_the_callers_tasks(
    acme: Caller, globex: Caller, store_config: StoreConfig, store: TaskApplication
) -> None:
    ours = {(await acme.new_task())["id"] for _ in range(2)}
    theirs = {(await globex.new_task())["id"] for _ in range(3)}
    with projector_running(store_config) as runner:
        await asyncio.to_thread(runner.wait, log_position(store), 20.0)

    acme_page = (await acme.call("ListTasks", {}))["result"]
    globex_page = (await globex.call("ListTasks", {}))["result"]

    assert {task["id"] for task in acme_page["tasks"]} == ours
    assert acme_page["totalSize"] == 2
    assert {task["id"] for task in globex_page["tasks"]} == theirs


class TestUnauthenticated:
    @pytest.mark.parametrize(
        "headers",
        [
            A2A_HEADERS,
            bearer("not-a-key-of-anyone-here"),
            bearer(ACME_KEY[:-1]),
            bearer(ACME_KEY + "x"),
            {**A2A_HEADERS, "Authorization": f"Basic {ACME_KEY}"},
            {**A2A_HEADERS, "Authorization": "Bearer "},
            {**A2A_HEADERS, "Authorization": ACME_KEY},
        ],
        ids=["no header", "unknown", "prefix", "longer", "basic", "empty", "no scheme"],
    )
    async def test_is_401_with_a_bearer_challenge_and_a_jsonrpc_error(
        self, http: httpx.AsyncClient, store: TaskApplication, headers: JSON
    ) -> None:
        response = await Caller(http, headers).post("SendMessage", {"message": user_message()})

        assert response.status_code == 401
        assert response.headers["www-authenticate"].startswith("Bearer")
        body = response.json()
        assert body["jsonrpc"] == "2.0"
        assert body["id"] is None
        error_of(body, -32000, "UNAUTHENTICATED")
        assert log_position(store) == 0

    @settings(max_examples=80, suppress_health_check=[HealthCheck.function_scoped_fixture], deadline=None)
    @given(
        st.one_of(
            st.tuples(
                st.text(st.characters(min_codepoint=0x20, max_codepoint=0xFF), max_size=80), st.just(False)
            ),
            st.builds(
                lambda scheme, key, tail: (
                    f"{scheme} {key}{tail}",
                    scheme.lower() == "bearer" and tail.isspace(),
                ),
                st.sampled_from(["Bearer", "bearer", "BEARER", "Basic", "Token", "Bearer:"]),
                st.sampled_from([ACME_KEY, GLOBEX_KEY]),
                st.sampled_from([" ", "  ", "x", "=", "\x80"]),
            ),
        )
    )
    async def test_any_authorization_header_is_401_unless_it_is_a_key(
        self, http: httpx.AsyncClient, store: TaskApplication, case: tuple[str, bool]
    ) -> None:
        header, known = case
        before = log_position(store)
        caller = Caller(http, {**A2A_HEADERS, "Authorization": header.encode("latin-1")})

        response = await caller.post("ListTasks", {})

        assert response.status_code == (200 if known else 401), header
        assert log_position(store) == before

    def test_a_request_the_middleware_did_not_see_is_unauthenticated(self) -> None:
        scope: Any = {"type": "http", "path": "/", "headers": [], "state": {}}
        connection: ASGIConnection[Any, Any, Any, Any] = ASGIConnection(scope)

        with pytest.raises(UnauthenticatedError):
            caller_tenant(connection, "acme")

    async def test_the_scheme_name_is_case_insensitive(
        self, http: httpx.AsyncClient, store: TaskApplication
    ) -> None:
        caller = Caller(http, {**A2A_HEADERS, "Authorization": f"bearer {ACME_KEY}"})

        task = await caller.new_task()  # returnImmediately: no worker runs, nothing to wait for

        assert store.get(UUID(task["id"])).tenant == "acme"

    async def test_the_agent_card_and_the_metrics_stay_public(self, http: httpx.AsyncClient) -> None:
        card = await http.get("/.well-known/agent-card.json")
        metrics = await http.get("/metrics")

        assert card.status_code == 200
        assert metrics.status_code == 200

    async def test_refusals_are_counted_in_the_metrics(self, http: httpx.AsyncClient) -> None:
        for _ in range(2):
            assert (await Caller(http, A2A_HEADERS).post("GetTask", {"id": "x"})).status_code == 401

        metrics = (await http.get("/metrics")).text

        assert 'longhaul_gateway_refusals_total{reason="unauthenticated"} 2.0' in metrics
        assert 'longhaul_gateway_refusals_total{reason="overloaded"} 0.0' in metrics

    async def test_the_card_says_a_bearer_key_is_required(self, http: httpx.AsyncClient) -> None:
        card = (await http.get("/.well-known/agent-card.json")).json()

        assert card["securitySchemes"] == {
            "bearer": {
                "httpAuthSecurityScheme": {
                    "scheme": "Bearer",
                    "bearerFormat": "API key",
                    "description": "A longhaul API key; it names the caller's tenant.",
                }
            }
        }
        assert card["securityRequirements"] == [{"schemes": {"bearer": {"list": []}}}]


class TestOpenDevTenant:
    async def test_without_keys_anyone_is_served_and_the_card_asks_for_nothing(
        self, make_app: Callable[..., Litestar], store: TaskApplication
    ) -> None:
        async with http_client(make_app()) as http:
            card = (await http.get("/.well-known/agent-card.json")).json()
            sent = await Caller(http, A2A_HEADERS).new_task(tenant="anyone")

        assert "securitySchemes" not in card
        assert "securityRequirements" not in card
        assert store.get(UUID(sent["id"])).tenant == "anyone"


class TestRestBinding:
    """The HTTP+JSON binding runs as the key's tenant too: the wall is the same function."""

    async def test_another_tenants_task_is_not_found_on_every_rest_read_and_write(
        self, http: httpx.AsyncClient, store: TaskApplication
    ) -> None:
        acme, globex = bearer(ACME_KEY), bearer(GLOBEX_KEY)
        task = await Caller(http, acme).new_task()
        before = log_position(store)
        base = f"/a2a/rest/tasks/{task['id']}"
        attempts = [
            http.get(base, headers=globex),
            http.post(f"{base}:cancel", json={}, headers=globex),
            http.get(f"{base}/pushNotificationConfigs", headers=globex),
            http.post(f"{base}/pushNotificationConfigs", json={"url": HOOK}, headers=globex),
            http.delete(f"{base}/pushNotificationConfigs/any", headers=globex),
        ]
        for response in await asyncio.gather(*attempts):
            assert response.status_code == 404, response.text
            assert response.json()["error"]["details"][0]["reason"] == "TASK_NOT_FOUND"
        listed = await http.get("/a2a/rest/tasks", headers=globex)
        assert listed.status_code in (200, 400), listed.text  # 400 only over a memory store (no view)
        if listed.status_code == 200:
            assert listed.json()["tasks"] == []
        assert log_position(store) == before
        own = await http.get(base, headers=acme)
        assert own.status_code == 200
        assert own.json()["id"] == task["id"]

    async def test_a_path_naming_another_tenant_is_refused(self, http: httpx.AsyncClient) -> None:
        task = await Caller(http, bearer(ACME_KEY)).new_task()
        response = await http.get(f"/a2a/rest/acme/tasks/{task['id']}", headers=bearer(GLOBEX_KEY))
        assert response.status_code == 400, response.text
        violations = response.json()["error"]["details"][1]["fieldViolations"]
        assert [v["field"] for v in violations] == ["tenant"]

    async def test_no_key_is_401_with_a_status_body(
        self, http: httpx.AsyncClient, store: TaskApplication
    ) -> None:
        before = log_position(store)
        response = await http.post(
            "/a2a/rest/message:send", json={"message": user_message()}, headers=A2A_HEADERS
        )
        assert response.status_code == 401
        assert response.headers["www-authenticate"].lower().startswith("bearer")
        assert response.json()["error"]["status"] == "UNAUTHENTICATED"
        assert log_position(store) == before
