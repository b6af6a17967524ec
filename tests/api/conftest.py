"""Fixtures for the gateway tests: the app over the shared ``store`` fixture, a movable clock."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from datetime import timedelta
from typing import Any

import httpx
import pytest
import pytest_asyncio
from litestar import Litestar

from api.app import create_app
from store.application import TaskApplication
from tests.api.support import A2A_HEADERS, PUBLIC_URL, Advance, FakeClock, Rpc, http_client, make_registry

JSON = dict[str, Any]


@pytest.fixture
def clock() -> FakeClock:
    """The gateway's clock."""
    return FakeClock()


@pytest.fixture
def make_app(store: TaskApplication, clock: FakeClock) -> Callable[..., Litestar]:
    """Build the app over the test store; keyword arguments override ``create_app``'s."""

    def build(**overrides: Any) -> Litestar:
        arguments: JSON = {
            "store": store,
            "registry": make_registry(),
            "clock": clock,
            "default_skill": "echo",
            "max_pause": timedelta(days=7),
            "public_url": PUBLIC_URL,
            "blocking_timeout_s": 10.0,
        }
        arguments.update(overrides)
        return create_app(**arguments)

    return build


@pytest_asyncio.fixture
async def client(make_app: Callable[..., Litestar]) -> AsyncIterator[httpx.AsyncClient]:
    """An HTTP client talking to the app in this event loop."""
    async with http_client(make_app()) as http:
        yield http


@pytest.fixture
def rpc(client: httpx.AsyncClient) -> Rpc:
    """Call one JSON-RPC method and return the decoded response (asserting HTTP 200)."""

    async def call(
        method: str, params: Any = None, *, request_id: Any = 1, headers: JSON | None = None
    ) -> JSON:
        body: JSON = {"jsonrpc": "2.0", "id": request_id, "method": method}
        if params is not None:
            body["params"] = params
        response = await client.post("/a2a/jsonrpc", json=body, headers=headers or A2A_HEADERS)
        assert response.status_code == 200, response.text
        decoded: JSON = response.json()
        return decoded

    return call


@pytest.fixture
def advance(store: TaskApplication, clock: FakeClock) -> Advance:
    """The stand-in worker."""
    return Advance(store, clock)
