"""Overload gets an answer: past the in-flight limit a request is refused at once with 429."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import httpx
import pytest
from litestar import Litestar

from api.agent_card import JSONRPC_PATH
from api.early_answers import refusal_body
from api.errors import ResourceExhaustedError
from api.overload import LimitInFlight
from store.application import TaskApplication
from tests.api.support import Advance, error_of, http_client, log_position, task_id_for, user_message

LIMIT = 3


def _send(http: httpx.AsyncClient, message_id: str, *, block: bool = True) -> asyncio.Future[httpx.Response]:
    """A SendMessage; a blocking one is in flight until its task settles (no worker runs here)."""
    params = {
        "message": user_message(message_id=message_id),
        "configuration": {"returnImmediately": not block},
    }
    body = {"jsonrpc": "2.0", "id": message_id, "method": "SendMessage", "params": params}
    return asyncio.ensure_future(http.post("/a2a/jsonrpc", json=body))


async def test_a_saturated_gateway_answers_429_and_accepts_nothing(
    make_app: Callable[..., Litestar], store: TaskApplication, advance: Advance
) -> None:
    async with http_client(make_app(max_in_flight=LIMIT, blocking_timeout_s=30)) as http:
        held = [_send(http, f"held-{n}") for n in range(LIMIT)]
        for n in range(LIMIT):
            await advance.wait_exists(task_id_for(f"held-{n}"))
        before = log_position(store)

        refused = await asyncio.wait_for(_send(http, "refused"), timeout=5)
        card = await http.get("/.well-known/agent-card.json")
        metrics = await http.get("/metrics")

        assert refused.status_code == 429
        assert refused.headers["retry-after"] == "1"
        body = refused.json()
        assert body["jsonrpc"] == "2.0"
        assert body["id"] is None
        error = error_of(body, -32000, "RESOURCE_EXHAUSTED")
        assert "send it again" in error["message"]
        assert log_position(store) == before
        assert card.status_code == 200
        assert metrics.status_code == 200
        assert f"longhaul_gateway_in_flight {float(LIMIT)}" in metrics.text
        assert 'longhaul_gateway_refusals_total{reason="overloaded"} 1.0' in metrics.text
        assert not any(request.done() for request in held)

        for n in range(LIMIT):  # the held requests answer as their tasks end, freeing their slots
            await asyncio.to_thread(advance.complete, task_id_for(f"held-{n}"))
        answers = await asyncio.wait_for(asyncio.gather(*held), timeout=10)
        again = await asyncio.wait_for(_send(http, "refused", block=False), timeout=5)

    assert [answer.status_code for answer in answers] == [200] * LIMIT
    assert again.status_code == 200
    assert again.json()["result"]["task"]["id"] == str(task_id_for("refused"))


async def test_a_slot_is_freed_when_a_request_fails_without_an_answer() -> None:
    limit = LimitInFlight(1)

    async def broken(scope: object, receive: object, send: object) -> None:
        raise RuntimeError("no answer")

    scope = {"type": "http", "path": JSONRPC_PATH, "headers": []}
    with pytest.raises(RuntimeError):
        await limit.handle(scope, _nothing, _nothing, broken)  # type: ignore[arg-type]

    assert limit.in_flight == 0


async def _nothing(*_: object) -> None:
    return None


def test_off_the_jsonrpc_endpoint_the_refusal_is_a_google_rpc_status() -> None:
    body = refusal_body("/a2a/rest/tasks/x", ResourceExhaustedError("busy"))

    assert body == {
        "error": {
            "code": 429,
            "status": "RESOURCE_EXHAUSTED",
            "message": "busy",
            "details": [
                {
                    "@type": "type.googleapis.com/google.rpc.ErrorInfo",
                    "reason": "RESOURCE_EXHAUSTED",
                    "domain": "a2a-protocol.org",
                    "metadata": {},
                }
            ],
        }
    }


@pytest.mark.parametrize("limit", [0, -1])
def test_the_limit_is_at_least_one(limit: int) -> None:
    with pytest.raises(ValueError, match="at least 1"):
        LimitInFlight(limit)
