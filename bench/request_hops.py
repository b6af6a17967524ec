"""Where one client's ``SendMessage`` spends its time in ``longhaul up``, hop by hop (issue 10 §1).

Starts ``longhaul up`` as ``bench.traced_up`` (the CLI's ``up`` with a timestamp at each hop:
the service call, the submission in its thread, the commit and its statement, the done callback
on the event loop, the runner and its step, the group commit), drives it with one keep-alive
client (``bench.a2a_load``, the load of ``bench.a2a_compare``) for ``--rounds`` times ``--seconds``,
stops it and reads its marks. A request's hops are the marks between its ``send+`` and
``send-``; the table gives, over the requests whose marks came in the most common order, the
p50 and mean of each hop, and of the time between one ``send-`` and the next ``send+`` (the
HTTP edge out and in, the client and the network).

Baseline in the same run: the same submission (``TaskApplication.submit_leased``, echo skill)
called ``--statements`` times in a loop in this process, on a fresh schema of the same
PostgreSQL, with nothing else running in the process: what the commit and its statement cost
alone. ``--what-if no-followers`` adds a second traced ``up`` without the log's followers
(``bench.traced_up``; ``no-relay``, ``no-projector``, ``no-dispatcher``, ``no-sequencer``:
without that one), its rounds interleaved with the first's. ``--baseline-tree DIR`` runs that
second ``up`` from another checkout instead (with a ``--what-if``: that checkout without them),
for an A/B of two versions hop by hop.

``--mode stream``: a ``SendStreamingMessage``'s way to its first event instead, from ``stream+``
(the request parsed) to ``stream-`` (its first frame written; ``bench.traced_up``).

``--pg-waits``: what each ``up``'s PostgreSQL backends did during its rounds, sampled every
millisecond from ``pg_stat_activity`` (``bench.pg_waits``): running or waiting, on what, in which
statement, as a share of the time and in milliseconds per request. It tells a statement's own
work from its WAL flush and from a lock it waited for, which the hops do not.

One client only: with more, the requests' marks interleave and a hop is no longer one request's.

    uv run python -m bench.request_hops [--quick] [--mode blocking|immediately|stream]
        [--rounds 3 --seconds 8]
        [--statements 400] [--what-if no-followers|no-relay|no-projector|no-dispatcher|no-sequencer|no-worker]
        [--baseline-tree /path/to/another/checkout] [--pg-waits]
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import logging
import statistics
import tempfile
from collections.abc import Sequence
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import psycopg

from bench.a2a_load import body, run_round
from bench.a2a_servers import round_order, servers
from bench.common import base_parser, fresh_schema, machine_info, table, write_results
from bench.pg_waits import WaitKey, WaitSampler, waits_table
from bench.process_cpu import server_backends
from bench.processes import SKILL_MODULES
from bench.traced_up import WHAT_IFS

Mark = tuple[float, str, str]
"""``(perf_counter seconds, name, thread)``, as ``bench.traced_up`` writes them."""


def read_marks(path: Path) -> list[Mark]:
    marks = []
    for line in path.read_text().splitlines():
        at, name, thread = line.split(" ", 2)
        marks.append((float(at), name, thread))
    return marks


def hop_table(marks: Sequence[Mark], outer: str = "send") -> dict[str, Any]:
    """The hops of the calls delimited by ``outer+`` and ``outer-`` marks, in time order.

    Only the calls whose marks came in the most common order count (a call that took another
    way, a resend or a runner that lost its lease, has other hops); each hop is the time from
    one mark to the next. ``between``: from one call's ``outer-`` to the next one's ``outer+``.
    """
    calls: list[list[Mark]] = []
    current: list[Mark] | None = None
    for mark in sorted(marks):
        if mark[1] == f"{outer}+":
            current = [mark]
        elif current is not None:
            current.append(mark)
            if mark[1] == f"{outer}-":
                calls.append(current)
                current = None
    if not calls:
        return {"calls": 0, "typical": 0, "hops": [], "total_p50_ms": None, "between_p50_ms": None}
    orders = collections.Counter(tuple(name for _, name, _ in call) for call in calls)
    order, count = orders.most_common(1)[0]
    typical = [call for call in calls if tuple(name for _, name, _ in call) == order]
    hops = []
    for i in range(1, len(order)):
        spans = [1000 * (call[i][0] - call[i - 1][0]) for call in typical]
        hops.append(
            {
                "from": order[i - 1],
                "to": order[i],
                "p50_ms": round(statistics.median(spans), 4),
                "mean_ms": round(statistics.fmean(spans), 4),
            }
        )
    between = [1000 * (calls[i + 1][0][0] - calls[i][-1][0]) for i in range(len(calls) - 1)]
    return {
        "calls": len(calls),
        "typical": count,
        "hops": hops,
        "total_p50_ms": round(statistics.median(1000 * (c[-1][0] - c[0][0]) for c in typical), 4),
        "between_p50_ms": round(statistics.median(between), 4) if between else None,
    }


def statement_alone(database_url: str, calls: int) -> dict[str, Any]:
    """``submit_leased`` ``calls`` times in this process on a fresh schema: its hops, traced as in ``up``."""
    from bench import traced_up
    from longhaul import wiring
    from longhaul.settings import Settings

    with fresh_schema(database_url, "hops") as schema:
        settings = Settings(database_url=database_url, database_schema=schema, skill_modules=SKILL_MODULES)
        store = wiring.build_store(settings, pool_size=2)
        try:
            skill = wiring.build_registry(settings).get("echo", 1)
            clock = wiring.system_clock(settings)
            traced_up.install()
            logging.disable(logging.INFO)  # the lifecycle lines, as up writes them to its log file
            for _ in range(calls):
                message = body("SendMessage")["params"]["message"]  # the load client's own message
                store.submit_leased(
                    tenant="default", message=message, skill=skill, clock=clock, worker="w", lease_seconds=30
                )
        finally:
            logging.disable(logging.NOTSET)
            store.close()
    marks = traced_up.MARKS[len(traced_up.MARKS) // 4 :]  # the first quarter warms the caches
    return hop_table(marks, outer="submit")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = base_parser(__doc__ or "")
    parser.add_argument(
        "--mode",
        choices=["blocking", "immediately", "stream"],
        default="blocking",
        help="stream: a SendStreamingMessage's way to its first event (stream+ to stream-)",
    )
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--seconds", type=float, default=8.0, help="per round")
    parser.add_argument("--statements", type=int, default=400, help="submissions of the baseline")
    parser.add_argument(
        "--what-if",
        choices=WHAT_IFS,
        default=None,
        help="a second traced up without the log's followers, or without one of them (bench.traced_up)",
    )
    parser.add_argument(
        "--baseline-tree",
        type=Path,
        default=None,
        help="the second traced up from this checkout (an A/B of two versions; it needs bench.traced_up)",
    )
    parser.add_argument("--worker-concurrency", type=int, default=4)
    parser.add_argument(
        "--pg-waits",
        action="store_true",
        help="sample what each up's PostgreSQL backends wait on during its rounds (bench.pg_waits)",
    )
    args = parser.parse_args(argv)
    if args.quick:
        args.rounds, args.seconds, args.statements = 1, 3.0, 150
    return args


def run(args: argparse.Namespace) -> dict[str, Any]:
    folder = Path(tempfile.mkdtemp(prefix="bench-request-hops-"))
    names = ["longhaul"] + (["longhaul-base"] if args.what_if or args.baseline_tree else [])
    other = f"up at {args.baseline_tree}" if args.baseline_tree else "up"
    label = {"longhaul": "up", "longhaul-base": f"{other}, {args.what_if}" if args.what_if else other}
    env = {name: {"BENCH_HOPS_FILE": str(folder / f"{name}.hops")} for name in names}
    if args.what_if:
        env["longhaul-base"]["BENCH_WHATIF"] = args.what_if
    info = machine_info(args.database_url)
    per_s: dict[str, list[float]] = {name: [] for name in names}
    waits: dict[str, collections.Counter[WaitKey]] = {name: collections.Counter() for name in names}
    samples = dict.fromkeys(names, 0)
    with servers(
        names,
        args.database_url,
        folder,
        args.worker_concurrency,
        args.baseline_tree,
        env,
        up_module="bench.traced_up",
    ) as urls:
        for number in range(args.rounds):
            for name, (url, pid) in round_order(urls, number):
                with ExitStack() as sampling:
                    if args.pg_waits:
                        sampler = sampling.enter_context(
                            WaitSampler(args.database_url, pids=_backends(args.database_url, pid))
                        )
                    sample = asyncio.run(run_round(url, args.mode, 1, args.seconds, client_per_caller=True))
                if args.pg_waits:
                    waits[name] += sampler.counts
                    samples[name] += sampler.samples
                per_s[name].append(sample.per_s)
                print(
                    f"round {number + 1} {label[name]:<20} {sample.per_s:7.1f} req/s, errors {sample.errors}"
                )
    outer = "stream" if args.mode == "stream" else "send"
    tables = {label[name]: hop_table(read_marks(folder / f"{name}.hops"), outer) for name in names}
    alone = statement_alone(args.database_url, args.statements)
    for title, hops in [*tables.items(), ("the submission alone (baseline)", alone)]:
        print(f"\n{title}: {hops['typical']} of {hops['calls']} calls took the most common way")
        rows = [[h["from"], h["to"], f"{h['p50_ms']:.3f}", f"{h['mean_ms']:.3f}"] for h in hops["hops"]]
        rows.append(["(first mark)", "(last mark)", f"{hops['total_p50_ms']}", ""])
        if hops["between_p50_ms"] is not None:
            rows.append(["(last mark)", "(next call)", f"{hops['between_p50_ms']}", ""])
        print(table(["from", "to", "p50 ms", "mean ms"], rows))
    pg_waits: dict[str, Any] = {}
    for name in names if args.pg_waits else []:
        rows_of = waits_table(waits[name], samples[name], statistics.fmean(per_s[name]))
        pg_waits[label[name]] = {"samples": samples[name], "top": rows_of}
        print(f"\n{label[name]}: its PostgreSQL backends, {samples[name]} samples")
        rows = [[r["wait"], r["statement"], f"{100 * r['share']:.1f}", r["ms_per_request"]] for r in rows_of]
        print(table(["running or waiting on", "statement", "% of the time", "ms per request"], rows))
    return {
        "machine": info,
        "mode": args.mode,
        "baseline_tree": None if args.baseline_tree is None else str(args.baseline_tree),
        "what_if": args.what_if,
        "rounds": args.rounds,
        "seconds_per_round": args.seconds,
        "req_per_s": {label[name]: values for name, values in per_s.items()},
        "hops": tables,
        "alone": alone,
        "pg_waits": pg_waits or None,
        "logs": str(folder),
    }


def _backends(database_url: str, pid: int) -> set[int]:
    """The PostgreSQL backends of server ``pid`` now (by its connections)."""
    with psycopg.connect(database_url, autocommit=True) as monitor:
        backends = server_backends(monitor, pid)
    if backends is None:
        raise SystemExit(
            "--pg-waits needs a TCP --database-url: on a unix socket the backends cannot be matched"
        )
    return backends


def main() -> None:
    args = parse_args()
    write_results("request_hops", run(args), args)


if __name__ == "__main__":
    main()
