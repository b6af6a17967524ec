"""The request path beside the a2a-sdk server: one keep-alive load client, rounds interleaved.

Servers (``bench.a2a_servers``), each its own process: ``longhaul up``, ``longhaul gateway``
alone (the durable answer: the request path and its commit), the a2a-sdk server with its
in-memory store and with its PostgreSQL store. Modes, all JSON-RPC with the same bodies:
``blocking`` (``SendMessage``, waits for the completed task), ``immediately`` (``SendMessage``
with ``returnImmediately``) and ``stream`` (``SendStreamingMessage``: time to the first SSE event
and to the terminal one). ``c`` callers run for a few seconds each round (``run_round``, after a
few warm-up requests), each on its own keep-alive connection (the SDK's clients are httpx, as this
one). Every round visits every (mode, c, server), every other round in the reverse server order;
the figures are the median over rounds of requests/s and the percentiles over all rounds' requests.

A 429 (the overload answer) is what a real A2A client sees it as: not an error but a refusal,
counted in ``refused``; the caller waits its ``Retry-After`` and sends the request again. Any
other failure is counted in ``errors``.
``listen_overflows`` is the kernel's ``TcpExtListenOverflows`` (the whole machine) over the run.

CPU over each round's timed window (``bench.process_cpu``), per completed request: the server's
process and its children's (``cpu_ms_per_request``), the PostgreSQL backends serving its
connections (``server_postgres_cpu_ms_per_request``, a lower bound when backends end inside the
window), the machine's whole PostgreSQL and the load client's. Before each round the servers
are let settle (under 0.1 of a core each), so that the work one server's round left behind does
not run in the next one's window.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import statistics
import tempfile
import time
import uuid
from collections import Counter
from contextlib import AsyncExitStack
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import psycopg
from psycopg.rows import TupleRow

from bench.a2a_servers import ANSWER_MODES, ANSWER_ONLY, SERVERS, servers
from bench.common import Options, percentile, table
from bench.process_cpu import read, settle, spent

MODES = ("blocking", "immediately", "stream")
WORKER_CONCURRENCY = 16
TERMINAL = {"TASK_STATE_COMPLETED", "TASK_STATE_FAILED", "TASK_STATE_CANCELED", "TASK_STATE_REJECTED"}
HEADERS = {"A2A-Version": "1.0"}
STREAM_HEADERS = {**HEADERS, "Accept": "text/event-stream"}
WARM_REQUESTS = 5

CALL_TIMEOUT_S = 120.0
"""A bound on one call, connection included: a call stuck past it is counted as an error
(``TimeoutError``) instead of holding its round forever (httpx's own timeouts do not cover a
connection that is open and idle)."""


def listen_overflows() -> int | None:
    """The kernel's ``TcpExtListenOverflows`` (connections a full listen queue dropped), or None."""
    try:
        lines = Path("/proc/net/netstat").read_text().splitlines()
    except OSError:
        return None
    for names, values in zip(lines[::2], lines[1::2], strict=False):
        if names.startswith("TcpExt:"):
            counters = dict(zip(names.split()[1:], values.split()[1:], strict=False))
            return int(counters["ListenOverflows"]) if "ListenOverflows" in counters else None
    return None


def visits(name: str, mode: str, c: int) -> bool:
    """Whether a round runs ``name`` in ``mode`` at ``c``: the durable answer alone is measured
    where its targets are (c=1, returnImmediately and a stream's first event)."""
    return name != ANSWER_ONLY or (mode in ANSWER_MODES and c == 1)


def run(options: Options) -> dict[str, Any]:
    """Start the servers, run every round, print the table: the results."""
    # rounds, seconds per round, and the client counts
    rounds, seconds, concurrency = (1, 2.0, [1, 16, 128]) if options.quick else (3, 5.0, [1, 16, 64, 128])
    folder = Path(tempfile.mkdtemp(prefix="bench-a2a-"))
    samples: dict[str, dict[str, list[Round]]] = {}
    overflows_before = listen_overflows()
    with (
        psycopg.connect(options.database_url, autocommit=True) as monitor,
        servers(list(SERVERS), options, folder, worker_concurrency=WORKER_CONCURRENCY) as urls,
    ):
        pids = [pid for _, pid in urls.values()]
        for number, mode, c in itertools.product(range(rounds), MODES, concurrency):
            # every other round in the reverse order, so that no server always runs right after the
            # same one (whose background work may still run)
            for name, (url, pid) in reversed(urls.items()) if number % 2 else urls.items():
                if not visits(name, mode, c):
                    continue
                settle(pids, most_s=10.0)
                sample = asyncio.run(
                    run_round(url, pid, monitor, mode, c, seconds, first_only=name == ANSWER_ONLY)
                )
                samples.setdefault(f"{mode}@c={c}", {}).setdefault(name, []).append(sample)
                print(
                    f"round {number + 1} {mode:>11} c={c:<3} {name:<15} {sample.per_s:8.1f}/s"
                    f"  refused {sample.refused:<5} errors {sample.errors}",
                    flush=True,
                )
    overflows_after = listen_overflows()
    results = {
        key: {name: summarise(server_rounds) for name, server_rounds in by_server.items()}
        for key, by_server in samples.items()
    }
    print()
    print(table(["mode", "server", *COLUMNS], rows_of(results)))
    return {
        "rounds": rounds,
        "seconds_per_round": seconds,
        "concurrency": concurrency,
        "worker_concurrency": WORKER_CONCURRENCY,
        "listen_overflows": None
        if overflows_before is None or overflows_after is None
        else overflows_after - overflows_before,
        "results": results,
        "logs": str(folder),
    }


# ----------------------------------------------------------------------------- the load client


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


# ----------------------------------------------------------------------------- the figures


def summarise(rounds: list[Round]) -> dict[str, Any]:
    """One server's rounds summed up: req/s medians, percentiles over every round's requests
    (``p50_ms``, ``to_success_p50_ms``, ``first_p50_ms`` for a stream...), errors, refusals, CPU
    (``cpu_summary``)."""
    summary: dict[str, Any] = {
        "per_s_median": round(statistics.median(r.per_s for r in rounds), 1),
        "per_s_rounds": [round(r.per_s, 1) for r in rounds],
        "n": sum(len(r.seconds) for r in rounds),
        "errors": sum(r.errors for r in rounds),
        "error_kinds": dict(sum((Counter(r.error_kinds) for r in rounds), Counter())),
        "error_samples": {k: v for r in rounds for k, v in r.error_samples.items()},
        "refused": sum(r.refused for r in rounds),
    }
    for prefix, times in (("", "seconds"), ("to_success_", "to_success"), ("first_", "first")):
        values = [s for r in rounds for s in getattr(r, times)]
        if values or times != "first":
            summary |= {f"{prefix}p{q}_ms": round(1000 * percentile(values, q / 100), 2) for q in (50, 99)}
    return summary | cpu_summary(rounds)


CPU_KEYS = {
    "server": ("cpu_ms_per_request", "server_cores"),
    "server_postgres": ("server_postgres_cpu_ms_per_request", "server_postgres_cores"),
    "postgres": ("postgres_cpu_ms_per_request", "postgres_cores"),
    "client": ("client_cpu_ms_per_request", "client_cores"),
}
"""``Round.cpu``'s keys and the summary's keys for each: CPU ms per request, cores busy."""


def cpu_summary(rounds: list[Round]) -> dict[str, Any]:
    """CPU ms per completed request and cores busy over the rounds' timed windows (module doc).

    Empty when no round measured CPU; a figure is None when a round could not read it (no
    ``postgres`` process visible; the server's own backends not read). ``server_postgres_ended``:
    the server's backends that ended inside a window (their CPU there is not in
    ``server_postgres_*``, only in the whole machine's ``postgres_*``), over all the rounds.
    """
    measured = [r for r in rounds if r.cpu]
    answered = sum(len(r.seconds) for r in measured)
    wall = sum(r.cpu["seconds"] or 0.0 for r in measured)
    if not measured or not answered or not wall:
        return {}
    summary: dict[str, Any] = {"cpu_window_seconds": round(wall, 2)}
    for key, (per_request, cores) in CPU_KEYS.items():
        values = [r.cpu.get(key) for r in measured]
        total = None if any(v is None for v in values) else sum(v or 0.0 for v in values)
        summary[per_request] = None if total is None else round(1000 * total / answered, 2)
        summary[cores] = None if total is None else round(total / wall, 2)
    summary["machine_busy_cores"] = round(sum(r.cpu["machine"] or 0.0 for r in measured) / wall, 2)
    if summary["server_postgres_cpu_ms_per_request"] is not None:
        summary["server_postgres_ended"] = int(sum(r.cpu.get("server_postgres_ended") or 0 for r in measured))
    return summary


COLUMNS = {
    "req/s": "per_s_median",
    "p50 ms": "p50_ms",
    "p99 ms": "p99_ms",
    "first p50 ms": "first_p50_ms",
    "errors": "errors",
    "refused": "refused",
    "CPU ms/req": "cpu_ms_per_request",
    "its PG ms/req": "server_postgres_cpu_ms_per_request",
}
"""The printed table's figures: each column's header and the summary's key it shows."""


def rows_of(results: dict[str, dict[str, dict[str, Any]]]) -> list[list[Any]]:
    """The printed table's rows: one per (mode, c, server); a figure a summary lacks shows as ``-``."""
    return [
        [key.replace("@c=", " c="), name, *(summary.get(column) for column in COLUMNS.values())]
        for key, by_server in results.items()
        for name, summary in by_server.items()
    ]
