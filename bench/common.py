"""Helpers every benchmark shares: a fresh schema, percentiles, tables, JSON results, machine info."""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import os
import platform
import socket
import statistics
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import nats
import nats.js.errors
import psycopg
from psycopg import sql

DEFAULT_DATABASE_URL = "postgresql://postgres@127.0.0.1:5432/test"
RESULTS_DIR = Path(__file__).resolve().parent / "results"
REPO_ROOT = Path(__file__).resolve().parents[1]


QUICK_HELP = "small sizes: finishes in under a minute"


def base_parser(description: str, *, quick_help: str = QUICK_HELP) -> argparse.ArgumentParser:
    """The flags every benchmark takes; ``quick_help``: what ``--quick`` does, for one that differs."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--database-url", default=DEFAULT_DATABASE_URL)
    parser.add_argument("--quick", action="store_true", help=quick_help)
    parser.add_argument("--no-json", action="store_true", help="do not write bench/results/<name>.json")
    parser.add_argument("--tag", help="write bench/results/<name>.<tag>.json (a variant run) instead")
    return parser


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on (now)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def utc_now() -> datetime:
    return datetime.now(UTC)


@contextmanager
def fresh_schema(database_url: str, name: str) -> Iterator[str]:
    """A new, empty schema for one run; dropped (with everything in it) at the end."""
    schema = f"bench_{name}_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(database_url, autocommit=True) as conn:
        conn.execute(sql.SQL("CREATE SCHEMA {}").format(sql.Identifier(schema)))
    try:
        yield schema
    finally:
        drop_schema(database_url, schema)


@contextmanager
def stream_deleted(nats_url: str, stream: str) -> Iterator[str]:
    """``stream``, the JetStream stream of one run, deleted at the end (if anything made it)."""
    try:
        yield stream
    finally:
        delete_stream(nats_url, stream)


def delete_stream(nats_url: str, stream: str) -> None:
    """Delete a run's JetStream stream, quietly if it does not exist; callable from async code too.

    A run that leaves its stream behind leaves its messages on the NATS server's disk, and the
    next runs share the server with them.
    """

    async def delete() -> None:
        client = await nats.connect(nats_url)
        try:
            await client.jetstream().delete_stream(stream)
        except nats.js.errors.NotFoundError:
            pass
        finally:
            await client.close()

    thread = threading.Thread(target=asyncio.run, args=(delete(),), name="delete-stream")
    thread.start()
    thread.join()


def drop_schema(database_url: str, schema: str) -> None:
    with psycopg.connect(database_url, autocommit=True) as conn:
        conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(schema)))


def percentile(values: Sequence[float], q: float) -> float:
    """The ``q`` quantile (0..1) by linear interpolation; NaN for no values."""
    if not values:
        return float("nan")
    ordered = sorted(values)
    if len(ordered) == 1:
        return ordered[0]
    pos = q * (len(ordered) - 1)
    low = int(pos)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (pos - low)


def summary_ms(seconds: Sequence[float]) -> dict[str, float]:
    """n, median, p95, p99, min, max, mean of durations given in seconds, in milliseconds."""
    ms = [s * 1000 for s in seconds]
    return {
        "n": len(ms),
        "median_ms": round(statistics.median(ms), 3) if ms else float("nan"),
        "p95_ms": round(percentile(ms, 0.95), 3),
        "p99_ms": round(percentile(ms, 0.99), 3),
        "min_ms": round(min(ms), 3) if ms else float("nan"),
        "max_ms": round(max(ms), 3) if ms else float("nan"),
        "mean_ms": round(statistics.fmean(ms), 3) if ms else float("nan"),
    }


def table(headers: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    """A plain-text table with right-aligned numbers."""

    def cell(value: Any) -> str:
        if isinstance(value, float):
            if math.isnan(value):
                return "-"
            return f"{value:,.2f}" if abs(value) < 100 else f"{value:,.0f}"
        if isinstance(value, int):
            return f"{value:,}"
        return str(value)

    text = [[cell(v) for v in row] for row in rows]
    widths = [max(len(h), *(len(r[i]) for r in text)) if text else len(h) for i, h in enumerate(headers)]

    def line(cells: Sequence[str]) -> str:
        padded = [
            c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in enumerate(zip(cells, widths, strict=True))
        ]
        return "  ".join(padded)

    lines = [line(headers), "  ".join("-" * w for w in widths), *(line(r) for r in text)]
    return "\n".join(lines)


SPEED_ADDITIONS = 1_000_000
SPEED_TRIES = 5


def python_speed_ms() -> float:
    """The milliseconds one million Python additions take here, the fastest of a few tries.

    The processor's speed for one thread of Python: what a c=1 figure, one GIL's worth of work
    per request, moves with. Machines of the same kind have differed twofold between sessions
    (docs/benchmarks.md §11 "Session 33"); a ratio to a baseline of the same run does not cancel
    that out when the two servers spend their time differently.
    """
    fastest = math.inf
    for _ in range(SPEED_TRIES):
        started = time.perf_counter()
        total = 0
        for number in range(SPEED_ADDITIONS):
            total += number
        fastest = min(fastest, time.perf_counter() - started)
    return round(fastest * 1000, 1)


def machine_info(database_url: str) -> dict[str, Any]:
    """What the figures were measured on (the processor's speed too: ``python_speed_ms``)."""
    with psycopg.connect(database_url, autocommit=True) as conn:
        pg_version = conn.execute("SHOW server_version").fetchone()
        sync = conn.execute("SHOW synchronous_commit").fetchone()
    try:
        load = os.getloadavg()
    except OSError:
        load = (float("nan"),) * 3
    try:
        commit = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"],
            cwd=REPO_ROOT,
            capture_output=True,
            text=True,
            check=False,
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "status", "--porcelain", "--untracked-files=no"],
            cwd=REPO_ROOT,
            capture_output=True,
            text=True,
            check=False,
        ).stdout.strip()
    except OSError:
        commit, dirty = "", ""
    return {
        "nproc": os.cpu_count(),
        "python": sys.version.split()[0],
        "platform": platform.platform(),
        "postgresql": pg_version[0] if pg_version else "?",
        "psycopg_impl": psycopg.pq.__impl__,
        "synchronous_commit": sync[0] if sync else "?",
        "loadavg_at_start": [round(x, 2) for x in load],
        "python_ms_per_million_additions": python_speed_ms(),
        "git_commit": commit,
        "git_tree_dirty": bool(dirty),
        "measured_at": utc_now().isoformat(timespec="seconds"),
    }


def write_results(name: str, payload: dict[str, Any], args: argparse.Namespace) -> Path | None:
    """Write ``bench/results/<name>[.<tag>][.quick].json``."""
    if args.no_json:
        return None
    RESULTS_DIR.mkdir(parents=True, exist_ok=True)
    stem = f"{name}.{args.tag}" if args.tag else name
    path = RESULTS_DIR / (f"{stem}.quick.json" if args.quick else f"{stem}.json")
    payload = {**payload, "command": " ".join(["python -m", f"bench.{name}", *sys.argv[1:]])}
    path.write_text(json.dumps(payload, indent=2, default=str) + "\n")
    print(f"\nresults written to {path.relative_to(REPO_ROOT)}")
    return path


class Stopwatch:
    """``with Stopwatch() as sw: ...; sw.seconds``."""

    def __enter__(self) -> Stopwatch:
        self.start = time.perf_counter()
        self.seconds = 0.0
        return self

    def __exit__(self, *exc: object) -> None:
        self.seconds = time.perf_counter() - self.start
