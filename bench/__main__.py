"""Every benchmark in one run: each figure beside its same-run baseline, the ratio, each target's line.

    uv run python -m bench              # the full run: about 25 minutes on two cores
    uv run python -m bench --quick      # a smoke run at small sizes (a few minutes): not a verdict
    uv run python -m bench --parts a2a,sse --out /tmp/bench.json

The parts, in order: ``steps`` (``bench.step_throughput``), ``a2a`` (``bench.a2a_compare``:
the request path beside the a2a-sdk server, load at 128 clients), ``sse``
(``bench.sse_latency``), ``webhook`` (``bench.webhook_latency``), ``resume``
(``bench.resume_after_kill``) and ``files`` (``bench.big_files``: 1 GiB through the file store).
They need the machine's PostgreSQL and NATS JetStream (``--database-url``, ``--nats-url``);
each makes its own schema and stream and drops them.
Each part starts once the machine is quiet (``bench.process_cpu.settle_machine``), so that what
the part before left running does not run in its window. A part that fails is recorded as such
and the others still run. The targets' table (``bench.targets``) is printed at the end and the
whole run is written to one JSON file (default ``bench/results/bench.json``, not committed).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import subprocess
import sys
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

import psycopg

from bench import a2a_compare, big_files, resume_after_kill, sse_latency, step_throughput, webhook_latency
from bench.common import DEFAULT_DATABASE_URL, DEFAULT_NATS_URL, REPO_ROOT, Options, table, utc_now
from bench.process_cpu import settle_machine
from bench.targets import TARGETS, TIMES, Verdict, decide_all

PARTS: dict[str, Callable[[Options], dict[str, Any]]] = {
    "steps": step_throughput.run,
    "a2a": a2a_compare.run,
    "sse": sse_latency.run,
    "webhook": webhook_latency.run,
    "resume": resume_after_kill.run,
    "files": big_files.run,
}
RESULTS = REPO_ROOT / "bench" / "results" / "bench.json"
SETTLE_S = 60.0


def arguments(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m bench", description=__doc__.splitlines()[0] if __doc__ else ""
    )
    parser.add_argument("--quick", action="store_true", help="small sizes: a smoke run, not a verdict")
    parser.add_argument("--database-url", default=DEFAULT_DATABASE_URL)
    parser.add_argument("--nats-url", default=DEFAULT_NATS_URL)
    parser.add_argument("--parts", default=",".join(PARTS), help=f"comma list of {','.join(PARTS)}")
    parser.add_argument("--out", type=Path, default=RESULTS, help="the result file (JSON)")
    args = parser.parse_args(argv)
    args.parts = [p.strip() for p in args.parts.split(",") if p.strip()]
    if unknown := sorted(set(args.parts) - set(PARTS)):
        parser.error(f"unknown parts {unknown}; the parts are {','.join(PARTS)}")
    return args


def loadavg() -> list[float]:
    return [round(x, 2) for x in os.getloadavg()]


def python_speed_ms() -> float:
    """The milliseconds one million Python additions take here, the fastest of five tries.

    The processor's speed for one thread of Python, which every c=1 figure moves with: compare
    runs on different machines by it before reading a change into them.
    """
    fastest = math.inf
    for _ in range(5):
        started = time.perf_counter()
        total = 0
        for number in range(1_000_000):
            total += number
        fastest = min(fastest, time.perf_counter() - started)
    return round(fastest * 1000, 1)


def machine_info(database_url: str) -> dict[str, Any]:
    """What the figures were measured on."""
    settings = "SELECT current_setting('server_version'), current_setting('synchronous_commit')"
    with psycopg.connect(database_url, autocommit=True) as conn:
        version, sync = conn.execute(settings).fetchone() or ("?", "?")
    commit = subprocess.run(
        ["git", "rev-parse", "HEAD"], cwd=REPO_ROOT, capture_output=True, text=True, check=False
    ).stdout.strip()
    return {
        "nproc": os.cpu_count(),
        "python": sys.version.split()[0],
        "platform": platform.platform(),
        "postgresql": version,
        "synchronous_commit": sync,
        "python_ms_per_million_additions": python_speed_ms(),
        "loadavg_at_start": loadavg(),
        "git_commit": commit,
        "measured_at": utc_now().isoformat(timespec="seconds"),
    }


def run_part(name: str, options: Options) -> dict[str, Any]:
    """One part: its results (or its error), with the seconds and the load around it."""
    record: dict[str, Any] = {
        "settled_s": round(settle_machine(most_s=SETTLE_S), 1),
        "loadavg_before": loadavg(),
    }
    print(f"\n[bench] {name}: started, load {record['loadavg_before']}", flush=True)
    began = time.monotonic()
    try:
        record["results"] = PARTS[name](options)
    except Exception as error:  # noqa: BLE001 - recorded: its targets' verdicts say so
        traceback.print_exc()
        record["error"] = f"{type(error).__name__}: {error}"[:500]
    record["seconds"] = round(time.monotonic() - began, 1)
    record["loadavg_after"] = loadavg()
    outcome = "failed" if "error" in record else "done"
    print(f"[bench] {name}: {outcome} in {record['seconds']:.0f} s", flush=True)
    return record


def verdict_rows(verdicts: list[Verdict]) -> list[list[str]]:
    return [
        [
            v.target.id,
            "" if v.measured is None else v.measured.figure_text,
            "" if v.measured is None else v.measured.baseline_text,
            "" if v.ratio is None else f"{v.ratio:.2f}{TIMES}",
            v.target.rule.describe(),
            v.text(),
        ]
        for v in verdicts
    ]


HEADERS = ["target", "longhaul", "same-run baseline", "ratio", "line", "verdict"]


def markdown(verdicts: list[Verdict]) -> str:
    """The targets' table as markdown, for docs/benchmarks.md."""
    lines = ["| " + " | ".join(HEADERS) + " |", "|---|---|---|---:|---|---|"]
    for row in verdict_rows(verdicts):
        cells = [f"`{row[0]}`", *(cell.replace("|", "\\|") for cell in row[1:])]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> None:
    args = arguments(argv)
    options = Options(args.database_url, args.nats_url, args.quick)
    info = machine_info(args.database_url)
    began = time.monotonic()
    parts = {name: run_part(name, options) for name in args.parts}
    verdicts = decide_all(parts)
    print(f"\n[bench] targets ({'quick sizes: not a verdict' if args.quick else 'full sizes'}):")
    print(table(HEADERS, verdict_rows(verdicts)))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    payload = {
        "command": "python -m bench" + (" --quick" if args.quick else ""),
        "quick": args.quick,
        "machine": info,
        "finished_at": utc_now().isoformat(timespec="seconds"),
        "seconds": round(time.monotonic() - began, 1),
        "targets": [v.as_dict() for v in verdicts],
        "markdown": markdown(verdicts),
        "parts": parts,
    }
    args.out.write_text(json.dumps(payload, indent=2, default=str) + "\n")
    print(f"\nresults written to {args.out} ({len(TARGETS)} targets)")


if __name__ == "__main__":
    main()
