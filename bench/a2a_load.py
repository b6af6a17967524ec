"""The load client of the request-path part: A2A JSON-RPC requests on keep-alive httpx connections.

One round (``run_round``) is ``c`` concurrent callers for a number of seconds, after a few warm-up
requests on each connection, with the CPU spent over the timed part (``bench.process_cpu``). A
429 is a refusal the caller waits out (``Retry-After``) and sends again, as an A2A client does;
any other failure is counted in ``Round.errors``.
"""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from contextlib import AsyncExitStack
from dataclasses import dataclass, field
from typing import Any

import httpx
import psycopg
from psycopg.rows import TupleRow

from bench.process_cpu import read, spent

TERMINAL = {"TASK_STATE_COMPLETED", "TASK_STATE_FAILED", "TASK_STATE_CANCELED", "TASK_STATE_REJECTED"}
HEADERS = {"A2A-Version": "1.0"}
STREAM_HEADERS = {**HEADERS, "Accept": "text/event-stream"}
WARM_REQUESTS = 5

CALL_TIMEOUT_S = 120.0
"""A bound on one call, connection included: a call stuck past it is counted as an error
(``TimeoutError``) instead of holding its round forever (httpx's own timeouts do not cover a
connection that is open and idle)."""


class RefusedError(Exception):
    """The server answered 429: nothing was accepted, send again after ``retry_after`` seconds
    (its ``Retry-After``; 1 s when it has none)."""

    def __init__(self, response: httpx.Response) -> None:
        try:
            self.retry_after = max(0.0, float(response.headers.get("retry-after", "1")))
        except ValueError:
            self.retry_after = 1.0
        super().__init__(f"429, Retry-After {self.retry_after} s")


@dataclass
class Round:
    """One (server, mode, c) round: latencies in seconds, and its throughput."""

    seconds: list[float] = field(default_factory=list)  # request, or time to the last event
    first: list[float] = field(default_factory=list)  # stream: time to the first event
    to_success: list[float] = field(default_factory=list)  # first try to success, refusals included
    errors: int = 0
    error_kinds: dict[str, int] = field(default_factory=dict)  # errors by exception type
    error_samples: dict[str, str] = field(default_factory=dict)  # the first error of each type
    refused: int = 0  # 429 answers (each try; the request is sent again after Retry-After)
    per_s: float = 0.0  # completed requests per second
    cpu: dict[str, float | None] = field(default_factory=dict)  # bench.process_cpu.spent, timed window


def body(method: str, *, immediately: bool = False) -> dict[str, Any]:
    message = {
        "messageId": str(uuid.uuid4()),
        "role": "ROLE_USER",
        "parts": [{"text": "ping"}],
        "metadata": {"skill": "echo"},
    }
    params: dict[str, Any] = {"message": message}
    if immediately:
        params["configuration"] = {"returnImmediately": True}
    return {"jsonrpc": "2.0", "id": 1, "method": method, "params": params}


async def send(http: httpx.AsyncClient, *, immediately: bool) -> float:
    started = time.perf_counter()
    response = await http.post(
        "/a2a/jsonrpc", json=body("SendMessage", immediately=immediately), headers=HEADERS
    )
    elapsed = time.perf_counter() - started
    if response.status_code == 429:
        raise RefusedError(response)
    answer = response.json()
    task = answer.get("result", {}).get("task")
    if task is None:
        raise RuntimeError(f"no task: {response.text[:300]}")
    if not immediately and task["status"]["state"] not in TERMINAL:
        raise RuntimeError(f"blocking send answered {task['status']['state']}")
    return elapsed


async def stream(http: httpx.AsyncClient, *, first_only: bool) -> tuple[float, float]:
    """Time to the first SSE event and to the terminal one (``first_only``: the first, twice)."""
    started = time.perf_counter()
    first = last = None
    request = body("SendStreamingMessage")
    async with http.stream("POST", "/a2a/jsonrpc", json=request, headers=STREAM_HEADERS) as response:
        if response.status_code == 429:
            await response.aread()
            raise RefusedError(response)
        if not response.headers.get("content-type", "").startswith("text/event-stream"):
            text = (await response.aread()).decode(errors="replace")
            raise RuntimeError(f"no stream: {text[:300]}")  # e.g. PostgreSQL out of connections
        async for line in response.aiter_lines():
            if not line.startswith("data:"):
                continue
            now = time.perf_counter() - started
            first = now if first is None else first
            if first_only:
                return first, first
            result = json.loads(line[5:]).get("result", {})
            update = result.get("statusUpdate") or result.get("task") or {}
            if update.get("status", {}).get("state") in TERMINAL:
                last = now
    if first is None or last is None:
        raise RuntimeError("the stream closed before a terminal event")
    return first, last


async def one_call(http: httpx.AsyncClient, mode: str, sample: Round, *, first_only: bool) -> None:
    if mode == "stream":
        first, last = await stream(http, first_only=first_only)
        sample.first.append(first)
        sample.seconds.append(last)
    else:
        sample.seconds.append(await send(http, immediately=mode == "immediately"))


async def run_round(
    base_url: str,
    server_pid: int,
    monitor: psycopg.Connection[TupleRow],
    mode: str,
    clients: int,
    seconds: float,
    *,
    first_only: bool,
) -> Round:
    """``clients`` concurrent callers for ``seconds`` on the server at ``base_url`` (process id
    ``server_pid``), after a few warm-up requests per connection.

    Each caller has its own ``httpx.AsyncClient`` of one keep-alive connection (one pool shared
    by many callers costs O(callers) per request in the client). ``Round.cpu`` is the CPU spent
    over the timed part (``bench.process_cpu``): the server process's (and its children's), its
    own PostgreSQL backends' (found through ``monitor``), the machine's PostgreSQL's, this
    client's and the machine's. ``first_only``: a stream is read to its first event only.
    """
    sample = Round()
    async with AsyncExitStack() as stack:
        one = httpx.Limits(max_connections=1, max_keepalive_connections=1)
        https = [
            await stack.enter_async_context(httpx.AsyncClient(base_url=base_url, timeout=60.0, limits=one))
            for _ in range(clients)
        ]

        async def caller(http: httpx.AsyncClient, into: Round, deadline: float, at_least: int = 0) -> None:
            done = 0
            while done < at_least or time.perf_counter() < deadline:
                done += 1
                first_try = time.perf_counter()
                while True:
                    try:
                        async with asyncio.timeout(CALL_TIMEOUT_S):
                            await one_call(http, mode, into, first_only=first_only)
                    except RefusedError as refused:  # what an A2A client does: wait, send it again
                        into.refused += 1
                        if done > at_least and time.perf_counter() + refused.retry_after >= deadline:
                            return  # the round ends before the wait does
                        await asyncio.sleep(refused.retry_after)
                        continue
                    except Exception as error:  # noqa: BLE001 - counted; a failing server is reported, not fatal
                        into.errors += 1
                        kind = type(error).__name__
                        into.error_kinds[kind] = into.error_kinds.get(kind, 0) + 1
                        into.error_samples.setdefault(kind, str(error)[:200])
                    else:
                        into.to_success.append(time.perf_counter() - first_try)
                    break

        await asyncio.gather(*(caller(http, Round(), 0.0, WARM_REQUESTS) for http in https))  # warm up
        before = read(server_pid, monitor)
        started = time.perf_counter()
        await asyncio.gather(*(caller(http, sample, started + seconds) for http in https))
        sample.per_s = len(sample.seconds) / (time.perf_counter() - started)
        sample.cpu = spent(before, read(server_pid, monitor))
    return sample
