"""Fixtures for the gateway tests: the app over a ``store``, a movable clock.

The gateway's tests run on the real application over the in-memory recorder (the recorder
contract, ``tests/store/test_recorder_contract.py``, holds it equal to PostgreSQL's), so that
validation, fuzzing and the use cases need no database. A test marked ``postgres`` gets the
store on this test's PostgreSQL schema instead: races and loads where PostgreSQL itself matters.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Iterator
from typing import Any

import httpx
import pytest
import pytest_asyncio
from litestar import Litestar

from store.log import MemoryConfig, TaskApplication
from tests.api.support import A2A_HEADERS, Advance, FakeClock, Rpc, gateway_app, http_client

JSON = dict[str, Any]


@pytest.fixture
def store(request: pytest.FixtureRequest) -> Iterator[TaskApplication]:
    """The application in memory; on this test's PostgreSQL schema for tests marked ``postgres``."""
    if request.node.get_closest_marker("postgres") is not None:
        yield request.getfixturevalue("postgres_store")
        return
    application = TaskApplication(MemoryConfig())
    yield application
    application.close()


@pytest.fixture
def clock() -> FakeClock:
    """The gateway's clock."""
    return FakeClock()


@pytest.fixture
def make_app(store: TaskApplication, clock: FakeClock) -> Callable[..., Litestar]:
    """Build the app over the test store; keyword arguments override ``GatewayConfig``'s."""

    def build(**overrides: Any) -> Litestar:
        return gateway_app(store, clock, **overrides)

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
