"""CPU seconds spent over a window of a benchmark: a server's, the machine's PostgreSQL's, the client's.

The one place a benchmark reads CPU time: of a process it started (``tree_cpu_seconds``), of
itself (``this_process_seconds``), of PostgreSQL and of the machine.

All of it is read from ``/proc`` through psutil (``/proc/<pid>/stat``: utime + stime, and cutime +
cstime, the time of the children a process waited for; ``/proc/stat`` for the whole machine):

- the server: the process and every descendant alive at the reading, each with its waited-for
  children, so a child that ended inside the window is still counted once;
- PostgreSQL: every process named ``postgres`` on the machine, the same way (the postmaster
  waits for each backend that ends), so it is **the whole machine's PostgreSQL**: every database
  and every other engineer's work on it, not one benchmark's; None when no such process is
  visible (a server on another host);
- the client: this process (the load client of ``bench.a2a_compare``), every thread of it
  (``time.process_time``: the kernel's per-process clock, finer than ``/proc``'s ticks);
- the machine: every core's busy time (all but idle and iowait), everyone's.

A process that ends between the listing and its reading is left out of that reading.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import psutil

POSTGRES = "postgres"


def own_and_children(process: psutil.Process) -> float:
    """``process``'s utime + stime and its waited-for children's, in seconds."""
    times = process.cpu_times()
    return float(times.user + times.system + times.children_user + times.children_system)


def tree_cpu_seconds(pid: int) -> float:
    """The CPU seconds of process ``pid`` and of its descendants alive now (see the module)."""
    root = psutil.Process(pid)
    total = own_and_children(root)
    for child in root.children(recursive=True):
        try:
            total += own_and_children(child)
        except psutil.NoSuchProcess:
            continue
    return total


def postgres_cpu_seconds() -> float | None:
    """The CPU seconds of every ``postgres`` process on the machine; None if none is visible."""
    total, seen = 0.0, False
    for process in psutil.process_iter(["name"]):
        if process.info["name"] != POSTGRES:
            continue
        try:
            total += own_and_children(process)
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            continue
        seen = True
    return total if seen else None


def this_process_seconds() -> float:
    """This process's user + system CPU seconds so far, every thread's (not its children's)."""
    return time.process_time()


def busy_cpu_seconds() -> float:
    """The machine's busy CPU seconds, summed over its cores (idle and iowait left out)."""
    times = psutil.cpu_times()
    return float(sum(times) - times.idle - getattr(times, "iowait", 0.0))


@dataclass(frozen=True)
class Reading:
    """The counters at one moment; two readings give a window's CPU (``spent``)."""

    at: float
    server: float
    postgres: float | None
    client: float
    machine: float


def read(server_pid: int) -> Reading:
    return Reading(
        at=time.perf_counter(),
        server=tree_cpu_seconds(server_pid),
        postgres=postgres_cpu_seconds(),
        client=this_process_seconds(),
        machine=busy_cpu_seconds(),
    )


def spent(before: Reading, after: Reading) -> dict[str, float | None]:
    """The CPU seconds of each between two readings, and the window's wall seconds."""
    postgres = None if before.postgres is None or after.postgres is None else after.postgres - before.postgres
    return {
        "seconds": after.at - before.at,
        "server": after.server - before.server,
        "postgres": postgres,
        "client": after.client - before.client,
        "machine": after.machine - before.machine,
    }
