"""``bench.process_cpu`` on real processes: a server's children count, ended or alive, and so do
the backends of the machine's PostgreSQL that ended."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Iterator

import psutil
import psycopg
import pytest

from bench.process_cpu import busy_cpu_seconds, postgres_cpu_seconds, read, spent, tree_cpu_seconds

CHILD = """
import sys, time
t = time.process_time()
while time.process_time() - t < 0.3:
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
    child.stdout.readline()  # alive, its 0.3 s in its own utime
print("ready", flush=True)
time.sleep(60)
"""


@pytest.fixture(params=["end", "stay"], ids=["child ended", "child alive"])
def server(request: pytest.FixtureRequest) -> Iterator[subprocess.Popen[str]]:
    """A process whose child burnt 0.3 s of CPU and ended, or burnt it and stays."""
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


def test_the_machine_s_busy_time_grows_with_work() -> None:
    before = busy_cpu_seconds()
    t = time.process_time()
    while time.process_time() - t < 0.2:
        pass
    assert busy_cpu_seconds() - before >= 0.15


def test_an_ended_backend_s_cpu_is_still_counted_in_postgresql_s(database_url: str) -> None:
    if postgres_cpu_seconds() is None:
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
