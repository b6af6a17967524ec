"""Random junk never gets a 500, always gets a well-formed JSON-RPC error, and appends nothing."""

from __future__ import annotations

import json
from typing import Any
from uuid import uuid4

import httpx
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from store.log.application import TaskApplication
from tests.api.support import log_position

ENDPOINT = "/a2a/jsonrpc"
METHODS = [
    "SendMessage",
    "GetTask",
    "CancelTask",
    "SendStreamingMessage",
    "SubscribeToTask",
    "ListTasks",
    "GetExtendedAgentCard",
    "CreateTaskPushNotificationConfig",
    "message/send",
]

json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=12),
    lambda children: (
        st.lists(children, max_size=3) | st.dictionaries(st.text(max_size=8), children, max_size=3)
    ),
    max_leaves=12,
)

parts = st.lists(
    st.dictionaries(st.sampled_from(["text", "raw", "url", "data", "mediaType", "filename"]), json_values),
    max_size=3,
)

# A client message is never valid here: its role is never ROLE_USER, so SendMessage must refuse it.
messages = st.fixed_dictionaries(
    {"role": json_values | st.sampled_from(["ROLE_AGENT", "ROLE_UNSPECIFIED", "user", "agent"])},
    optional={
        "messageId": json_values,
        "parts": parts | json_values,
        "taskId": json_values,
        "contextId": json_values,
        "metadata": json_values,
    },
).filter(lambda message: message.get("role") != "ROLE_USER")

params = (
    json_values
    | st.fixed_dictionaries(
        {"message": messages},
        optional={"configuration": json_values, "tenant": json_values, "metadata": json_values},
    )
    | st.fixed_dictionaries(
        {"id": json_values}, optional={"historyLength": json_values, "tenant": json_values}
    )
)

envelopes = st.fixed_dictionaries(
    {},
    optional={
        "jsonrpc": st.sampled_from(["2.0", "1.0", 2]) | json_values,
        "id": json_values,
        "method": st.sampled_from(METHODS) | json_values,
        "params": params,
    },
).map(lambda document: json.dumps(document).encode())

bodies = st.binary(max_size=300) | json_values.map(lambda value: json.dumps(value).encode()) | envelopes
content_types = st.sampled_from(
    ["application/json", "application/a2a+json", "application/json; charset=utf-8", "text/plain", "", "x/y"]
)
versions = st.sampled_from([None, "1.0", "1.0.2", "", "0.3", "99.0", "banana"])


@settings(
    max_examples=300,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(body=bodies, content_type=content_types, version=versions)
async def test_junk_gets_a_jsonrpc_error_and_changes_nothing(
    client: httpx.AsyncClient, store: TaskApplication, body: bytes, content_type: str, version: str | None
) -> None:
    before = log_position(store)
    headers = {"Content-Type": content_type}
    client.headers.pop("A2A-Version", None)
    if version is not None:
        headers["A2A-Version"] = version

    response = await client.post(ENDPOINT, content=body, headers=headers)

    assert response.status_code in (200, 413), response.text
    answer: dict[str, Any] = response.json()
    assert set(answer) == {"jsonrpc", "id", "error"}, answer
    assert answer["jsonrpc"] == "2.0"
    error = answer["error"]
    assert set(error) == {"code", "message", "data"}, error
    assert isinstance(error["code"], int)
    assert error["code"] != -32603, error  # junk is the client's fault, never an internal error
    assert isinstance(error["message"], str)
    assert error["message"]
    assert error["data"][0]["@type"] == "type.googleapis.com/google.rpc.ErrorInfo"
    assert log_position(store) == before


REST_ROUTES = st.sampled_from(
    [
        ("POST", "/a2a/rest/message:send"),
        ("POST", "/a2a/rest/acme/message:send"),
        ("POST", "/a2a/rest/tasks/5a76c3b8-d2cc-5d9c-8ec0-fe5e8893c99a:cancel"),
        ("POST", "/a2a/rest/tasks/x/pushNotificationConfigs"),
        ("POST", "/a2a/rest/message:stream"),
        ("GET", "/a2a/rest/tasks/x"),
    ]
)
rest_bodies = (
    st.binary(max_size=300)
    | json_values.map(lambda value: json.dumps(value).encode())
    | params.map(lambda document: json.dumps(document).encode())
)


@settings(
    max_examples=200,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(route=REST_ROUTES, body=rest_bodies, content_type=content_types, version=versions)
async def test_junk_gets_a_status_error_on_http_json_and_changes_nothing(
    client: httpx.AsyncClient,
    store: TaskApplication,
    route: tuple[str, str],
    body: bytes,
    content_type: str,
    version: str | None,
) -> None:
    before = log_position(store)
    headers = {"Content-Type": content_type}
    client.headers.pop("A2A-Version", None)
    if version is not None:
        headers["A2A-Version"] = version
    method, path = route

    response = await client.request(method, path, content=body, headers=headers)

    assert 400 <= response.status_code < 500, response.text
    error = response.json()["error"]
    assert set(error) == {"code", "status", "message", "details"}, error
    assert error["code"] == response.status_code
    assert error["message"]
    assert error["details"][0]["@type"] == "type.googleapis.com/google.rpc.ErrorInfo"
    assert log_position(store) == before


# Any text, lone UTF-16 surrogates often among it (JSON can escape them; they are not Unicode text;
# st.text never makes them).
any_text = st.lists(st.characters() | st.sampled_from(["\ud800", "\udfff"]), max_size=6).map("".join)


@settings(
    max_examples=100,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(text=any_text, message_id=any_text, rest=st.booleans())
async def test_valid_messages_with_any_text_are_kept_or_refused_never_a_500(
    client: httpx.AsyncClient, store: TaskApplication, text: str, message_id: str, rest: bool
) -> None:
    before = log_position(store)  # each example a new task: an id seen before would be a resend
    params = {
        "message": {"messageId": uuid4().hex + message_id, "role": "ROLE_USER", "parts": [{"text": text}]},
        "configuration": {"returnImmediately": True},
    }
    if rest:
        response = await client.post("/a2a/rest/message:send", content=json.dumps(params).encode())
        answer: dict[str, Any] = response.json()
        assert response.status_code in (200, 400), answer
    else:
        body = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "SendMessage", "params": params}).encode()
        response = await client.post(ENDPOINT, content=body)
        answer = response.json()
        assert answer.get("error", {}).get("code") != -32603, answer
        answer = answer.get("result") or answer

    if "task" in answer:  # a pair of surrogates, escaped as two, is read as the one character it makes
        joined = text.encode("utf-16-le", "surrogatepass").decode("utf-16-le")
        assert answer["task"]["history"][0]["parts"] == [{"text": joined}]
    else:
        assert log_position(store) == before
