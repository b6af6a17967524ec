"""The JSON-RPC binding's errors: each with its exact code and ErrorInfo reason, none appending."""

from __future__ import annotations

import json
from typing import Any

import httpx
import pytest

from api.service import A2AService
from store.log import TaskApplication
from tests.api.support import OneGatewayPerClass, Rpc, error_of, log_position, user_message

JSON = dict[str, Any]
ENDPOINT = "/a2a/jsonrpc"


async def _post(client: httpx.AsyncClient, body: bytes, **headers: str) -> httpx.Response:
    return await client.post(ENDPOINT, content=body, headers={"Content-Type": "application/json", **headers})


def _request(method: str = "GetTask", params: Any = None, **envelope: Any) -> bytes:
    document = {"jsonrpc": "2.0", "id": 7, "method": method, "params": params or {"id": "x"}, **envelope}
    return json.dumps(document).encode()


@pytest.fixture(autouse=True)
def _nothing_appended(store: TaskApplication) -> Any:
    """Every test here sends bad input: the log must not move."""
    before = log_position(store)
    yield
    assert log_position(store) == before


class TestTransport(OneGatewayPerClass):
    @pytest.mark.parametrize("body", [b"{", b"", b"\xff\xfe", b'{"a": NaN}', b"[" * 100_000])
    async def test_malformed_json_is_a_parse_error(self, client: httpx.AsyncClient, body: bytes) -> None:
        response = await _post(client, body)

        assert response.status_code == 200
        answer = response.json()
        assert answer["id"] is None
        error_of(answer, -32700, "JSON_PARSE")

    @pytest.mark.parametrize("content_type", ["text/plain", "application/x-www-form-urlencoded", "image/png"])
    async def test_a_non_json_content_type_is_refused_before_parsing(
        self, client: httpx.AsyncClient, content_type: str
    ) -> None:
        response = await client.post(ENDPOINT, content=b"{not json", headers={"Content-Type": content_type})

        assert response.status_code == 200
        error_of(response.json(), -32005, "CONTENT_TYPE_NOT_SUPPORTED")

    @pytest.mark.parametrize("content_type", ["application/json; charset=utf-8", "application/a2a+json"])
    async def test_json_media_types_are_accepted(self, client: httpx.AsyncClient, content_type: str) -> None:
        response = await client.post(ENDPOINT, content=_request(), headers={"Content-Type": content_type})

        error_of(response.json(), -32001, "TASK_NOT_FOUND")  # parsed and dispatched

    async def test_a_body_over_one_mebibyte_is_refused_without_a_500(self, client: httpx.AsyncClient) -> None:
        text = "x" * (1024 * 1024)
        body = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "SendMessage", "params": {"message": text}})

        response = await _post(client, body.encode())

        assert response.status_code == 413
        assert "1 MiB" in error_of(response.json(), -32600, "INVALID_REQUEST")["message"]

    async def test_a_body_just_under_the_limit_is_read(self, client: httpx.AsyncClient) -> None:
        message = user_message("x" * (1024 * 1024 - 400), metadata={"skill": "nope"})
        body = json.dumps(
            {"jsonrpc": "2.0", "id": 1, "method": "SendMessage", "params": {"message": message}}
        )
        assert len(body) < 1024 * 1024

        response = await _post(client, body.encode())

        error_of(response.json(), -32602, "INVALID_PARAMS")  # unknown skill: the body was parsed


class TestEnvelope(OneGatewayPerClass):
    @pytest.mark.parametrize(
        "document",
        [
            [],
            [{"jsonrpc": "2.0", "id": 1, "method": "GetTask", "params": {"id": "x"}}],
            "GetTask",
            42,
            None,
            {"jsonrpc": "2.0", "method": "GetTask", "params": {"id": "x"}},
            {"jsonrpc": "1.0", "id": 1, "method": "GetTask", "params": {"id": "x"}},
            {"id": 1, "method": "GetTask", "params": {"id": "x"}},
            {"jsonrpc": "2.0", "id": 1, "method": 5},
            {"jsonrpc": "2.0", "id": 1, "method": ""},
            {"jsonrpc": "2.0", "id": 1},
            {"jsonrpc": "2.0", "id": {"a": 1}, "method": "GetTask"},
            {"jsonrpc": "2.0", "id": True, "method": "GetTask"},
            {"jsonrpc": "2.0", "id": 1, "method": "GetTask", "params": "x"},
        ],
    )
    async def test_invalid_envelopes(self, client: httpx.AsyncClient, document: Any) -> None:
        response = await _post(client, json.dumps(document).encode())

        answer = response.json()
        assert response.status_code == 200
        assert answer["jsonrpc"] == "2.0"
        error_of(answer, -32600, "INVALID_REQUEST")

    async def test_the_id_is_echoed_in_errors_when_it_is_usable(self, client: httpx.AsyncClient) -> None:
        answer = (
            await _post(client, json.dumps({"jsonrpc": "1.0", "id": "abc", "method": "X"}).encode())
        ).json()

        assert answer["id"] == "abc"

    async def test_an_unknown_method_is_method_not_found(self, rpc: Rpc) -> None:
        response = await rpc("tasks/get", {"id": "x"}, request_id=3)

        assert response["id"] == 3
        assert "tasks/get" in error_of(response, -32601, "METHOD_NOT_FOUND")["message"]

    @pytest.mark.parametrize(
        "method", ["SendStreamingMessage", "SubscribeToTask", "ListTasks", "GetExtendedAgentCard"]
    )
    async def test_methods_a_memory_store_gateway_does_not_offer_are_unsupported(
        self, rpc: Rpc, method: str
    ) -> None:
        response = await rpc(method, {"id": "x"})

        error = error_of(response, -32004, "UNSUPPORTED_OPERATION")
        assert method in error["message"]
        assert "not" in error["message"]

    async def test_list_tasks_over_a_memory_store_says_why_it_is_unsupported(self, rpc: Rpc) -> None:
        response = await rpc("ListTasks", {})

        error = error_of(response, -32004, "UNSUPPORTED_OPERATION")
        assert "LONGHAUL_STORE=memory" in error["message"]
        assert "longhaul projector" in error["message"]


class TestParams(OneGatewayPerClass):
    @pytest.mark.parametrize(
        ("params", "field"),
        [
            ({}, "message"),
            ({"message": {"role": "ROLE_USER", "parts": [{"text": "a"}]}}, "message.messageId"),
            ({"message": {"messageId": "m", "role": "ROLE_USER", "parts": []}}, "message.parts"),
            ({"message": {"messageId": "m", "role": "user", "parts": [{"text": "a"}]}}, "message.role"),
            ({"message": {"messageId": "m", "role": "ROLE_AGENT", "parts": [{"text": "a"}]}}, "message"),
            ({"message": {"messageId": "m", "role": "ROLE_USER", "parts": [{}]}}, "message.parts[0]"),
            (
                {"message": {"messageId": "m", "role": "ROLE_USER", "parts": [{"text": "a", "url": "u"}]}},
                "message.parts[0]",
            ),
            (
                {"message": {"messageId": "m", "role": "ROLE_USER", "parts": [{"raw": "***"}]}},
                "message.parts[0].raw",
            ),
            (
                {"message": {"messageId": 5, "role": "ROLE_USER", "parts": [{"text": "a"}]}},
                "message.messageId",
            ),
            (
                {"message": user_message(), "configuration": {"historyLength": -1}},
                "configuration.historyLength",
            ),
            ({"message": user_message(), "tenant": 3}, "tenant"),
        ],
    )
    async def test_send_message_params_are_validated_with_readable_field_errors(
        self, rpc: Rpc, params: JSON, field: str
    ) -> None:
        response = await rpc("SendMessage", params)

        error = error_of(response, -32602, "INVALID_PARAMS")
        assert error["message"].startswith("invalid params: ")
        assert field in error["message"]
        violations = error["data"][1]
        assert violations["@type"] == "type.googleapis.com/google.rpc.BadRequest"
        assert any(v["field"] == field for v in violations["fieldViolations"]), violations

    @pytest.mark.parametrize("method", ["SendMessage", "GetTask", "CancelTask"])
    @pytest.mark.parametrize("params", [None, [], ["x"]])
    async def test_params_must_be_an_object(
        self, client: httpx.AsyncClient, method: str, params: Any
    ) -> None:
        document: JSON = {"jsonrpc": "2.0", "id": 1, "method": method}
        if params is not None:
            document["params"] = params

        response = await _post(client, json.dumps(document).encode())

        error_of(response.json(), -32602, "INVALID_PARAMS")

    @pytest.mark.parametrize(("method", "field"), [("SendMessage", "message"), ("GetTask", "id")])
    async def test_omitted_params_are_an_empty_object_that_names_the_missing_field(
        self, client: httpx.AsyncClient, method: str, field: str
    ) -> None:
        response = await _post(client, json.dumps({"jsonrpc": "2.0", "id": 1, "method": method}).encode())

        error = error_of(response.json(), -32602, "INVALID_PARAMS")
        assert [v["field"] for v in error["data"][1]["fieldViolations"]] == [field]

    async def test_list_tasks_may_omit_its_params(self, client: httpx.AsyncClient) -> None:
        omitted = await _post(client, json.dumps({"jsonrpc": "2.0", "id": 1, "method": "ListTasks"}).encode())
        empty = await _post(
            client, json.dumps({"jsonrpc": "2.0", "id": 1, "method": "ListTasks", "params": {}}).encode()
        )

        assert omitted.json() == empty.json()
        assert "INVALID_PARAMS" not in omitted.text

    async def test_unknown_members_are_ignored(self, rpc: Rpc) -> None:
        response = await rpc("GetTask", {"id": "x", "somethingNew": True})

        error_of(response, -32001, "TASK_NOT_FOUND")


class TestVersion(OneGatewayPerClass):
    @pytest.mark.parametrize("version", ["0.3", "99.0", "1.1", "1", "one", "1.0.x"])
    async def test_other_versions_are_refused(self, rpc: Rpc, version: str) -> None:
        response = await rpc("GetTask", {"id": "x"}, headers={"A2A-Version": version})

        assert version in error_of(response, -32009, "VERSION_NOT_SUPPORTED")["message"]

    @pytest.mark.parametrize(("query", "code"), [("0.3", -32009), ("1.0", -32001)])
    async def test_the_version_may_come_as_a_query_parameter(
        self, client: httpx.AsyncClient, query: str, code: int
    ) -> None:
        client.headers.pop("A2A-Version", None)

        response = await client.post(f"{ENDPOINT}?A2A-Version={query}", content=_request())

        assert response.json()["error"]["code"] == code

    @pytest.mark.parametrize(
        "headers", [{"A2A-Version": "1.0"}, {"A2A-Version": "1.0.3"}, {"A2A-Version": ""}, {}]
    )
    async def test_one_point_zero_and_a_missing_header_are_accepted(
        self, client: httpx.AsyncClient, headers: dict[str, str]
    ) -> None:
        client.headers.pop("A2A-Version", None)

        response = await client.post(ENDPOINT, content=_request(), headers=headers)

        error_of(response.json(), -32001, "TASK_NOT_FOUND")


class TestInternalErrors(OneGatewayPerClass):
    async def test_an_unexpected_failure_is_a_generic_internal_error_and_logged(
        self, rpc: Rpc, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
    ) -> None:
        async def explode(self: A2AService, request: object) -> JSON:
            raise RuntimeError("password=hunter2 at db:5432")

        monkeypatch.setattr(A2AService, "get_task", explode)

        response = await rpc("GetTask", {"id": "x"}, request_id=9)

        assert response["id"] == 9
        error = error_of(response, -32603, "INTERNAL")
        assert "hunter2" not in json.dumps(response)
        assert error["message"] == "Internal error"
        assert "hunter2" in caplog.text
