"""longhaul beside the ``a2a-sdk`` 1.3 server: one keep-alive load client, one run, interleaved.

Servers, each its own process:

- ``longhaul``: ``longhaul up`` on the machine's PostgreSQL (a fresh schema) and NATS, echo skill;
- ``sdk-memory``: ``bench.a2a_sdk_server`` with the SDK's ``InMemoryTaskStore``;
- ``sdk-postgres``: the same with the SDK's ``DatabaseTaskStore`` (asyncpg) in a fresh schema.

Modes, all JSON-RPC with the same bodies: ``blocking`` (``SendMessage``, waits for the completed
task), ``immediately`` (``SendMessage`` with ``returnImmediately``) and ``stream``
(``SendStreamingMessage``: time to the first SSE event and to the terminal one). ``c`` clients run
for ``--seconds`` each round, each on its own keep-alive connection of one ``httpx.AsyncClient``
(the SDK's clients are httpx). Every round visits every (mode, c, server), every other round in
the reverse server order (``--fixed-order``: always the same); the table gives the
median over rounds of requests/s and the percentiles over all rounds' requests, and each longhaul
figure's ratio to the SDK's. A server that answers ``SendStreamingMessage`` with no SSE stream
(longhaul before its streams) is reported as such for that mode; any other failed request
is counted in ``errors`` (the machine's PostgreSQL is shared and may run out of connections).

    uv run python -m bench.a2a_compare [--quick] [--rounds 3 --seconds 5] [--concurrency 1 16 64 128]
        [--servers longhaul sdk-memory sdk-postgres] [--modes blocking immediately stream]
        [--baseline-tree /path/to/another/checkout]   # adds longhaul-base: the same run, A/B
"""

from __future__ import annotations

import asyncio
import json
import os
import statistics
import subprocess
import tempfile
import time
import uuid
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from bench.common import (
    REPO_ROOT,
    base_parser,
    delete_stream,
    free_port,
    fresh_schema,
    machine_info,
    percentile,
    table,
    write_results,
)
from bench.keepalive import start_gateway
from bench.processes import worker_env

SERVERS = ("longhaul", "sdk-memory", "sdk-postgres")
MODES = ("blocking", "immediately", "stream")
TERMINAL = {"TASK_STATE_COMPLETED", "TASK_STATE_FAILED", "TASK_STATE_CANCELED", "TASK_STATE_REJECTED"}
HEADERS = {"A2A-Version": "1.0"}
STREAM_HEADERS = {**HEADERS, "Accept": "text/event-stream"}
WARM_REQUESTS = 5


UNSUPPORTED_OPERATION = -32004


class NoStreamError(Exception):
    """The server refused ``SendStreamingMessage`` as an unsupported operation (no SSE stream)."""


@dataclass
class Round:
    """One (server, mode, c) round: latencies in seconds, and its throughput."""

    seconds: list[float] = field(default_factory=list)  # request, or time to the last event
    first: list[float] = field(default_factory=list)  # stream: time to the first event
    errors: int = 0
    per_s: float = 0.0


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
    answer = response.json()
    task = answer.get("result", {}).get("task")
    if task is None:
        raise RuntimeError(f"no task: {response.text[:300]}")
    if not immediately and task["status"]["state"] not in TERMINAL:
        raise RuntimeError(f"blocking send answered {task['status']['state']}")
    return elapsed


async def stream(http: httpx.AsyncClient) -> tuple[float, float]:
    """Time to the first SSE event and to the terminal one."""
    started = time.perf_counter()
    first = last = None
    request = body("SendStreamingMessage")
    async with http.stream("POST", "/a2a/jsonrpc", json=request, headers=STREAM_HEADERS) as response:
        if not response.headers.get("content-type", "").startswith("text/event-stream"):
            text = (await response.aread()).decode(errors="replace")
            if json.loads(text).get("error", {}).get("code") == UNSUPPORTED_OPERATION:
                raise NoStreamError(text[:300])
            raise RuntimeError(f"no stream: {text[:300]}")  # e.g. PostgreSQL out of connections
        async for line in response.aiter_lines():
            if not line.startswith("data:"):
                continue
            now = time.perf_counter() - started
            first = now if first is None else first
            result = json.loads(line[5:]).get("result", {})
            update = result.get("statusUpdate") or result.get("task") or {}
            if update.get("status", {}).get("state") in TERMINAL:
                last = now
    if first is None or last is None:
        raise RuntimeError("the stream closed before a terminal event")
    return first, last


async def one_call(http: httpx.AsyncClient, mode: str, sample: Round) -> None:
    if mode == "stream":
        first, last = await stream(http)
        sample.first.append(first)
        sample.seconds.append(last)
    else:
        sample.seconds.append(await send(http, immediately=mode == "immediately"))


async def run_round(base_url: str, mode: str, clients: int, seconds: float) -> Round:
    """``clients`` concurrent callers for ``seconds``, after a few warm-up requests per connection."""
    limits = httpx.Limits(max_connections=clients, max_keepalive_connections=clients)
    sample = Round()
    async with httpx.AsyncClient(base_url=base_url, timeout=60.0, limits=limits) as http:

        async def caller(into: Round, deadline: float, at_least: int = 0) -> None:
            done = 0
            while done < at_least or time.perf_counter() < deadline:
                done += 1
                try:
                    await one_call(http, mode, into)
                except NoStreamError:
                    raise
                except Exception:  # noqa: BLE001 - counted; a server that fails is reported, not fatal
                    into.errors += 1

        await asyncio.gather(*(caller(Round(), 0.0, WARM_REQUESTS) for _ in range(clients)))  # warm up
        started = time.perf_counter()
        await asyncio.gather(*(caller(sample, started + seconds) for _ in range(clients)))
        sample.per_s = len(sample.seconds) / (time.perf_counter() - started)
    return sample


@contextmanager
def servers(
    names: list[str],
    database_url: str,
    folder: Path,
    worker_concurrency: int,
    baseline_tree: Path | None = None,
) -> Iterator[dict[str, str]]:
    """Start the servers named; yields their base URLs; stops them and drops their schemas.

    ``longhaul-base`` is ``longhaul up`` run from ``baseline_tree`` (another checkout), for an
    interleaved A/B of two longhaul versions in the same run.
    """
    with ExitStack() as stack:
        urls: dict[str, str] = {}
        for name in names:
            port = free_port()
            env = {k: v for k, v in os.environ.items() if not k.startswith("LONGHAUL_")}
            tree = baseline_tree if name == "longhaul-base" and baseline_tree is not None else REPO_ROOT
            if name in {"longhaul", "longhaul-base"}:
                schema = stack.enter_context(fresh_schema(database_url, "compare"))
                env = worker_env(database_url, schema, concurrency=worker_concurrency, lease_seconds=30)
                env["LONGHAUL_NATS_URL"] = os.environ.get("LONGHAUL_NATS_URL", "nats://127.0.0.1:4222")
                env["LONGHAUL_NATS_STREAM"] = f"BENCH_{schema}"
                stack.callback(delete_stream, env["LONGHAUL_NATS_URL"], env["LONGHAUL_NATS_STREAM"])
                env["LONGHAUL_NATS_SUBJECT_PREFIX"] = f"bench{schema}"
                env["LONGHAUL_DATA_DIR"] = str(folder / name)
                module = ["longhaul.cli", "up"]
            else:
                store = name.removeprefix("sdk-")
                module = ["bench.a2a_sdk_server", "--port", str(port), "--store", store]
                if store == "postgres":
                    schema = stack.enter_context(fresh_schema(database_url, "sdk"))
                    module += ["--database-url", database_url, "--schema", schema]
            stack.callback(stop, start_gateway(module, env, port, folder / f"{name}.log", tree=tree))
            urls[name] = f"http://127.0.0.1:{port}"
        yield urls


def round_order(urls: dict[str, str], number: int, *, fixed: bool = False) -> list[tuple[str, str]]:
    """The servers in the order round ``number`` (from 0) visits them: interleaved, every round
    visits each server, and every other round in the reverse order, so that no server always runs
    right after the same one (whose background work may still be running on the same cores)."""
    order = list(urls.items())
    return order[::-1] if number % 2 and not fixed else order


def stop(process: subprocess.Popen[bytes]) -> None:
    process.terminate()
    try:
        process.wait(30)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait(10)


def ms(seconds: list[float], q: float) -> float:
    return round(1000 * percentile(seconds, q), 2)


def summarise(rounds: list[Round]) -> dict[str, Any]:
    seconds = [s for r in rounds for s in r.seconds]
    first = [s for r in rounds for s in r.first]
    summary: dict[str, Any] = {
        "per_s_median": round(statistics.median(r.per_s for r in rounds), 1),
        "per_s_rounds": [round(r.per_s, 1) for r in rounds],
        "n": len(seconds),
        "errors": sum(r.errors for r in rounds),
        "p50_ms": ms(seconds, 0.5),
        "p99_ms": ms(seconds, 0.99),
    }
    if first:
        summary |= {"first_p50_ms": ms(first, 0.5), "first_p99_ms": ms(first, 0.99)}
    return summary


def rows_of(results: dict[str, dict[str, dict[str, Any]]], names: list[str]) -> list[list[Any]]:
    rows = []
    for key, by_server in results.items():
        mode, c = key.split("@c=")
        ours = by_server.get("longhaul", {})
        for name in names:
            s = by_server.get(name)
            if s is None or "unsupported" in s:
                rows.append([mode, c, name, "no SSE stream", "", "", "", "", ""])
                continue
            ratio = ""
            if name != "longhaul" and ours and "unsupported" not in ours:
                ratio = (
                    f"{ours['per_s_median'] / s['per_s_median']:.2f}x / {ours['p50_ms'] / s['p50_ms']:.2f}x"
                )
                if "first_p50_ms" in s and "first_p50_ms" in ours:
                    ratio += f" / {ours['first_p50_ms'] / s['first_p50_ms']:.2f}x"
            first = f"{s['first_p50_ms']:.1f} / {s['first_p99_ms']:.1f}" if "first_p50_ms" in s else ""
            rows.append(
                [
                    mode,
                    c,
                    name,
                    f"{s['per_s_median']:.0f}",
                    f"{s['p50_ms']:.1f}",
                    f"{s['p99_ms']:.1f}",
                    first,
                    s["errors"],
                    ratio,
                ]
            )
    return rows


def main() -> None:
    parser = base_parser(__doc__ or "")
    parser.add_argument("--rounds", type=int, default=3, help="interleaved rounds (medians over them)")
    parser.add_argument("--seconds", type=float, default=5.0, help="length of one round")
    parser.add_argument(
        "--concurrency", type=int, nargs="+", default=[1, 16], help="clients (64 128 optional)"
    )
    parser.add_argument("--servers", nargs="+", choices=SERVERS, default=list(SERVERS))
    parser.add_argument("--modes", nargs="+", choices=MODES, default=list(MODES))
    parser.add_argument(
        "--worker-concurrency", type=int, default=16, help="longhaul's LONGHAUL_WORKER_CONCURRENCY"
    )
    parser.add_argument(
        "--baseline-tree",
        type=Path,
        help="also run longhaul from this checkout (server longhaul-base): an interleaved A/B",
    )
    parser.add_argument(
        "--fixed-order",
        action="store_true",
        help="visit the servers in the same order every round (by default every other round reverses it)",
    )
    args = parser.parse_args()
    if args.baseline_tree is not None:
        args.servers = [*args.servers, "longhaul-base"]
    if args.quick:
        args.rounds, args.seconds = 2, 2.0
    folder = Path(tempfile.mkdtemp(prefix="bench-a2a-compare-"))
    samples: dict[str, dict[str, list[Round]]] = {}
    unsupported: set[tuple[str, str]] = set()
    info = machine_info(args.database_url)
    with servers(
        args.servers, args.database_url, folder, args.worker_concurrency, args.baseline_tree
    ) as urls:
        for number in range(args.rounds):
            for mode in args.modes:
                for c in args.concurrency:
                    for name, url in round_order(urls, number, fixed=args.fixed_order):
                        if (name, mode) in unsupported:
                            continue
                        try:
                            sample = asyncio.run(run_round(url, mode, c, args.seconds))
                        except NoStreamError as error:
                            print(f"{name}: SendStreamingMessage answered without a stream: {error}")
                            unsupported.add((name, mode))
                            continue
                        samples.setdefault(f"{mode}@c={c}", {}).setdefault(name, []).append(sample)
                        print(
                            f"round {number + 1} {mode:>11} c={c:<3} {name:<12} {sample.per_s:8.1f}/s",
                            flush=True,
                        )
    results: dict[str, dict[str, dict[str, Any]]] = {}
    for mode in args.modes:
        for c in args.concurrency:
            key = f"{mode}@c={c}"
            results[key] = {name: summarise(rounds) for name, rounds in samples.get(key, {}).items()}
            for name in args.servers:
                if (name, mode) in unsupported:
                    results[key][name] = {
                        "unsupported": "answered SendStreamingMessage without an SSE stream"
                    }
    headers = [
        "mode",
        "c",
        "server",
        "req/s",
        "p50 ms",
        "p99 ms",
        "first p50/p99 ms",
        "errors",
        "longhaul ÷ it: req/s / p50 (/ first p50)",
    ]
    print()
    print(table(headers, rows_of(results, args.servers)))
    payload = {
        "machine": info,
        "rounds": args.rounds,
        "seconds_per_round": args.seconds,
        "concurrency": args.concurrency,
        "worker_concurrency": args.worker_concurrency,
        "results": results,
        "logs": str(folder),
        "loadavg_at_end": [round(x, 2) for x in os.getloadavg()],
    }
    write_results("a2a_compare", payload, args)


if __name__ == "__main__":
    main()
