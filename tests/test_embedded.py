"""The embedded PostgreSQL and NATS: busy default ports, restarts that keep data, stale servers.

These always start their own embedded servers, even when ``LONGHAUL_TEST_*`` point elsewhere,
so that the path ``longhaul up`` takes on a fresh machine stays tested in CI.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import textwrap
import uuid
from collections.abc import Iterator
from contextlib import ExitStack, closing
from datetime import UTC, datetime
from pathlib import Path
from urllib.parse import urlparse

import nats
import psutil
import psycopg
import pytest

from domain.task import Task
from longhaul.embedded import EmbeddedError, EmbeddedNats, EmbeddedPostgres
from store.log.application import TaskApplication
from store.log.config import StoreConfig

NOW = datetime(2026, 1, 1, tzinfo=UTC)
DATABASE_URL_ENV, NATS_URL_ENV = "LONGHAUL_TEST_DATABASE_URL", "LONGHAUL_TEST_NATS_URL"


@pytest.fixture
def default_ports_taken() -> Iterator[None]:
    """Make sure something listens on 5432 and 4222 (ours, when no real server does)."""
    with ExitStack() as stack:
        for port in (5432, 4222):
            sock = stack.enter_context(closing(socket.socket(socket.AF_INET, socket.SOCK_STREAM)))
            try:
                sock.bind(("127.0.0.1", port))
                sock.listen()
            except OSError:
                pass  # already taken by a real server: just as good
        yield


def _port(url: str) -> int:
    port = urlparse(url).port
    assert port is not None
    return port


def _save_task(database_url: str) -> uuid.UUID:
    store = TaskApplication(StoreConfig(database_url=database_url, schema="embedded_test"))
    try:
        task = Task.submit(
            task_id=uuid.uuid4(), now=NOW, tenant="t", context_id="c", skill="echo", skill_version=1,
            message={"parts": [{"text": "hello"}]}, params={},
        )  # fmt: skip
        store.save_tasks(task)
        return task.id
    finally:
        store.close()


def _load_task(database_url: str, task_id: uuid.UUID) -> Task:
    store = TaskApplication(StoreConfig(database_url=database_url, schema="embedded_test"))
    try:
        return store.get(task_id)
    finally:
        store.close()


async def _publish(nats_url: str) -> None:
    client = await nats.connect(nats_url, max_reconnect_attempts=0)
    try:
        js = client.jetstream()
        await js.add_stream(name="EMBEDDED", subjects=["embedded.>"])
        ack = await js.publish("embedded.one", b"kept", headers={"Nats-Msg-Id": "1"})
        assert ack.seq == 1
    finally:
        await client.close()


async def _read_back(nats_url: str) -> bytes:
    client = await nats.connect(nats_url, max_reconnect_attempts=0)
    try:
        message = await client.jetstream().get_msg("EMBEDDED", 1)
        assert message.data is not None
        return message.data
    finally:
        await client.close()


@pytest.mark.usefixtures("default_ports_taken")
async def test_data_survives_a_restart_and_nothing_is_left_running(tmp_path: Path) -> None:
    postgres, nats_server = EmbeddedPostgres(tmp_path), EmbeddedNats(tmp_path)
    with postgres, nats_server:
        assert postgres.url is not None
        assert nats_server.url is not None
        assert urlparse(postgres.url).path == "/longhaul"
        assert _port(postgres.url) != 5432
        assert _port(nats_server.url) != 4222
        first_ports = (_port(postgres.url), _port(nats_server.url))
        task_id = _save_task(postgres.url)
        await _publish(nats_server.url)
        assert postgres.running_processes()
        assert nats_server.running_processes()

    assert postgres.running_processes() == []
    assert nats_server.running_processes() == []
    postgres.stop()  # idempotent
    nats_server.stop()

    again_pg, again_nats = EmbeddedPostgres(tmp_path), EmbeddedNats(tmp_path)
    with again_pg, again_nats:
        assert again_pg.url is not None
        assert again_nats.url is not None
        assert (_port(again_pg.url), _port(again_nats.url)) == first_ports  # remembered, still free
        assert _load_task(again_pg.url, task_id).skill == "echo"
        assert await _read_back(again_nats.url) == b"kept"
    assert again_pg.running_processes() == []
    assert again_nats.running_processes() == []


def test_a_busy_remembered_port_is_replaced(tmp_path: Path) -> None:
    with EmbeddedNats(tmp_path) as server:
        remembered = server.port
    assert remembered is not None
    with closing(socket.socket(socket.AF_INET, socket.SOCK_STREAM)) as squatter:
        squatter.bind(("127.0.0.1", remembered))
        squatter.listen()
        with EmbeddedNats(tmp_path) as server:
            assert server.port not in (None, remembered)


def test_a_second_process_on_the_same_data_is_refused(tmp_path: Path) -> None:
    with EmbeddedNats(tmp_path), pytest.raises(EmbeddedError, match="in use"):
        EmbeddedNats(tmp_path).start()


_CHILD = textwrap.dedent(
    """
    import os, signal, sys
    from pathlib import Path
    from longhaul.embedded import EmbeddedNats, EmbeddedPostgres
    data = Path(sys.argv[1])
    urls = [EmbeddedPostgres(data).start(), EmbeddedNats(data).start()]
    print(" ".join(urls), flush=True)
    {ending}
    """
)


def _run_child(data: Path, ending: str) -> list[str]:
    code = _CHILD.format(ending=ending)
    done = subprocess.run(
        [sys.executable, "-c", code, str(data)], capture_output=True, text=True, timeout=120, check=False
    )
    assert done.stdout, done.stderr
    return done.stdout.split()


def test_recovers_from_a_parent_killed_by_sigkill(tmp_path: Path) -> None:
    pg_url, _ = _run_child(tmp_path, "os.kill(os.getpid(), signal.SIGKILL)")
    task_id = _save_task(pg_url)  # the orphans still serve
    stale_pg, stale_nats = EmbeddedPostgres(tmp_path), EmbeddedNats(tmp_path)
    orphans = stale_pg.running_processes() + stale_nats.running_processes()
    assert orphans, "the SIGKILLed parent should have left its servers running"

    with EmbeddedPostgres(tmp_path) as postgres, EmbeddedNats(tmp_path) as nats_server:
        assert postgres.url is not None
        assert _load_task(postgres.url, task_id).id == task_id
        assert nats_server.running_processes()
        assert _alive(orphans) == []
    assert postgres.running_processes() == []
    assert nats_server.running_processes() == []


def _alive(procs: list[psutil.Process]) -> list[psutil.Process]:
    alive = []
    for proc in procs:
        try:
            if proc.is_running() and proc.status() != psutil.STATUS_ZOMBIE:
                alive.append(proc)
        except psutil.NoSuchProcess:
            pass
    return alive


def test_a_normal_exit_stops_both_servers(tmp_path: Path) -> None:
    _run_child(tmp_path, "pass  # no stop(): atexit does it")
    assert EmbeddedPostgres(tmp_path).running_processes() == []
    assert EmbeddedNats(tmp_path).running_processes() == []


def test_a_stale_postmaster_pid_does_not_block_a_start(tmp_path: Path) -> None:
    with EmbeddedPostgres(tmp_path) as postgres:
        pass
    pid_file = postgres.pgdata / "postmaster.pid"
    pid_file.write_text(f"{os.getpid()}\n{postgres.pgdata}\n0\n5432\n\n127.0.0.1\n  0 0\nready\n")
    with EmbeddedPostgres(tmp_path) as postgres:
        assert postgres.url is not None
        with psycopg.connect(postgres.url) as conn:
            assert conn.execute("SELECT 1").fetchone() == (1,)


def test_session_fixtures_use_the_configured_or_embedded_servers(database_url: str, nats_url: str) -> None:
    for url, env in ((database_url, DATABASE_URL_ENV), (nats_url, NATS_URL_ENV)):
        if os.environ.get(env):
            assert url == os.environ[env]
        else:
            assert urlparse(url).hostname == "127.0.0.1"
            assert _port(url) not in (5432, 4222)
    with psycopg.connect(database_url, connect_timeout=5) as conn:
        assert conn.execute("SELECT 1").fetchone() == (1,)


async def test_nats_fixture_answers(nats_url: str, nats_names: tuple[str, str]) -> None:
    stream, prefix = nats_names
    client = await nats.connect(nats_url, max_reconnect_attempts=0)
    try:
        js = client.jetstream()
        await js.add_stream(name=stream, subjects=[f"{prefix}.>"])
        ack = await js.publish(f"{prefix}.x", b"1")
        assert ack.stream == stream
    finally:
        await client.close()
