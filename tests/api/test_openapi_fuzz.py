"""Schemathesis over the gateway's own OpenAPI: the HTTP+JSON routes and audit reads never answer 5xx.

The cases come from the document the app serves at ``/schema/openapi.json`` (Litestar's, with
the binding's bodies and query parameters from the wire models: ``api.rest.described``),
both fitting it (positive) and not (negative). A refused request appends nothing; every
refusal is a ``google.rpc.Status`` body.
"""

from __future__ import annotations

import functools
import json
from collections.abc import AsyncIterator, Callable
from datetime import timedelta
from typing import Any

import httpx
import pytest_asyncio
import schemathesis
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from litestar import Litestar
from schemathesis.core import NOT_SET
from schemathesis.core.result import Ok
from schemathesis.generation.modes import GenerationMode

from api.app import create_app
from api.config import GatewayConfig
from api.rest import described
from store.log.application import TaskApplication
from store.log.config import MemoryConfig
from tests.api.support import PUBLIC_URL, FakeClock, http_client, log_position, make_registry

JSON = dict[str, Any]
REST = "/a2a/rest/"
AUDIT = "/audit/v1/"
FUZZED = (REST, AUDIT)
"""The HTTP+JSON binding's 24 operations and the 6 audit reads."""
BASE_URL = "http://gateway.test"


@functools.cache
def openapi_document() -> JSON:
    """The OpenAPI document a gateway serves (it does not depend on the store)."""
    application = TaskApplication(MemoryConfig())
    app = create_app(
        GatewayConfig(
            store=application,
            registry=make_registry(),
            clock=FakeClock(),
            default_skill="echo",
            max_pause=timedelta(days=7),
            retention=timedelta(days=30),
            public_url=PUBLIC_URL,
        )
    )
    document = described(app.openapi_schema.to_schema())
    application.close()
    return document


def _cases() -> st.SearchStrategy[Any]:
    schema = schemathesis.openapi.from_dict(openapi_document())
    operations = []
    for result in schema.get_all_operations():
        assert isinstance(result, Ok), result  # every operation of the document loads
        operations.append(result.ok())
    rest = [operation for operation in operations if operation.path.startswith(FUZZED)]
    assert len(rest) == 30, [operation.path for operation in rest]
    modes = (GenerationMode.POSITIVE, GenerationMode.NEGATIVE)
    return st.one_of([operation.as_strategy(mode) for operation in rest for mode in modes])


cases = st.deferred(_cases)


@pytest_asyncio.fixture
async def quick_client(make_app: Callable[..., Litestar]) -> AsyncIterator[httpx.AsyncClient]:
    """A client of a gateway whose blocking sends answer at once (no worker runs here).

    Push URLs are not resolved (``allow_private_webhooks``): a DNS lookup of every generated host
    would be most of the test's time; the SSRF guard has tests of its own.
    """
    async with http_client(make_app(blocking_timeout_s=0.0, allow_private_webhooks=True)) as http:
        yield http


@settings(
    max_examples=300,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(case=cases)
async def test_no_route_answers_5xx_and_refusals_append_nothing(
    quick_client: httpx.AsyncClient, store: TaskApplication, case: Any
) -> None:
    before = log_position(store)
    request = case.as_transport_kwargs(base_url=BASE_URL)  # schemathesis serialises the case
    headers = {k: v for k, v in request["headers"].items() if k.lower() != "connection"}
    body = request.get("json", NOT_SET)
    content = json.dumps(body).encode() if body is not NOT_SET else request.get("data")

    response = await quick_client.request(
        request["method"], request["url"], params=request["params"], headers=headers, content=content
    )

    assert response.status_code < 500, (case.method, case.formatted_path, response.text)
    if response.status_code >= 400:
        assert log_position(store) == before, (case.method, case.formatted_path, response.text)
        error = response.json()["error"]
        assert error["code"] == response.status_code
        assert error["details"][0]["@type"] == "type.googleapis.com/google.rpc.ErrorInfo"


async def test_every_documented_route_is_served(client: httpx.AsyncClient) -> None:
    """Each path and method of the document reaches a handler: never Litestar's 404 or 405."""
    document = (await client.get("/schema/openapi.json")).json()
    assert document == openapi_document()
    served = 0
    for path, item in document["paths"].items():
        if not path.startswith(FUZZED):
            continue
        concrete = path.replace("{tenant}", "acme").replace("{task_id}", "t").replace("{config_id}", "c")
        for method in item:
            response = await client.request(method.upper(), concrete, json={})
            reason = response.json()["error"]["details"][0]["reason"]
            assert reason != "METHOD_NOT_FOUND", (method, path)
            served += 1
    assert served == 30
