"""What every benchmark shares: a run's options, a fresh schema and stream, processes, figures, tables."""

from __future__ import annotations

import asyncio
import json
import math
import os
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import nats
import nats.js.errors
import psycopg
from psycopg import sql

from domain.task import Task

REPO_ROOT = Path(__file__).resolve().parents[1]
DEFAULT_DATABASE_URL = "postgresql://postgres@127.0.0.1:5432/test"
DEFAULT_NATS_URL = "nats://127.0.0.1:4222"
SKILL_MODULES = ["bench.noop_skills"]
TENANT = "bench"


@dataclass(frozen=True)
class Options:
    """What every part of a run is given: where PostgreSQL and NATS are, and the sizes to use."""

    database_url: str
    nats_url: str
    quick: bool


def utc_now() -> datetime:
    return datetime.now(UTC)


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on (now)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


# ----------------------------------------------------------------------------- PostgreSQL and NATS


@contextmanager
def fresh_schema(database_url: str, name: str) -> Iterator[str]:
    """A new, empty schema for one run; dropped (with everything in it) at the end."""
    schema = f"bench_{name}_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(database_url, autocommit=True) as conn:
        conn.execute(sql.SQL("CREATE SCHEMA {}").format(sql.Identifier(schema)))
    try:
        yield schema
    finally:
        with psycopg.connect(database_url, autocommit=True) as conn:
            conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(schema)))


@contextmanager
def stream_deleted(nats_url: str, stream: str) -> Iterator[str]:
    """``stream``, the JetStream stream of one run, deleted at the end (its messages off the disk;
    quietly if none)."""

    async def delete() -> None:
        client = await nats.connect(nats_url)
        try:
            with suppress(nats.js.errors.NotFoundError):
                await client.jetstream().delete_stream(stream)
        finally:
            await client.close()

    try:
        yield stream
    finally:
        asyncio.run(delete())


def new_task(skill: str, params: dict[str, Any] | None = None) -> Task:
    """A task of ``skill`` submitted now, not saved."""
    return Task.submit(
        task_id=uuid.uuid4(),
        now=utc_now(),
        tenant=TENANT,
        context_id=str(uuid.uuid4()),
        skill=skill,
        skill_version=1,
        message={"messageId": str(uuid.uuid4()), "role": "ROLE_USER", "parts": [{"text": "go"}]},
        params=params or {},
    )


def leased_task() -> Task:
    """A one-step task submitted and leased to the benchmark for an hour, not saved."""
    task = new_task("bench-noop-1")
    now = utc_now()
    task.grant_lease(worker="bench", now=now, until=now + timedelta(hours=1))
    return task


# ----------------------------------------------------------------------------- processes


def process_env() -> dict[str, str]:
    """The environment of a process the benchmark starts: this one's, without its LONGHAUL_*."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("LONGHAUL_")}
    return env | {"PYTHONUNBUFFERED": "1", "PYTHONPATH": str(REPO_ROOT)}


def longhaul_env(database_url: str, schema: str, **settings: Any) -> dict[str, str]:
    """The environment of a ``longhaul`` process on ``schema``, ``settings`` as LONGHAUL_* variables."""
    env = process_env() | {
        "LONGHAUL_DATABASE_URL": database_url,
        "LONGHAUL_DATABASE_SCHEMA": schema,
        "LONGHAUL_SKILL_MODULES": json.dumps(SKILL_MODULES),
    }
    return env | {f"LONGHAUL_{key.upper()}": str(value) for key, value in settings.items()}


def python(module: str, *args: str) -> subprocess.Popen[str]:
    """``python -m <module> <args...>``, its stdout a pipe to this process."""
    command = [sys.executable, "-m", module, *args]
    return subprocess.Popen(command, cwd=REPO_ROOT, env=process_env(), stdout=subprocess.PIPE, text=True)


def start(module: list[str], env: dict[str, str], log: Path) -> subprocess.Popen[bytes]:
    """``python -m <module...>`` in a session of its own, its output in ``log``."""
    with log.open("ab") as out:
        return subprocess.Popen(
            [sys.executable, "-m", *module],
            env=env,
            cwd=REPO_ROOT,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )


def stop(process: subprocess.Popen[Any], timeout: float = 20.0) -> int:
    """SIGTERM, then SIGKILL after ``timeout``: the exit code."""
    process.terminate()
    try:
        return process.wait(timeout)
    except subprocess.TimeoutExpired:
        process.kill()
        return process.wait(10)


@contextmanager
def serving(
    module: list[str], env: dict[str, str], log: Path, port: int
) -> Iterator[subprocess.Popen[bytes]]:
    """An A2A server, ``python -m <module...>`` (``start``), once it answers its agent card on
    ``port`` (a minute at the most); stopped at the end."""
    base_url = f"http://127.0.0.1:{port}"
    process = start(module, env, log)
    deadline = time.monotonic() + 60.0
    try:
        while True:
            try:
                httpx.get(f"{base_url}/.well-known/agent-card.json", timeout=2).raise_for_status()
                break
            except httpx.HTTPError:
                if process.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(
                        f"{base_url} does not serve:\n{log.read_text(errors='replace')}"
                    ) from None
                time.sleep(0.1)
        yield process
    finally:
        stop(process, 30.0)


AT_WORK = {"worker": " started (concurrency", "relay": "is the leader", "dispatcher": "following stream"}
"""What the log of each ``longhaul`` command ``running`` starts says once the process is at work."""


@contextmanager
def running(command: str, env: dict[str, str], log: Path) -> Iterator[subprocess.Popen[bytes]]:
    """A ``longhaul <command>`` process, its output in ``log``, once it is at work (a minute at the
    most; the process exiting first: an error); stopped at the end."""
    process = start(["longhaul.cli", command], env, log)
    began = time.monotonic()
    try:
        while AT_WORK[command] not in log.read_text(errors="replace"):
            if process.poll() is not None:
                raise RuntimeError(f"exited with {process.returncode}:\n{log.read_text(errors='replace')}")
            if time.monotonic() - began > 60.0:
                raise TimeoutError(f"{AT_WORK[command]!r} not in {log} after 60 s")
            time.sleep(0.02)
        yield process
    finally:
        stop(process)


def paced(threads: int, rate: float, seconds: float, action: Callable[[int], None]) -> float:
    """``action(thread)`` from ``threads`` threads, ``rate`` calls a second in all, for ``seconds``
    (one thread alone falls behind a rate of commits of a few ms each): the seconds it took."""

    def loop(index: int) -> None:
        began = next_at = time.monotonic()
        while time.monotonic() - began < seconds:
            action(index)
            next_at += threads / rate
            time.sleep(max(0.0, next_at - time.monotonic()))

    began = time.monotonic()
    with ThreadPoolExecutor(threads) as pool:
        list(pool.map(loop, range(threads)))  # a thread's error is raised here
    return time.monotonic() - began


# ----------------------------------------------------------------------------- figures


def percentile(values: Sequence[float], q: float) -> float:
    """The ``q`` quantile (0..1) by linear interpolation; NaN for no values."""
    if not values:
        return float("nan")
    ordered = sorted(values)
    pos = q * (len(ordered) - 1)
    low = int(pos)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (pos - low)


def summary_ms(seconds: Sequence[float]) -> dict[str, float]:
    """n, median, p99 and max of durations given in seconds, in milliseconds (NaN for none)."""
    ms = [s * 1000 for s in seconds]
    quantiles = {"median_ms": 0.5, "p99_ms": 0.99, "max_ms": 1.0}
    return {"n": len(ms)} | {name: round(percentile(ms, q), 3) for name, q in quantiles.items()}


def table(headers: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    """A plain-text table, numbers right-aligned."""

    def cell(value: Any) -> str:
        if isinstance(value, float):
            if math.isnan(value):
                return "-"
            return f"{value:,.2f}" if abs(value) < 100 else f"{value:,.0f}"
        if isinstance(value, int):
            return f"{value:,}"
        return "-" if value is None else str(value)

    text = [[cell(v) for v in row] for row in rows]
    widths = [max(len(h), *(len(r[i]) for r in text)) if text else len(h) for i, h in enumerate(headers)]

    def line(cells: Sequence[str]) -> str:
        return "  ".join(
            c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in enumerate(zip(cells, widths, strict=True))
        )

    return "\n".join([line(headers), "  ".join("-" * w for w in widths), *(line(r) for r in text)])
