"""Overload gets an answer: past the in-flight limit a request is refused at once with 429."""

from __future__ import annotations

import asyncio
import math
import time
from collections.abc import Callable

import httpx
import pytest
from litestar import Litestar

from api.agent_card import JSONRPC_PATH
from api.early_answers import refusal_body
from api.errors import ResourceExhaustedError
from api.overload import INTERVAL_S, MIN_LIMIT, LimitInFlight
from store.log.application import TaskApplication
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


async def test_requests_that_waited_past_the_target_lower_the_limit_below_the_ceiling(
    make_app: Callable[..., Litestar], store: TaskApplication, advance: Advance
) -> None:
    ceiling, queued, target_s = 64, 20, 0.05
    async with http_client(
        make_app(max_in_flight=ceiling, overload_target_s=target_s, blocking_timeout_s=30)
    ) as http:
        started = time.monotonic()
        held = [_send(http, f"queued-{n}") for n in range(queued)]
        for n in range(queued):
            await advance.wait_exists(task_id_for(f"queued-{n}"))
        await asyncio.sleep(1.05)  # every one of them waits past the target, and past 1 s
        for n in range(queued):
            await asyncio.to_thread(advance.complete, task_id_for(f"queued-{n}"))
        await asyncio.wait_for(asyncio.gather(*held), timeout=10)
        waited_s = time.monotonic() - started
        await asyncio.sleep(2 * INTERVAL_S)  # the interval of their answers ends

        again = [_send(http, f"again-{n}") for n in range(MIN_LIMIT)]  # the new limit's worth
        for n in range(MIN_LIMIT):
            await advance.wait_exists(task_id_for(f"again-{n}"))
        before = log_position(store)
        refused = await asyncio.wait_for(_send(http, "one-more", block=False), timeout=5)
        after = log_position(store)
        metrics = (await http.get("/metrics")).text
        for n in range(MIN_LIMIT):
            await asyncio.to_thread(advance.complete, task_id_for(f"again-{n}"))
        await asyncio.wait_for(asyncio.gather(*again), timeout=10)

    assert refused.status_code == 429  # with 16 in flight, of a ceiling of 64
    assert 2 <= int(refused.headers["retry-after"]) <= math.ceil(waited_s)  # they took over 1 s
    assert after == before
    assert f"longhaul_gateway_in_flight_limit {float(MIN_LIMIT)}" in metrics
    assert f"longhaul_gateway_in_flight {float(MIN_LIMIT)}" in metrics
    assert 'longhaul_gateway_refusals_total{reason="overloaded"} 1.0' in metrics


async def test_a_target_of_zero_keeps_the_limit_at_the_ceiling(
    make_app: Callable[..., Litestar], advance: Advance
) -> None:
    async with http_client(make_app(max_in_flight=LIMIT, overload_target_s=0, blocking_timeout_s=30)) as http:
        held = [_send(http, f"slow-{n}") for n in range(LIMIT)]
        for n in range(LIMIT):
            await advance.wait_exists(task_id_for(f"slow-{n}"))
        await asyncio.sleep(0.2)
        for n in range(LIMIT):
            await asyncio.to_thread(advance.complete, task_id_for(f"slow-{n}"))
        await asyncio.wait_for(asyncio.gather(*held), timeout=10)
        await asyncio.sleep(2 * INTERVAL_S)
        metrics = (await http.get("/metrics")).text

    assert f"longhaul_gateway_in_flight_limit {float(LIMIT)}" in metrics
