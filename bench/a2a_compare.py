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
import itertools
import statistics
import tempfile
from collections import Counter
from pathlib import Path
from typing import Any

import psycopg

from bench.a2a_load import Round, run_round
from bench.a2a_servers import ANSWER_MODES, ANSWER_ONLY, SERVERS, round_order, servers
from bench.common import Options, percentile, table
from bench.process_cpu import settle

MODES = ("blocking", "immediately", "stream")
WORKER_CONCURRENCY = 16


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
            for name, (url, pid) in round_order(urls, number):
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


# ----------------------------------------------------------------------------- the figures


def ms(seconds: list[float], q: float) -> float:
    return round(1000 * percentile(seconds, q), 2)


def summarise(rounds: list[Round]) -> dict[str, Any]:
    """One server's rounds summed up: req/s medians, percentiles over every round's requests,
    errors, refusals, CPU (``cpu_summary``)."""
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
