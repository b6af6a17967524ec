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
``server_postgres_cpu_ms_per_request``, the PostgreSQL backends serving the server's
connections (found through one monitor connection at each end of the window; backends that
ended inside it are counted in ``server_postgres_ended``, not in the figure: a lower bound);
``postgres_cpu_ms_per_request``, every ``postgres`` process of the machine's (the whole machine's
PostgreSQL, whoever uses it, not this server's alone); ``client_cpu_ms_per_request``, the load
client's (this process). ``*_cores`` are the same seconds over the window's wall seconds, and
``machine_busy_cores`` the machine's busy cores (everyone's), out of ``machine.nproc``. Work a
round's requests leave for later (a task's worker, projector, relay) that outlasts the window is
not counted; work left by the warm-up requests is. Before each round the servers and the
machine's PostgreSQL are let settle (``bench.process_cpu.settle``: until they spend under 0.1 of
a core, at most ``--settle-s``, printed as ``settled``), so that the work one server's round
left does not run in the next server's window and slow it down.

    uv run python -m bench.a2a_compare [--quick] [--rounds 3 --seconds 5] [--concurrency 1 16 64 128]
        [--servers longhaul sdk-memory sdk-postgres] [--modes blocking immediately stream]
        [--baseline-tree /path/to/another/checkout]   # adds longhaul-base: the same run, A/B
        [--what-if no-worker,no-followers]            # adds longhaul-base: up with those parts left out
        [--longhaul-env KEY=VALUE ...] [--baseline-env KEY=VALUE ...]  # settings of longhaul / -base
        [--fixed-order]                               # one server order (default: reversed every other round)
        [--settle-s 10]                               # wait for quiet before a round, at most (0: not)
        [--client-per-caller]                         # an httpx.AsyncClient per caller, not one pool

This module holds the command line and ``run`` (``bench.targets`` calls it); the servers are
started by ``bench.a2a_servers``, the load by ``bench.a2a_load``, the figures and the table are
made by ``bench.a2a_report``.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import tempfile
from pathlib import Path
from typing import Any

import psycopg

from bench.a2a_load import NoStreamError, Round, run_round
from bench.a2a_report import TABLE_HEADERS, against_c16, cpu_summary, rows_of, summarise
from bench.a2a_servers import SERVERS, round_order, servers, settings_of
from bench.common import base_parser, machine_info, table, write_results
from bench.process_cpu import settle
from bench.traced_up import what_ifs

MODES = ("blocking", "immediately", "stream")


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
        "--what-if",
        default=None,
        metavar="NAMES",
        help="also run longhaul-base: this checkout's up with these parts left out (bench.traced_up's "
        "BENCH_WHATIF, e.g. no-worker,no-followers: the request path and its commit alone)",
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
        "--settle-s",
        type=float,
        default=10.0,
        help="before each round, wait up to this long for the servers and PostgreSQL to be quiet (0: not)",
    )
    parser.add_argument(
        "--fixed-order",
        action="store_true",
        help="visit the servers in the same order every round (by default every other round reverses it)",
    )
    args = parser.parse_args(argv)
    if args.what_if is not None:
        try:
            names = what_ifs(args.what_if)
        except ValueError as error:
            parser.error(f"--what-if: {error}")
        if "no-worker" in names and set(args.modes) != {"immediately"}:
            parser.error(
                "--what-if no-worker needs --modes immediately: nothing would end a blocking call or a stream"
            )
    if args.baseline_tree is not None or args.what_if is not None:
        args.servers = [*args.servers, "longhaul-base"]
    if args.quick:
        args.rounds, args.seconds = 2, 2.0
    return args


def run(args: argparse.Namespace) -> dict[str, Any]:
    """Start the servers, run every round, print the table: the results (what the JSON holds)."""
    settings = {"longhaul": settings_of(args.longhaul_env), "longhaul-base": settings_of(args.baseline_env)}
    if args.what_if is not None:
        settings["longhaul-base"]["BENCH_WHATIF"] = args.what_if  # bench.a2a_servers runs it traced
    folder = Path(tempfile.mkdtemp(prefix="bench-a2a-compare-"))
    samples: dict[str, dict[str, list[Round]]] = {}
    unsupported: set[tuple[str, str]] = set()
    info = machine_info(args.database_url)
    overflows_before = listen_overflows()
    with (
        psycopg.connect(args.database_url, autocommit=True) as monitor,  # the servers' backends
        servers(
            args.servers, args.database_url, folder, args.worker_concurrency, args.baseline_tree, settings
        ) as urls,
    ):
        for number in range(args.rounds):
            for mode in args.modes:
                for c in args.concurrency:
                    for name, (url, pid) in round_order(urls, number, fixed=args.fixed_order):
                        if (name, mode) in unsupported:
                            continue
                        settled = settle([p for _, p in urls.values()], most_s=args.settle_s)
                        try:
                            sample = asyncio.run(
                                run_round(
                                    url,
                                    mode,
                                    c,
                                    args.seconds,
                                    client_per_caller=args.client_per_caller,
                                    server_pid=pid,
                                    monitor=monitor,
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
                            + ("" if cpu_ms is None else f"  CPU {cpu_ms:.2f} ms/req")
                            + f"  settled {settled:.1f}s",
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
    print()
    print(table(TABLE_HEADERS, rows_of(results, args.servers)))
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
        "cpu": "per completed request over each round's timed window; server_postgres_*: the "
        "PostgreSQL backends of the server's own connections (server_postgres_ended: backends that "
        "ended inside a window, not counted); postgres_*: every postgres "
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
