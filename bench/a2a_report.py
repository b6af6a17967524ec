"""The figures of ``bench.a2a_compare``: a (server, mode, c)'s rounds summed up, and the table.

``summarise`` gives the JSON's summary of one server's rounds (req/s medians, percentiles over
every round's requests, errors, refusals, CPU: ``cpu_summary``); ``against_c16`` adds each
figure's ratio to its c=16 one; ``rows_of`` and ``TABLE_HEADERS`` make the printed table.
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


def cpu_text(s: dict[str, Any]) -> tuple[str, str]:
    """The table's CPU cells: ms per request (server / its PostgreSQL backends / the machine's
    PostgreSQL), cores (server / its backends / the machine's PG / client / all)."""
    if "cpu_ms_per_request" not in s:
        return "", ""

    def figure(value: float | None) -> str:
        return "?" if value is None else f"{value:.2f}"

    per_request = " / ".join(
        figure(s.get(k))
        for k in ("cpu_ms_per_request", "server_postgres_cpu_ms_per_request", "postgres_cpu_ms_per_request")
    )
    cores = " / ".join(
        figure(s.get(k))
        for k in (
            "server_cores",
            "server_postgres_cores",
            "postgres_cores",
            "client_cores",
            "machine_busy_cores",
        )
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


def against_c16(results: dict[str, dict[str, dict[str, Any]]]) -> None:
    """Add each figure's ratio to the same server's c=16 req/s in the same mode and run."""
    for key, by_server in results.items():
        mode = key.split("@c=")[0]
        for name, s in by_server.items():
            c16 = results.get(f"{mode}@c=16", {}).get(name, {})
            if "per_s_median" in s and c16.get("per_s_median"):
                s["per_s_vs_c16"] = round(s["per_s_median"] / c16["per_s_median"], 2)


TABLE_HEADERS = [
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
    "CPU ms/req: server / its PG backends / all PG",
    "cores: server / its PG / all PG / client / machine",
]
