"""The figures of the request-path part: a (server, mode, c)'s rounds summed up, and the table.

``summarise`` gives the summary of one server's rounds (req/s medians, percentiles over every
round's requests, errors, refusals, CPU: ``cpu_summary``); ``rows_of`` and ``TABLE_HEADERS``
make the printed table.
"""

from __future__ import annotations

import statistics
from collections import Counter
from typing import Any

from bench.a2a_load import Round
from bench.common import percentile


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


def rows_of(results: dict[str, dict[str, dict[str, Any]]]) -> list[list[Any]]:
    """The printed table's rows: one per (mode, c, server)."""
    rows = []
    for key, by_server in results.items():
        mode, c = key.split("@c=")
        for name, s in by_server.items():
            first = s.get("first_p50_ms", float("nan"))
            rows.append(
                [
                    f"{mode} c={c}",
                    name,
                    s["per_s_median"],
                    s["p50_ms"],
                    s["p99_ms"],
                    first,
                    s["errors"],
                    s["refused"],
                    s.get("cpu_ms_per_request"),
                    s.get("server_postgres_cpu_ms_per_request"),
                ]
            )
    return rows


TABLE_HEADERS = [
    "mode",
    "server",
    "req/s",
    "p50 ms",
    "p99 ms",
    "first p50 ms",
    "errors",
    "refused",
    "CPU ms/req",
    "its PG ms/req",
]
