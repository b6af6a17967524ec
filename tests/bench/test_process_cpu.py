"""``bench.process_cpu`` on real processes: a server's children count, ended or alive, and so do
the backends of the machine's PostgreSQL that ended; a server's own backends are found through
its connections, and one that ended inside the window is counted as ended, not in the figure."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Iterator

import psutil
import psycopg
import pytest

from bench.process_cpu import (
    backends_spent,
    busy_cpu_seconds,
    postgres_cpu_by_pid,
    read,
    server_backends,
    settle_machine,
    spent,
    tree_cpu_seconds,
)

CHILD = """
import sys, time
t = time.process_time()
while time.process_time() - t < 0.32:  # /proc counts whole clock ticks (10 ms): 0.3 s may read 0.29
    pass
if sys.argv[1] == "stay":
    print("burnt", flush=True)
    time.sleep(60)
"""
SERVER = """
import subprocess, sys, time
if sys.argv[1] == "end":
    subprocess.run([sys.executable, "-c", sys.argv[2], "end"])  # waited for: in cutime
else:
    child = subprocess.Popen([sys.executable, "-c", sys.argv[2], "stay"], stdout=subprocess.PIPE)
    child.stdout.readline()  # alive, its 0.32 s in its own utime
print("ready", flush=True)
time.sleep(60)
"""


@pytest.fixture(params=["end", "stay"], ids=["child ended", "child alive"])
def server(request: pytest.FixtureRequest) -> Iterator[subprocess.Popen[str]]:
    """A process whose child burnt 0.32 s of CPU and ended, or burnt it and stays."""
    process = subprocess.Popen(
        [sys.executable, "-c", SERVER, request.param, CHILD], stdout=subprocess.PIPE, text=True
    )
    try:
        assert process.stdout is not None
        assert process.stdout.readline().strip() == "ready"
        yield process
    finally:
        for child in psutil.Process(process.pid).children(recursive=True):
            child.kill()
        process.kill()
        process.wait(10)
        if process.stdout is not None:
            process.stdout.close()


def test_a_server_s_cpu_includes_its_child_s(server: subprocess.Popen[str]) -> None:
    assert tree_cpu_seconds(server.pid) >= 0.3


def test_the_machine_s_busy_time_and_this_process_s_grow_with_work() -> None:
    before, own = busy_cpu_seconds(), read(os.getpid()).client
    t = time.process_time()
    while time.process_time() - t < 0.2:
        pass
    assert busy_cpu_seconds() - before >= 0.15
    assert read(os.getpid()).client - own >= 0.2


def test_an_ended_backend_s_cpu_is_still_counted_in_postgresql_s(database_url: str) -> None:
    if not postgres_cpu_by_pid():
        pytest.skip("no postgres process visible on this machine")
    before = read(os.getpid())
    with psycopg.connect(database_url) as conn:  # its backend ends when it closes
        conn.execute("SELECT count(*) FROM generate_series(1, 3000000)").fetchone()
    deadline = time.monotonic() + 5
    while True:
        window = spent(before, read(os.getpid()))
        if (window["postgres"] or 0.0) >= 0.1 or time.monotonic() > deadline:
            break
        time.sleep(0.1)
    assert window["postgres"] is not None
    assert window["postgres"] >= 0.1


CLIENT = """
import sys, psycopg
url = sys.argv[1]
conn = psycopg.connect(url, autocommit=True)
print(conn.info.backend_pid, flush=True)
for line in sys.stdin:
    if line.strip() == "reconnect":
        conn.close()
        conn = psycopg.connect(url, autocommit=True)
    conn.execute("SELECT count(*) FROM generate_series(1, 3000000)").fetchone()
    print(conn.info.backend_pid, flush=True)
"""


def test_a_server_s_own_backends_are_found_through_its_connections_and_counted(database_url: str) -> None:
    if not postgres_cpu_by_pid():
        pytest.skip("no postgres process visible on this machine")
    client = subprocess.Popen(
        [sys.executable, "-c", CLIENT, database_url], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    assert client.stdin is not None
    assert client.stdout is not None

    def burn(command: str) -> int:
        assert client.stdin is not None
        assert client.stdout is not None
        client.stdin.write(command + "\n")
        client.stdin.flush()
        return int(client.stdout.readline())

    try:
        first = int(client.stdout.readline())
        with psycopg.connect(database_url, autocommit=True) as monitor:
            assert server_backends(monitor, client.pid) == {first}  # not the monitor's, nor others'
            before = read(client.pid, monitor)
            assert burn("burn") == first
            kept = spent(before, read(client.pid, monitor))
            before = read(client.pid, monitor)
            second = burn("reconnect")
            moved = spent(before, read(client.pid, monitor))
    finally:
        client.stdin.close()
        client.wait(10)
        client.stdout.close()
    assert second != first
    assert (kept["server_postgres"] or 0.0) >= 0.1
    assert (
        kept["server_postgres_backends"],
        kept["server_postgres_started"],
        kept["server_postgres_ended"],
    ) == (
        1,
        0,
        0,
    )
    # the machine's figure holds the backend's (up to the rounding of sums of large floats)
    assert (kept["postgres"] or 0.0) >= (kept["server_postgres"] or 0.0) - 1e-9
    assert (moved["server_postgres"] or 0.0) >= 0.1  # the new backend's, all of it inside the window
    assert (moved["server_postgres_started"], moved["server_postgres_ended"]) == (1, 1)


def test_without_a_monitor_connection_the_server_s_backends_are_not_read() -> None:
    window = spent(read(os.getpid()), read(os.getpid()))
    assert window["server_postgres"] is None
    assert "server_postgres_ended" not in window


def test_backends_are_counted_from_the_start_or_whole_when_new_and_ended_ones_apart() -> None:
    window = backends_spent({1: 2.0, 2: 5.0, 3: 1.0}, {1: 2.5, 2: 0.5, 4: 0.25})
    # 1 kept: 0.5; 2's pid taken again by a new backend (less than before): 0.5; 4 new: 0.25; 3 ended
    assert window == {
        "server_postgres": 1.25,
        "server_postgres_backends": 3.0,
        "server_postgres_started": 1.0,
        "server_postgres_ended": 1.0,
    }


def test_the_machine_is_not_quiet_while_a_process_burns_a_core_and_is_once_it_ended() -> None:
    """``settle_machine``, run before each part of ``bench.targets``, waits out a busy core."""
    burner = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    try:
        time.sleep(0.3)  # started and burning
        assert settle_machine(most_s=1.5, sample_s=0.25, quiet_cores=0.5) >= 1.5
    finally:
        burner.kill()
        burner.wait(10)
    # One core less busy: under 1.5 of the two at once (room left for the rest of the machine).
    assert settle_machine(most_s=5.0, sample_s=0.25, quiet_cores=1.5) < 1.0
