"""Why a target of ``bench.verdicts`` was missed (or came within 30 %), from the run's own figures.

The ``a2a`` targets' reasons are computed from ``bench.a2a_compare``'s results: its CPU per
answered request over the timed windows (the server's process, its own PostgreSQL backends
where the results have them, the whole machine's PostgreSQL, the load client), the cores busy
(``machine_busy_cores`` of ``machine.nproc``: everyone's), the 429 answers and the rates. "Its
own PostgreSQL backends" are the backends of the server's connections (``server_postgres_*``, a
lower bound: see ``bench.process_cpu``); "the machine's PostgreSQL" is every ``postgres``
process (``postgres_*``), whoever used it. Results from before the server's own backends were
measured give the machine's figure alone, worded as then. Where those figures cannot tell what
held a figure back, the reason says so and names the profile in ``docs/benchmarks.md`` §11 that
goes hop by hop. Results from before the CPU was measured get "not measured". The latency
targets (commit -> SSE frame, commit -> webhook) are told by their parts apart (the relay's, the
gateway's or the dispatcher's p99 and p50), the same run's raw NATS p99 beside the target (the
machine's own floor at that load), the services' CPU and the machine's cores busy over the load.
A part whose results hold nothing that tells why (``not_told``) says so and names the doc's
section. Nothing here starts a process or opens a connection.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from bench import sse_latency, webhook_latency

Explain = Callable[[Mapping[str, Any]], tuple[str, ...]]
"""A part's results -> the reasons, each a sentence."""

TIMES = "\N{MULTIPLICATION SIGN}"

SDK = {"sdk-memory": "in-memory", "sdk-postgres": "PostgreSQL store"}
REQUEST_PROFILE = (
    'docs/benchmarks.md §11 "The request path, hop by hop", "Session 29: one client\'s blocking send,'
    ' hop by hop" (`bench.request_hops` measures it again), "Session 30" (each thread\'s wake-ups,'
    ' and the dispatcher\'s share), "Session 34" (`bench.a2a_compare --what-if no-worker,no-followers`:'
    ' the request path and its commit alone, beside the same run\'s servers) and "Session 35"'
    " (`bench.request_hops --pg-waits`: what the appends' PostgreSQL backends run or wait on)"
)
STREAM_PROFILE = (
    'docs/benchmarks.md §11 "The stream path, hop by hop", "Session 34" (`bench.request_hops --mode'
    ' stream`: the first event\'s hops) and "Session 35" (`--pg-waits`: what its statement waits on)'
)

ONE_CORE = 0.7
"""A process busy at least this share of a core over the window is taken as held on one core (one GIL)."""
SATURATED = 0.9
"""The machine's cores are saturated when at least this share of them was busy over the window."""


def a2a_row(results: Mapping[str, Any], mode: str, c: int, server: str) -> Mapping[str, Any] | None:
    """One server's summary of ``mode`` at ``c`` clients; None if it did not run or has no stream."""
    row = (results.get("results") or {}).get(f"{mode}@c={c}", {}).get(server)
    return None if row is None or "unsupported" in row else row


@dataclass(frozen=True)
class Cpu:
    """A row's CPU figures (``bench.a2a_report.cpu_summary``); PostgreSQL's None when not visible,
    the server's own backends' (``server_postgres_*``) None too when the results have none."""

    ms: float
    cores: float
    postgres_ms: float | None
    postgres_cores: float | None
    server_postgres_ms: float | None
    server_postgres_cores: float | None
    client_cores: float
    busy_cores: float


def cpu_of(row: Mapping[str, Any] | None) -> Cpu | None:
    if row is None or row.get("cpu_ms_per_request") is None:
        return None
    return Cpu(
        ms=row["cpu_ms_per_request"],
        cores=row["server_cores"],
        postgres_ms=row.get("postgres_cpu_ms_per_request"),
        postgres_cores=row.get("postgres_cores"),
        server_postgres_ms=row.get("server_postgres_cpu_ms_per_request"),
        server_postgres_cores=row.get("server_postgres_cores"),
        client_cores=row.get("client_cores") or 0.0,
        busy_cores=row.get("machine_busy_cores") or 0.0,
    )


def not_measured(profile: str) -> str:
    return f"CPU per request not measured in this run: the reason is not in its figures; see {profile}"


def uses(cpu: Cpu, theirs: Mapping[str, Any] | None, server: str | None, unit: str) -> str:
    """What longhaul up and PostgreSQL used per request, beside the baseline server's."""
    text = f"longhaul up used {cpu.ms:.1f} ms CPU per {unit}"
    other = cpu_of(theirs)
    if server is not None and other is not None:
        text += f" ({SDK[server]} server {other.ms:.1f} ms)"
    if cpu.postgres_ms is None:
        return text + "; PostgreSQL's CPU not visible from this machine"
    if cpu.server_postgres_ms is not None:
        text += f"; its own PostgreSQL backends {cpu.server_postgres_ms:.1f} ms per {unit}"
        if server is not None and other is not None and other.server_postgres_ms is not None:
            text += f", the {SDK[server]} server's {other.server_postgres_ms:.1f} ms"
    text += f"; the machine's PostgreSQL {cpu.postgres_ms:.1f} ms per longhaul {unit}"
    if server is not None and other is not None and other.postgres_ms is not None:
        text += f", {other.postgres_ms:.1f} ms per {SDK[server]} {unit}"
    return text + " (all of the machine's PostgreSQL, whoever used it)"


def saturation(results: Mapping[str, Any], cpu: Cpu) -> list[str]:
    """The machine's cores saturated over the window, with who used them; else nothing."""
    nproc = (results.get("machine") or {}).get("nproc")
    if not nproc or cpu.busy_cores < SATURATED * nproc:
        return []
    postgres = cpu.postgres_cores or 0.0
    rest = max(0.0, cpu.busy_cores - cpu.cores - postgres - cpu.client_cores)
    if cpu.server_postgres_cores is None:
        who = f"PostgreSQL {postgres:.2f}"
    else:
        others = max(0.0, postgres - cpu.server_postgres_cores)
        who = f"its PostgreSQL backends {cpu.server_postgres_cores:.2f}, the rest of PostgreSQL {others:.2f}"
    text = (
        f"the machine's {nproc} cores were saturated: {cpu.busy_cores:.2f} busy on average "
        f"(longhaul up {cpu.cores:.2f}, {who}, the load client "
        f"{cpu.client_cores:.2f}, everything else {rest:.2f})"
    )
    return [text]


def one_gil_at_c1(row: Mapping[str, Any], cpu: Cpu, profile: str, *, saturated: bool) -> str:
    """At c=1: bound by the one core its GIL gives it, or not: then waiting, for the cores too
    when the machine was ``saturated``, and the figures do not split the rest."""
    rate, bound = row["per_s_median"], 1000 / cpu.ms
    if cpu.cores >= ONE_CORE:
        return (
            f"at c=1 a request waits behind its predecessors' background work (their tasks' worker, "
            f"projector, relay, sequencer: {profile}) on one GIL: {cpu.ms:.1f} ms per request bounds "
            f"longhaul up near 1000/{cpu.ms:.1f} = {bound:.0f} req/s on one core; it reached "
            f"{rate:.0f} req/s with {cpu.cores:.2f} of a core busy"
        )
    waiting = "for a core among the others' work (saturated, below) and for what" if saturated else "which"
    return (
        f"longhaul up was busy only {cpu.cores:.2f} of a core at {rate:.0f} req/s (one core would "
        f"bound it at 1000/{cpu.ms:.1f} = {bound:.0f} req/s): the rest of each request is waiting, "
        f"{waiting} these figures do not split; see {profile}"
    )


def per_request_budget(target_per_s: float, cpu: Cpu) -> str:
    """How much CPU per request the target's rate leaves on one core, beside what was used."""
    budget = 1000 / target_per_s
    return (
        f"the target, {target_per_s:.0f} req/s, leaves {budget:.1f} ms of one core per request: "
        f"{cpu.ms / budget:.1f}{TIMES} less than now"
    )


def machine_budget(target_per_s: float, cpu: Cpu, nproc: int | None) -> str | None:
    """What the target's rate needs of the machine's cores at the CPU ``up`` and PostgreSQL
    used per request together (its own backends where measured, else the machine's PostgreSQL);
    None when PostgreSQL's CPU or the machine's cores are unknown."""
    if cpu.postgres_ms is None or not nproc:
        return None
    if cpu.server_postgres_ms is None:
        both, postgres = cpu.ms + cpu.postgres_ms, "the machine's PostgreSQL"
    else:
        both, postgres = cpu.ms + cpu.server_postgres_ms, "its own PostgreSQL backends"
    return (
        f"longhaul up and {postgres} together used {both:.1f} ms of CPU per request: "
        f"{target_per_s:.0f} req/s at that cost needs {target_per_s * both / 1000:.1f} cores, "
        f"the machine has {nproc}"
    )


def c1_throughput(mode: str, server: str, factor: float) -> Explain:
    """Why longhaul's req/s at c=1 is short of ``factor`` times ``server``'s."""

    def explain(results: Mapping[str, Any]) -> tuple[str, ...]:
        ours, theirs = a2a_row(results, mode, 1, "longhaul"), a2a_row(results, mode, 1, server)
        cpu = cpu_of(ours)
        if ours is None or cpu is None:
            return (not_measured(REQUEST_PROFILE),)
        saturated = saturation(results, cpu)
        reasons = [
            uses(cpu, theirs, server, "request"),
            one_gil_at_c1(ours, cpu, REQUEST_PROFILE, saturated=bool(saturated)),
        ]
        if theirs is not None:
            target = factor * theirs["per_s_median"]
            reasons.append(per_request_budget(target, cpu))
            machine = machine_budget(target, cpu, (results.get("machine") or {}).get("nproc"))
            reasons += [machine] if machine else []
        return (*reasons, *saturated)

    return explain


def c1_latency(budget_ms: float) -> Explain:
    """Why blocking c=1's p50 is not under ``budget_ms``."""

    def explain(results: Mapping[str, Any]) -> tuple[str, ...]:
        ours = a2a_row(results, "blocking", 1, "longhaul")
        cpu = cpu_of(ours)
        if ours is None or cpu is None:
            return (not_measured(REQUEST_PROFILE),)
        reasons = [uses(cpu, a2a_row(results, "blocking", 1, "sdk-postgres"), "sdk-postgres", "request")]
        if cpu.ms >= budget_ms:
            reasons.append(
                f"{cpu.ms:.1f} ms CPU per request ({cpu.cores:.2f} of a core) is more than the "
                f"{budget_ms:g} ms budget: at c=1 a request's own path and the background work its "
                f"predecessors left share one GIL, so a p50 under {budget_ms:g} ms needs that work "
                f"under {budget_ms:g} ms of a core per request ({REQUEST_PROFILE})"
            )
        else:
            reasons.append(
                f"{cpu.ms:.1f} ms CPU per request is under the {budget_ms:g} ms budget: the rest of "
                f"the p50 {ours['p50_ms']:.1f} ms is waiting, which these figures do not split; "
                f"see {REQUEST_PROFILE}"
            )
        return (*reasons, *saturation(results, cpu))

    return explain


def first_event(c: int) -> Explain:
    """Why a stream's first event at ``c`` comes later than the in-memory server's."""

    def explain(results: Mapping[str, Any]) -> tuple[str, ...]:
        ours = a2a_row(results, "stream", c, "longhaul")
        cpu = cpu_of(ours)
        if ours is None or cpu is None:
            return (not_measured(STREAM_PROFILE),)
        reasons = [uses(cpu, a2a_row(results, "stream", c, "sdk-memory"), "sdk-memory", "stream")]
        if c > 1:
            return (*reasons, *bounds(results, ours, cpu, STREAM_PROFILE))
        if cpu.cores >= ONE_CORE:
            reasons.append(
                f"longhaul up was busy {cpu.cores:.2f} of a core: at c=1 a stream's first event "
                f"(its submission's commit, the primed frame) waits behind the earlier tasks' "
                f"background work on one GIL; these figures do not split the first event's path: "
                f"see {STREAM_PROFILE}"
            )
        else:
            reasons.append(
                f"longhaul up was busy only {cpu.cores:.2f} of a core: not its own CPU alone; these "
                f"figures do not split the first event's path: see {STREAM_PROFILE}"
            )
        return (*reasons, *saturation(results, cpu))

    return explain


def bounds(results: Mapping[str, Any], row: Mapping[str, Any], cpu: Cpu, profile: str) -> list[str]:
    """What bounded a row with many clients: the cores, one GIL, 429s, or "the figures do not tell"."""
    reasons = saturation(results, cpu)
    nproc = (results.get("machine") or {}).get("nproc")
    of = f" of {nproc}" if nproc else ""
    if not reasons and cpu.cores >= ONE_CORE:
        reasons.append(
            f"longhaul up was busy {cpu.cores:.2f} cores, about the one its GIL's Python can use "
            f"({cpu.busy_cores:.2f}{of} of the machine's cores busy)"
        )
    if row.get("refused"):
        reasons.append(
            f"{row['refused']:,} answers 429 (the in-flight limit): each refused caller waited the "
            f"answer's Retry-After before sending again (to success p50 "
            f"{row.get('to_success_p50_ms', float('nan')):,.0f} ms against p50 {row['p50_ms']:,.0f} ms "
            f"of a completed try)"
        )
    if not reasons:
        reasons.append(
            f"not the cores ({cpu.busy_cores:.2f}{of} busy, longhaul up {cpu.cores:.2f}) and no 429: "
            f"these figures do not tell what bounds it; see {profile}"
        )
    return reasons


def loaded(mode: str, c: int, server: str | None = None, factor: float = 1.0) -> Explain:
    """Why longhaul's figure of ``mode`` at ``c`` clients is short: against ``factor`` times
    ``server``'s req/s, or (no server) against its own c=16 figure."""

    def explain(results: Mapping[str, Any]) -> tuple[str, ...]:
        ours = a2a_row(results, mode, c, "longhaul")
        cpu = cpu_of(ours)
        if ours is None or cpu is None:
            return (not_measured(REQUEST_PROFILE),)
        theirs = None if server is None else a2a_row(results, mode, c, server)
        reasons = [uses(cpu, theirs, server, "request")]
        nproc = (results.get("machine") or {}).get("nproc")
        if server is not None and theirs is not None:
            target = factor * theirs["per_s_median"]
            on = f" ({nproc} on the machine)" if nproc else ""
            times = "" if factor == 1 else f"{factor:g}{TIMES} "
            reasons.append(
                f"{times}the {SDK[server]} server's {theirs['per_s_median']:.0f} req/s at "
                f"{cpu.ms:.1f} ms per request needs {target * cpu.ms / 1000:.2f} cores of longhaul up "
                f"alone{on}; it used {cpu.cores:.2f}"
            )
        c16 = cpu_of(a2a_row(results, mode, 16, "longhaul"))
        if server is None and c != 16 and c16 is not None:
            reasons.append(f"CPU per request {c16.ms:.1f} ms at c=16, {cpu.ms:.1f} ms at c={c}")
        return (*reasons, *bounds(results, ours, cpu, REQUEST_PROFILE))

    return explain


def not_told(section: str) -> Explain:
    """For a part whose results hold no figure that tells why: say so and name the doc's section."""

    def explain(results: Mapping[str, Any]) -> tuple[str, ...]:
        return (f"this part's figures do not tell why; see docs/benchmarks.md {section}",)

    return explain


def tails(
    first: tuple[str, Mapping[str, Any] | None], second: tuple[str, Mapping[str, Any] | None]
) -> list[str]:
    """Two parts of a path, each's p99 and p50, and which holds the larger tail; nothing if one is missing."""
    (first_name, a), (second_name, b) = first, second
    if not a or not b:
        return []
    larger = first_name if a["p99_ms"] >= b["p99_ms"] else second_name
    return [
        (
            f"each part apart (their percentiles do not add up): {first_name} p99 {a['p99_ms']:,.1f} ms, "
            f"p50 {a['median_ms']:,.1f} ms; {second_name} p99 {b['p99_ms']:,.1f} ms, p50 "
            f"{b['median_ms']:,.1f} ms: the larger tail is {larger}"
        )
    ]


def floor(raw: Mapping[str, Any], threshold_ms: float) -> str:
    """The same run's raw NATS p99 beside the target: the machine's own floor at that load."""
    p99 = raw["p99_ms"]
    text = (
        f"raw NATS (one core NATS message between two processes, in the same run) p99 {p99:,.1f} ms, "
        f"{p99 / threshold_ms:.0%} of the {threshold_ms:g} ms target"
    )
    if p99 >= threshold_ms:
        text += ": at this load the machine's own floor is at or above the target"
    return text


def machine_busy(results: Mapping[str, Any], busy: float | None) -> list[str]:
    """The machine's cores busy over the load (everyone's), saturated or not; nothing if not measured."""
    nproc = (results.get("machine") or {}).get("nproc")
    if busy is None or not nproc:
        return []
    saturated = " (saturated)" if busy >= SATURATED * nproc else ""
    return [f"the machine's {nproc} cores were {busy:.2f} busy on average over the load{saturated}"]


def sse_tail(streams: int, section: str) -> Explain:
    """Why commit -> SSE frame p99 with ``streams`` open streams is not under its target."""
    many = streams >= sse_latency.MANY_STREAMS
    threshold_ms = sse_latency.TARGET_P99_MANY_MS if many else sse_latency.TARGET_P99_MS

    def explain(results: Mapping[str, Any]) -> tuple[str, ...]:
        phase = next((p for p in results.get("phases", []) if p.get("streams") == streams), None)
        if phase is None:
            return ()
        latency = phase["latency"]
        reasons = tails(
            ("the relay's part (commit → NATS)", latency.get(sse_latency.TO_NATS)),
            ("the gateway's part (NATS → frame)", latency.get(sse_latency.GATEWAY)),
        )
        reasons.append(floor(latency[sse_latency.RAW], threshold_ms))
        gateway = phase.get("gateway_cpu_s_per_s")
        if gateway is not None:
            reasons.append(f"the gateway was busy {gateway:.2f} of a core over the load")
        reasons += machine_busy(results, phase.get("machine_busy_cores"))
        return (*reasons, f"hop by hop: docs/benchmarks.md {section}")

    return explain


def webhook_tail() -> Explain:
    """Why commit -> webhook COMPLETED delivered p99 is not under its target."""
    threshold_ms = webhook_latency.TARGET_P99_MS

    def explain(results: Mapping[str, Any]) -> tuple[str, ...]:
        latency = results.get("latency")
        if not latency:
            return ()
        reasons = tails(
            ("the relay's part (commit → NATS)", latency.get(webhook_latency.TO_NATS)),
            ("the dispatcher's part (NATS → COMPLETED delivered)", latency.get(webhook_latency.DISPATCHER)),
        )
        reasons.append(floor(latency[webhook_latency.RAW], threshold_ms))
        cpu, seconds = results.get("process_cpu_seconds_from_load_start"), results.get("load_seconds")
        per_delivery = results.get("dispatcher_cpu_ms_per_delivery")
        if cpu and seconds and "relay" in cpu and per_delivery is not None:
            dispatchers = sum(v for name, v in cpu.items() if name.startswith("dispatcher"))
            reasons.append(
                f"from the load's start to its last delivery the relay used {cpu['relay'] / seconds:.2f} "
                f"and the dispatcher {dispatchers / seconds:.2f} of a core (per load second; "
                f"{per_delivery:.2f} ms of CPU per delivery)"
            )
        reasons += machine_busy(results, results.get("machine_busy_cores"))
        return (*reasons, "hop by hop: docs/benchmarks.md §8")

    return explain
