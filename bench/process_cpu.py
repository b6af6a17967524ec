"""CPU seconds spent over a window of a benchmark: a server's, its PostgreSQL backends', the
machine's PostgreSQL's, the client's, the machine's. All of it is read from ``/proc`` (psutil).

- the server: the process and every descendant alive at the reading, each with the time of the
  children it waited for, so a child that ended inside the window is still counted once;
- the server's PostgreSQL: the backends serving the server's process tree, found at each
  reading by matching the local (address, port) of its TCP connections to
  ``pg_stat_activity``'s (``client_addr``, ``client_port``). A backend gone by the window's end
  is counted in ``server_postgres_ended``, not in the figure, so the figure is a lower bound,
  exact when the server keeps its connections (a pool). Over a unix socket nothing matches and
  the figure is None;
- PostgreSQL: every process named ``postgres`` on the machine: the whole machine's PostgreSQL,
  everyone's work on it; None when no such process is visible;
- the client: this process (``time.process_time``), every thread of it;
- the machine: every core's busy time (all but idle and iowait), everyone's.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import psutil
import psycopg
from psycopg.rows import TupleRow

POSTGRES = "postgres"
IPV4_MAPPED = "::ffff:"
"""An IPv4 address's prefix in an IPv6 socket's, which PostgreSQL's ``host(client_addr)`` leaves out."""


def own_and_children(times: Any) -> float:
    """A process's utime + stime and its waited-for children's (its ``cpu_times()``), in seconds."""
    return float(times.user + times.system + times.children_user + times.children_system)


def tree(pid: int) -> list[psutil.Process]:
    """Process ``pid`` and its descendants alive now."""
    root = psutil.Process(pid)
    return [root, *root.children(recursive=True)]


def tree_cpu_seconds(pid: int) -> float:
    """The CPU seconds of process ``pid`` and of its descendants alive now (see the module)."""
    total = 0.0
    for process in tree(pid):
        try:
            total += own_and_children(process.cpu_times())
        except psutil.NoSuchProcess:
            if process.pid == pid:
                raise
    return total


def postgres_cpu_by_pid() -> dict[int, float]:
    """The CPU seconds of every ``postgres`` process on the machine (see the module), by pid."""
    return {  # a process gone is left out, and one not readable has None for its times
        process.pid: own_and_children(process.info["cpu_times"])
        for process in psutil.process_iter(["name", "cpu_times"])
        if process.info["name"] == POSTGRES and process.info["cpu_times"] is not None
    }


def local_ends(pid: int) -> set[tuple[str, int]]:
    """The local (address, port) of every TCP connection of process ``pid`` and its descendants."""
    ends = set()
    for process in tree(pid):
        try:
            connections = process.net_connections(kind="tcp")
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            continue
        ends |= {(c.laddr.ip.removeprefix(IPV4_MAPPED), c.laddr.port) for c in connections if c.raddr}
    return ends


def server_backends(monitor: psycopg.Connection[TupleRow], pid: int) -> set[int] | None:
    """The pids of the PostgreSQL backends serving process ``pid``'s tree now (see the module);
    None when ``monitor`` (autocommit: a fresh ``pg_stat_activity`` each call) is on a unix socket."""
    if monitor.info.host.startswith("/"):
        return None
    ends = local_ends(pid)
    rows = monitor.execute(
        "SELECT pid, host(client_addr), client_port FROM pg_stat_activity WHERE client_port > 0"
    ).fetchall()
    return {int(backend) for backend, ip, port in rows if (ip, port) in ends}


QUIET_CORES = 0.1
"""Below this many cores of the servers' and PostgreSQL's CPU, a machine is quiet (``settle``)."""


def settle(pids: list[int], *, most_s: float) -> float:
    """Wait until the servers ``pids`` (their process trees) and the machine's PostgreSQL together
    spend under ``QUIET_CORES`` over a quarter of a second, or ``most_s`` passed; the seconds waited.

    So a round does not start while the work the round before left (another server's tasks'
    worker, projector, relay catching up) still runs on the same cores.
    """

    def busy() -> float:
        return sum(tree_cpu_seconds(pid) for pid in pids) + sum(postgres_cpu_by_pid().values())

    return _quiet(busy, most_s=most_s, sample_s=0.25, quiet_cores=QUIET_CORES)


MACHINE_QUIET_CORES = 0.3
"""Below this many of the machine's cores busy, it is quiet enough to start a part (``settle_machine``)."""


def settle_machine(
    *, most_s: float, sample_s: float = 0.5, quiet_cores: float = MACHINE_QUIET_CORES
) -> float:
    """Wait until the whole machine spends under ``quiet_cores`` over one ``sample_s``, or ``most_s``
    passed; the seconds waited.

    So one benchmark does not start while what the one before left still runs (PostgreSQL's
    checkpoint or autovacuum after many commits, processes still exiting). Every process counts:
    the machine's NATS, PostgreSQL and whatever else runs there.
    """
    return _quiet(busy_cpu_seconds, most_s=most_s, sample_s=sample_s, quiet_cores=quiet_cores)


def _quiet(busy: Callable[[], float], *, most_s: float, sample_s: float, quiet_cores: float) -> float:
    """Wait until ``busy`` (CPU seconds) grows by under ``quiet_cores`` per second over one ``sample_s``."""
    started = time.monotonic()
    before = busy()
    while time.monotonic() - started < most_s:
        time.sleep(sample_s)
        now = busy()
        if (now - before) / sample_s < quiet_cores:
            break
        before = now
    return time.monotonic() - started


def busy_cpu_seconds() -> float:
    """The machine's busy CPU seconds, summed over its cores (idle and iowait left out)."""
    times = psutil.cpu_times()
    return float(sum(times) - times.idle - getattr(times, "iowait", 0.0))


@dataclass(frozen=True)
class Reading:
    """The counters at one moment; two readings give a window's CPU (``spent``)."""

    at: float
    server: float
    server_postgres: dict[int, float] | None  # by backend pid; None: not read
    postgres: float | None
    client: float
    machine: float


def read(server_pid: int, monitor: psycopg.Connection[TupleRow] | None = None) -> Reading:
    """The counters now; the server's PostgreSQL backends' only with a ``monitor`` connection.

    The server's backends are read in the same pass as the whole machine's PostgreSQL (a backend
    that ended, or is not visible, is left out of both), so that their figure is part of it."""
    backends = None if monitor is None else server_backends(monitor, server_pid)
    postgres = postgres_cpu_by_pid()
    return Reading(
        at=time.perf_counter(),
        server=tree_cpu_seconds(server_pid),
        server_postgres=None if backends is None else {p: postgres[p] for p in backends if p in postgres},
        postgres=sum(postgres.values()) if postgres else None,
        client=time.process_time(),  # this process, every thread (not its children)
        machine=busy_cpu_seconds(),
    )


def backends_spent(before: dict[int, float], after: dict[int, float]) -> dict[str, float]:
    """The server's backends' CPU seconds between two readings, and how many came and went.

    A backend of ``after`` counts ``after - before``, all of it when it is new (or when its pid
    was taken again by a new backend: less than before); one of ``before`` only is ``ended``.
    """
    seconds = 0.0
    for pid, now in after.items():
        then = before.get(pid, 0.0)
        seconds += now - then if now >= then else now
    return {
        "server_postgres": seconds,
        "server_postgres_backends": float(len(after)),
        "server_postgres_started": float(len(after.keys() - before.keys())),
        "server_postgres_ended": float(len(before.keys() - after.keys())),
    }


def spent(before: Reading, after: Reading) -> dict[str, float | None]:
    """The CPU seconds of each between two readings, and the window's wall seconds."""
    postgres = None if before.postgres is None or after.postgres is None else after.postgres - before.postgres
    window: dict[str, float | None] = {
        "seconds": after.at - before.at,
        "server": after.server - before.server,
        "server_postgres": None,
        "postgres": postgres,
        "client": after.client - before.client,
        "machine": after.machine - before.machine,
    }
    if before.server_postgres is not None and after.server_postgres is not None:
        window |= backends_spent(before.server_postgres, after.server_postgres)
    return window
