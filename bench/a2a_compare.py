"""The request path beside the a2a-sdk server: one keep-alive load client, rounds interleaved.

Servers (``bench.a2a_servers``), each its own process: ``longhaul up``, ``longhaul gateway``
alone (the durable answer: the request path and its commit), the a2a-sdk server with its
in-memory store and with its PostgreSQL store. Modes, all JSON-RPC with the same bodies:
``blocking`` (``SendMessage``, waits for the completed task), ``immediately`` (``SendMessage``
with ``returnImmediately``) and ``stream`` (``SendStreamingMessage``: time to the first SSE event
and to the terminal one). ``c`` callers run for a few seconds each round, each on its own
keep-alive connection (the SDK's clients are httpx, as this one). Every round visits every (mode,
c, server), every other round in the reverse server order; the figures are the median over rounds
of requests/s and the percentiles over all rounds' requests.

A 429 (the overload answer) is what a real A2A client sees it as: not an error but a refusal,
counted in ``refused``; the caller waits its ``Retry-After`` and sends the request again.
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
import tempfile
from pathlib import Path
from typing import Any

import psycopg

from bench.a2a_load import Round, run_round
from bench.a2a_report import TABLE_HEADERS, rows_of, summarise
from bench.a2a_servers import ANSWER_MODES, ANSWER_ONLY, SERVERS, round_order, servers
from bench.common import Options, table
from bench.process_cpu import settle

MODES = ("blocking", "immediately", "stream")
WORKER_CONCURRENCY = 16


def sizes(quick: bool) -> tuple[int, float, list[int]]:
    """Rounds, seconds per round, and the client counts."""
    return (1, 2.0, [1, 16, 128]) if quick else (3, 5.0, [1, 16, 64, 128])


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
    rounds, seconds, concurrency = sizes(options.quick)
    folder = Path(tempfile.mkdtemp(prefix="bench-a2a-"))
    samples: dict[str, dict[str, list[Round]]] = {}
    overflows_before = listen_overflows()
    with (
        psycopg.connect(options.database_url, autocommit=True) as monitor,
        servers(list(SERVERS), options, folder, WORKER_CONCURRENCY) as urls,
    ):
        pids = [pid for _, pid in urls.values()]
        for number in range(rounds):
            for mode in MODES:
                for c in concurrency:
                    for name, (url, pid) in round_order(urls, number):
                        if not visits(name, mode, c):
                            continue
                        settle(pids, most_s=10.0)
                        sample = asyncio.run(
                            run_round(
                                url,
                                mode,
                                c,
                                seconds,
                                server_pid=pid,
                                monitor=monitor,
                                first_only=name == ANSWER_ONLY,
                            )
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
    print(table(TABLE_HEADERS, rows_of(results)))
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
