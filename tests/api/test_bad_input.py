"""Bad input on both bindings: the same refusal, never a 5xx, and nothing appended to the log.

Each case is sent over JSON-RPC and over HTTP+JSON; the two answers carry the same ErrorInfo
reason (JSON-RPC with its code, HTTP+JSON with its HTTP status) and the same field violations.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import httpx
import pytest
from litestar import Litestar

from store.log import TaskApplication
from tests.api.support import OneGatewayPerClass, http_client, log_position, user_message

JSON = dict[str, Any]
BINDINGS = ["jsonrpc", "rest"]
CODES = {
    "JSON_PARSE": -32700,
    "INVALID_REQUEST": -32600,
    "INVALID_PARAMS": -32602,
    "UNSUPPORTED_OPERATION": -32004,
    "CONTENT_TYPE_NOT_SUPPORTED": -32005,
    "TASK_NOT_FOUND": -32001,
}
HTTP_STATUS = {"TASK_NOT_FOUND": 404}


@dataclass
class Outcome:
    """What one binding answered: HTTP status, ErrorInfo reason (None on success), violations, result."""

    http_status: int
    reason: str | None
    violations: list[str] = field(default_factory=list)
    result: Any = None


async def call(
    client: httpx.AsyncClient,
    binding: str,
    method: str,
    params: JSON | None = None,
    *,
    body: bytes | None = None,
    content_type: str = "application/json",
) -> Outcome:
    """``method`` with ``params`` (or the raw ``body``) over ``binding``, checked for its error shape."""
    headers = {"Content-Type": content_type}
    if binding == "jsonrpc":
        if body is None:
            body = json.dumps({"jsonrpc": "2.0", "id": 3, "method": method, "params": params}).encode()
        response = await client.post("/a2a/jsonrpc", content=body, headers=headers)
        answer: JSON = response.json()
        if "result" in answer:
            return Outcome(response.status_code, None, result=answer["result"])
        error = answer["error"]
        reason = error["data"][0]["reason"]
        assert error["code"] == CODES[reason], error
        assert response.status_code in (200, 413)
        return Outcome(response.status_code, reason, _violations(error["data"]))
    if method == "SendMessage":
        content = body if body is not None else json.dumps(params).encode()
        response = await client.post("/a2a/rest/message:send", content=content, headers=headers)
    else:
        assert method == "GetTask"
        query = {k: v for k, v in (params or {}).items() if k != "id"}
        response = await client.get(f"/a2a/rest/tasks/{(params or {})['id']}", params=query)
    document: JSON = response.json()
    if response.status_code == 200:
        return Outcome(200, None, result=document)
    status = document["error"]
    assert status["code"] == response.status_code
    reason = status["details"][0]["reason"]
    return Outcome(response.status_code, reason, _violations(status["details"]))


def _violations(details: list[JSON]) -> list[str]:
    return [v["field"] for d in details[1:] for v in d.get("fieldViolations", [])]


@pytest.fixture
def nothing_appended(store: TaskApplication) -> Any:
    """The test sends only bad input: the log must not move."""
    before = log_position(store)
    yield
    assert log_position(store) == before


def _refused(outcome: Outcome, binding: str, reason: str, http_status: int = 400) -> None:
    assert outcome.reason == reason, outcome
    expected = http_status if binding == "rest" or http_status == 413 else 200
    assert outcome.http_status == expected, outcome


LONE_SURROGATE = b'{"message": {"messageId": "m", "role": "ROLE_USER", "parts": [{"text": "a\\udfff"}]}}'


@pytest.mark.usefixtures("nothing_appended")
@pytest.mark.parametrize("binding", BINDINGS)
class TestBodies(OneGatewayPerClass):
    @pytest.mark.parametrize(
        "body",
        [
            b"{",
            b"",
            b"\xff\xfe",
            b'{"message": NaN}',
            b"[" * 100_000,
            LONE_SURROGATE,
            LONE_SURROGATE.replace(b"dfff", b"d800"),
        ],
    )
    async def test_malformed_json(self, client: httpx.AsyncClient, binding: str, body: bytes) -> None:
        _refused(await call(client, binding, "SendMessage", body=body), binding, "JSON_PARSE")

    @pytest.mark.parametrize("content_type", ["text/plain", "application/x-www-form-urlencoded", "image/png"])
    async def test_an_unsupported_media_type_is_refused_before_parsing(
        self, client: httpx.AsyncClient, binding: str, content_type: str
    ) -> None:
        outcome = await call(client, binding, "SendMessage", body=b"{not json", content_type=content_type)

        _refused(outcome, binding, "CONTENT_TYPE_NOT_SUPPORTED", 415)

    async def test_a_body_over_the_limit_is_413(
        self, make_app: Callable[..., Litestar], binding: str
    ) -> None:
        message = user_message("x" * 5000)
        async with http_client(make_app(max_body_bytes=4096)) as client:
            outcome = await call(client, binding, "SendMessage", {"message": message})
            small = await call(
                client, binding, "SendMessage", {"message": user_message(metadata={"skill": "x"})}
            )

        _refused(outcome, binding, "INVALID_REQUEST", 413)
        _refused(small, binding, "INVALID_PARAMS")  # read and parsed: the skill is unknown


@pytest.mark.usefixtures("nothing_appended")
@pytest.mark.parametrize("binding", BINDINGS)
class TestParams(OneGatewayPerClass):
    @pytest.mark.parametrize(
        ("params", "violations"),
        [
            ({}, ["message"]),
            ({"message": {"role": "ROLE_USER"}}, ["message.messageId", "message.parts"]),
            ({"message": user_message(parts=[])}, ["message.parts"]),
            ({"message": user_message(parts=[{"text": 7}])}, ["message.parts[0].text"]),
            (
                {"message": user_message(), "configuration": {"returnImmediately": "yes"}},
                ["configuration.returnImmediately"],
            ),
            (
                {"message": user_message(), "configuration": {"returnImmediately": 1}},
                ["configuration.returnImmediately"],
            ),
            (
                {"message": user_message(), "configuration": {"historyLength": 1.5}},
                ["configuration.historyLength"],
            ),
            (
                {"message": user_message(), "configuration": {"historyLength": "two"}},
                ["configuration.historyLength"],
            ),
            (
                {"message": user_message(), "configuration": {"historyLength": -1}},
                ["configuration.historyLength"],
            ),
            (
                {"message": user_message(), "configuration": {"historyLength": 2**40}},
                ["configuration.historyLength"],
            ),
        ],
    )
    async def test_invalid_params_name_every_bad_field(
        self, client: httpx.AsyncClient, binding: str, params: JSON, violations: list[str]
    ) -> None:
        outcome = await call(client, binding, "SendMessage", params)

        _refused(outcome, binding, "INVALID_PARAMS")
        assert outcome.violations == violations

    async def test_a_body_that_is_not_an_object(self, client: httpx.AsyncClient, binding: str) -> None:
        outcome = await call(client, binding, "SendMessage", body=b"[1, 2]")

        expected = "INVALID_REQUEST" if binding == "jsonrpc" else "INVALID_PARAMS"  # no envelope on REST
        _refused(outcome, binding, expected)


@pytest.mark.parametrize("binding", BINDINGS)
async def test_a_message_to_a_terminal_task_is_unsupported(
    client: httpx.AsyncClient, store: TaskApplication, binding: str
) -> None:
    started = await call(client, binding, "SendMessage", {"message": user_message(), **IMMEDIATELY})
    task = started.result["task"]
    assert (await client.post(f"/a2a/rest/tasks/{task['id']}:cancel")).status_code == 200
    before = log_position(store)

    outcome = await call(client, binding, "SendMessage", {"message": user_message(taskId=task["id"])})

    _refused(outcome, binding, "UNSUPPORTED_OPERATION")
    assert log_position(store) == before


IMMEDIATELY: JSON = {"configuration": {"returnImmediately": True}}


@pytest.mark.parametrize("binding", BINDINGS)
class TestProtoJsonValues:
    """A whole-number double and a decimal string are the integer; the answer is what the integer gives."""

    @pytest.mark.parametrize(("value", "kept"), [(0, 0), (0.0, 0), ("0", 0), (1.0, 1), ("1", 1)])
    async def test_history_length_on_send(
        self, client: httpx.AsyncClient, binding: str, value: Any, kept: int
    ) -> None:
        configuration = {"returnImmediately": True, "historyLength": value}
        outcome = await call(
            client, binding, "SendMessage", {"message": user_message(), "configuration": configuration}
        )

        assert outcome.reason is None, outcome
        assert len(outcome.result["task"].get("history", [])) == kept

    @pytest.mark.parametrize(("value", "kept"), [(0.0, 0), ("0", 0), (1.0, 1), ("1", 1)])
    async def test_history_length_on_get(
        self, client: httpx.AsyncClient, binding: str, value: Any, kept: int
    ) -> None:
        task = (
            await call(client, binding, "SendMessage", {"message": user_message(), **IMMEDIATELY})
        ).result["task"]
        if binding == "rest" and isinstance(value, float):
            value = "0" if value == 0 else "1"  # a query string carries text

        outcome = await call(client, binding, "GetTask", {"id": task["id"], "historyLength": value})

        assert outcome.reason is None, outcome
        assert len(outcome.result.get("history", [])) == kept


@pytest.mark.parametrize("binding", BINDINGS)
async def test_an_escaped_surrogate_pair_is_text(client: httpx.AsyncClient, binding: str) -> None:
    emoji = {"text": "\N{GRINNING FACE}"}  # json.dumps escapes it as the pair "\ud83d\ude00"
    params = {"message": user_message(parts=[emoji]), **IMMEDIATELY}

    outcome = await call(client, binding, "SendMessage", params)

    assert outcome.reason is None, outcome
    assert outcome.result["task"]["history"][0]["parts"] == [emoji]
