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
is counted in ``errors`` (the machine's PostgreSQL is shared and may run out of connections), a
dropped connection too.

A 429 (the overload answer, ``api.overload``) is what a real A2A client sees it as: not an error
but a refusal, counted in ``refused``; that caller waits the answer's ``Retry-After`` before it
sends the same request again. ``req/s`` counts completed requests, the latency percentiles are
over completed requests (their last try), and ``to success`` is the time from a request's first
try to its success, refusals and waits included. ``listen_overflows`` in the JSON is the
kernel's ``TcpExtListenOverflows`` (``/proc/net/netstat``, the whole machine) over the run.

CPU over each round's timed window (``bench.process_cpu``, from ``/proc``), per completed request
(or stream) of the window: ``cpu_ms_per_request``, the server's process and its children's;
``postgres_cpu_ms_per_request``, every ``postgres`` process of the machine's (the whole machine's
PostgreSQL, whoever uses it, not this server's alone); ``client_cpu_ms_per_request``, the load
client's (this process). ``*_cores`` are the same seconds over the window's wall seconds, and
``machine_busy_cores`` the machine's busy cores (everyone's), out of ``machine.nproc``. Work a
round's requests leave for later (a task's worker, projector, relay) that outlasts the window is
not counted; work left by the warm-up requests is.

    uv run python -m bench.a2a_compare [--quick] [--rounds 3 --seconds 5] [--concurrency 1 16 64 128]
        [--servers longhaul sdk-memory sdk-postgres] [--modes blocking immediately stream]
        [--baseline-tree /path/to/another/checkout]   # adds longhaul-base: the same run, A/B
        [--longhaul-env KEY=VALUE ...] [--baseline-env KEY=VALUE ...]  # settings of longhaul / -base
        [--fixed-order]                               # one server order (default: reversed every other round)
        [--client-per-caller]                         # an httpx.AsyncClient per caller, not one pool
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import tempfile
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from contextlib import AsyncExitStack, ExitStack, contextmanager
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
from bench.process_cpu import read, spent
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


class RefusedError(Exception):
    """The server answered 429: nothing was accepted, send again after ``retry_after`` seconds."""

    def __init__(self, retry_after: float) -> None:
        super().__init__(f"429, Retry-After {retry_after} s")
        self.retry_after = retry_after


def refusal(response: httpx.Response) -> RefusedError:
    """The refusal a 429 answer stands for (``Retry-After`` in seconds; 1 s when it has none)."""
    try:
        retry_after = max(0.0, float(response.headers.get("retry-after", "1")))
    except ValueError:
        retry_after = 1.0
    return RefusedError(retry_after)


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
        raise refusal(response)
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
        if response.status_code == 429:
            await response.aread()
            raise refusal(response)
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


async def run_round(
    base_url: str,
    mode: str,
    clients: int,
    seconds: float,
    *,
    client_per_caller: bool = False,
    server_pid: int | None = None,
) -> Round:
    """``clients`` concurrent callers for ``seconds``, after a few warm-up requests per connection.

    With ``server_pid``, the CPU spent over the timed part (``Round.cpu``): that process's (and
    its children's), the machine's PostgreSQL's, this client's and the machine's.

    Each caller has its own keep-alive connection: of one shared ``httpx.AsyncClient`` (its pool
    scans every connection and every waiting request on each request: O(clients) per request), or,
    with ``client_per_caller``, of its own ``httpx.AsyncClient`` of one connection.
    """
    sample = Round()
    async with AsyncExitStack() as stack:
        if client_per_caller:
            one = httpx.Limits(max_connections=1, max_keepalive_connections=1)
            https = [
                await stack.enter_async_context(
                    httpx.AsyncClient(base_url=base_url, timeout=60.0, limits=one)
                )
                for _ in range(clients)
            ]
        else:
            limits = httpx.Limits(max_connections=clients, max_keepalive_connections=clients)
            shared = await stack.enter_async_context(
                httpx.AsyncClient(base_url=base_url, timeout=60.0, limits=limits)
            )
            https = [shared] * clients

        async def caller(http: httpx.AsyncClient, into: Round, deadline: float, at_least: int = 0) -> None:
            done = 0
            while done < at_least or time.perf_counter() < deadline:
                done += 1
                first_try = time.perf_counter()
                while True:
                    try:
                        await one_call(http, mode, into)
                    except NoStreamError:
                        raise
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
        before = None if server_pid is None else read(server_pid)
        started = time.perf_counter()
        await asyncio.gather(*(caller(http, sample, started + seconds) for http in https))
        sample.per_s = len(sample.seconds) / (time.perf_counter() - started)
        if before is not None and server_pid is not None:
            sample.cpu = spent(before, read(server_pid))
    return sample


@contextmanager
def servers(
    names: list[str],
    database_url: str,
    folder: Path,
    worker_concurrency: int,
    baseline_tree: Path | None = None,
    settings: dict[str, dict[str, str]] | None = None,
) -> Iterator[dict[str, tuple[str, int]]]:
    """Start the servers named; yields each one's base URL and process id; stops them and drops
    their schemas.

    ``longhaul-base`` is ``longhaul up`` run from ``baseline_tree`` (another checkout), for an
    interleaved A/B of two longhaul versions in the same run. ``settings`` are extra
    ``LONGHAUL_*`` variables by server name (``longhaul``, ``longhaul-base``).
    """
    with ExitStack() as stack:
        urls: dict[str, tuple[str, int]] = {}
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
                env |= (settings or {}).get(name, {})
                module = ["longhaul.cli", "up"]
            else:
                store = name.removeprefix("sdk-")
                module = ["bench.a2a_sdk_server", "--port", str(port), "--store", store]
                if store == "postgres":
                    schema = stack.enter_context(fresh_schema(database_url, "sdk"))
                    module += ["--database-url", database_url, "--schema", schema]
            process = start_gateway(module, env, port, folder / f"{name}.log", tree=tree)
            stack.callback(stop, process)
            urls[name] = (f"http://127.0.0.1:{port}", process.pid)
        yield urls


def round_order(
    urls: dict[str, tuple[str, int]], number: int, *, fixed: bool = False
) -> list[tuple[str, tuple[str, int]]]:
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
    to_success = [s for r in rounds for s in r.to_success]
    summary: dict[str, Any] = {
        "per_s_median": round(statistics.median(r.per_s for r in rounds), 1),
        "per_s_rounds": [round(r.per_s, 1) for r in rounds],
        "n": len(seconds),
        "errors": sum(r.errors for r in rounds),
        "error_kinds": dict(sum((Counter(r.error_kinds) for r in rounds), Counter())),
        "error_samples": {k: v for r in rounds for k, v in r.error_samples.items()},
        "refused": sum(r.refused for r in rounds),
        "p50_ms": ms(seconds, 0.5),
        "p99_ms": ms(seconds, 0.99),
        "to_success_p50_ms": ms(to_success, 0.5),
        "to_success_p99_ms": ms(to_success, 0.99),
    }
    if first:
        summary |= {"first_p50_ms": ms(first, 0.5), "first_p99_ms": ms(first, 0.99)}
    return summary | cpu_summary(rounds)


CPU_KEYS = {
    "server": ("cpu_ms_per_request", "server_cores"),
    "postgres": ("postgres_cpu_ms_per_request", "postgres_cores"),
    "client": ("client_cpu_ms_per_request", "client_cores"),
}
"""``Round.cpu``'s keys and the summary's keys for each: CPU ms per request, cores busy."""


def cpu_summary(rounds: list[Round]) -> dict[str, Any]:
    """CPU ms per completed request and cores busy over the rounds' timed windows (module doc).

    Empty when no round measured CPU; a figure is None when a round could not read it (no
    ``postgres`` process visible).
    """
    measured = [r for r in rounds if r.cpu]
    answered = sum(len(r.seconds) for r in measured)
    wall = sum(r.cpu["seconds"] or 0.0 for r in measured)
    if not measured or not answered or not wall:
        return {}
    summary: dict[str, Any] = {"cpu_window_seconds": round(wall, 2)}
    for key, (per_request, cores) in CPU_KEYS.items():
        values = [r.cpu[key] for r in measured]
        total = None if any(v is None for v in values) else sum(v or 0.0 for v in values)
        summary[per_request] = None if total is None else round(1000 * total / answered, 2)
        summary[cores] = None if total is None else round(total / wall, 2)
    summary["machine_busy_cores"] = round(sum(r.cpu["machine"] or 0.0 for r in measured) / wall, 2)
    return summary


def cpu_text(s: dict[str, Any]) -> tuple[str, str]:
    """The table's CPU cells: ms per request (server / PostgreSQL), cores (server / PG / client / all)."""
    if "cpu_ms_per_request" not in s:
        return "", ""

    def figure(value: float | None) -> str:
        return "?" if value is None else f"{value:.2f}"

    per_request = f"{figure(s['cpu_ms_per_request'])} / {figure(s['postgres_cpu_ms_per_request'])}"
    cores = " / ".join(
        figure(s[k]) for k in ("server_cores", "postgres_cores", "client_cores", "machine_busy_cores")
    )
    return per_request, cores


def rows_of(results: dict[str, dict[str, dict[str, Any]]], names: list[str]) -> list[list[Any]]:
    rows = []
    for key, by_server in results.items():
        mode, c = key.split("@c=")
        ours = by_server.get("longhaul", {})
        for name in names:
            s = by_server.get(name)
            if s is None or "unsupported" in s:
                rows.append([mode, c, name, "no SSE stream", *[""] * 10])
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
                    s.get("refused", 0),
                    f"{s['to_success_p50_ms']:.1f} / {s['to_success_p99_ms']:.1f}"
                    if "to_success_p50_ms" in s
                    else "",
                    f"{s['per_s_vs_c16']:.2f}" if "per_s_vs_c16" in s else "",
                    *cpu_text(s),
                ]
            )
    return rows


def settings_of(pairs: list[str]) -> dict[str, str]:
    """``KEY=VALUE`` pairs (``--longhaul-env``, ``--baseline-env``) as environment variables."""
    env = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key.startswith("LONGHAUL_"):
            raise SystemExit(f"not a LONGHAUL_KEY=VALUE pair: {pair!r}")
        env[key] = value
    return env


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


def against_c16(results: dict[str, dict[str, dict[str, Any]]]) -> None:
    """Add each figure's ratio to the same server's c=16 req/s in the same mode and run."""
    for key, by_server in results.items():
        mode = key.split("@c=")[0]
        for name, s in by_server.items():
            c16 = results.get(f"{mode}@c=16", {}).get(name, {})
            if "per_s_median" in s and c16.get("per_s_median"):
                s["per_s_vs_c16"] = round(s["per_s_median"] / c16["per_s_median"], 2)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """The command line's options (``argv``: these words instead of ``sys.argv``, for ``bench.targets``)."""
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
        "--longhaul-env", nargs="+", default=[], metavar="KEY=VALUE", help="settings of longhaul"
    )
    parser.add_argument(
        "--baseline-env", nargs="+", default=[], metavar="KEY=VALUE", help="settings of longhaul-base"
    )
    parser.add_argument(
        "--client-per-caller",
        action="store_true",
        help="each caller its own httpx.AsyncClient (no shared pool's O(clients) work per request)",
    )
    parser.add_argument(
        "--fixed-order",
        action="store_true",
        help="visit the servers in the same order every round (by default every other round reverses it)",
    )
    args = parser.parse_args(argv)
    if args.baseline_tree is not None:
        args.servers = [*args.servers, "longhaul-base"]
    if args.quick:
        args.rounds, args.seconds = 2, 2.0
    return args


def run(args: argparse.Namespace) -> dict[str, Any]:
    """Start the servers, run every round, print the table: the results (what the JSON holds)."""
    settings = {"longhaul": settings_of(args.longhaul_env), "longhaul-base": settings_of(args.baseline_env)}
    folder = Path(tempfile.mkdtemp(prefix="bench-a2a-compare-"))
    samples: dict[str, dict[str, list[Round]]] = {}
    unsupported: set[tuple[str, str]] = set()
    info = machine_info(args.database_url)
    overflows_before = listen_overflows()
    with servers(
        args.servers, args.database_url, folder, args.worker_concurrency, args.baseline_tree, settings
    ) as urls:
        for number in range(args.rounds):
            for mode in args.modes:
                for c in args.concurrency:
                    for name, (url, pid) in round_order(urls, number, fixed=args.fixed_order):
                        if (name, mode) in unsupported:
                            continue
                        try:
                            sample = asyncio.run(
                                run_round(
                                    url,
                                    mode,
                                    c,
                                    args.seconds,
                                    client_per_caller=args.client_per_caller,
                                    server_pid=pid,
                                )
                            )
                        except NoStreamError as error:
                            print(f"{name}: SendStreamingMessage answered without a stream: {error}")
                            unsupported.add((name, mode))
                            continue
                        samples.setdefault(f"{mode}@c={c}", {}).setdefault(name, []).append(sample)
                        cpu_ms = cpu_summary([sample]).get("cpu_ms_per_request")
                        print(
                            f"round {number + 1} {mode:>11} c={c:<3} {name:<12} {sample.per_s:8.1f}/s"
                            f"  refused {sample.refused:<5} errors {sample.errors}"
                            + ("" if cpu_ms is None else f"  CPU {cpu_ms:.2f} ms/req"),
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
    against_c16(results)
    overflows_after = listen_overflows()
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
        "refused",
        "to success p50/p99 ms",
        "req/s ÷ its c=16",
        "CPU ms/req: server / PostgreSQL",
        "cores: server / PG / client / machine",
    ]
    print()
    print(table(headers, rows_of(results, args.servers)))
    return {
        "machine": info,
        "rounds": args.rounds,
        "seconds_per_round": args.seconds,
        "concurrency": args.concurrency,
        "worker_concurrency": args.worker_concurrency,
        "settings": {name: env for name, env in settings.items() if env},
        "fixed_order": args.fixed_order,
        "client_per_caller": args.client_per_caller,
        "listen_overflows": None
        if overflows_before is None or overflows_after is None
        else overflows_after - overflows_before,
        "cpu": "per completed request over each round's timed window; postgres_*: every postgres "
        "process of the machine (the whole machine's PostgreSQL); *_cores: CPU seconds over wall "
        "seconds; machine_busy_cores: everyone's, of machine.nproc (bench.process_cpu)",
        "results": results,
        "logs": str(folder),
        "loadavg_at_end": [round(x, 2) for x in os.getloadavg()],
    }


def main() -> None:
    args = parse_args()
    write_results("a2a_compare", run(args), args)


if __name__ == "__main__":
    main()
