"""Shared fixtures: one PostgreSQL and one NATS per session, isolated names per test.

``LONGHAUL_TEST_DATABASE_URL`` / ``LONGHAUL_TEST_NATS_URL`` point the session at running servers
(``.ci/run`` sets them when PostgreSQL and NATS answer on their default ports); without them the
session starts the embedded servers of ``longhaul.embedded`` once, in a temporary folder.

Each test gets its own PostgreSQL schema and its own JetStream stream and subject prefix, so
tests never see each other's data; both are removed after the test.
"""

from __future__ import annotations

import gc
import os
import shutil
import tempfile
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import hypothesis
import nats
import psycopg
import pytest

from longhaul.cli import main
from longhaul.embedded import EmbeddedNats, EmbeddedPostgres
from longhaul.settings import Settings
from store.log.application import TaskApplication
from store.log.config import MemoryConfig, StoreConfig
from tests.support.isolation import delete_stream, drop_schema
from tests.support.nats_servers import NatsServer

# Property tests draw new examples on every local run; in CI (``CI=true``) they are derandomised
# so that a submission's result does not depend on the draw. Failures found locally are kept in
# ``.hypothesis/`` and replayed first.
hypothesis.settings.register_profile("ci", derandomize=True, print_blob=True)
if os.environ.get("CI", "").lower() in ("1", "true", "yes"):
    hypothesis.settings.load_profile("ci")

DATABASE_URL_ENV = "LONGHAUL_TEST_DATABASE_URL"
NATS_URL_ENV = "LONGHAUL_TEST_NATS_URL"


PROCESS_FOLDERS = ("crash", "e2e", "browser")
PROCESS_FILES = ("test_code_quality.py", "test_embedded.py", "test_nats_servers.py")
PROCESS_FIXTURES = frozenset({"cluster"})
SERVICE_FIXTURES = frozenset({"database_url", "nats_url"})


UNIT_LANE = "unit"
"""``uv run pytest -m unit``: the fast lane, run on every core (pytest-xdist)."""


@pytest.hookimpl(tryfirst=True)
def pytest_cmdline_main(config: pytest.Config) -> None:
    """Spread the unit lane over every core, unless the command chose (``-n 0``: one process).

    Unit tests share nothing but the processor (no server, no port, no process), so they run in
    any order on any worker; ``worksteal`` keeps both cores busy to the end. The other lanes and
    the whole suite run in one process: their crash tests time real processes on this machine's
    two cores.
    """
    if os.environ.get("PYTEST_XDIST_WORKER") or config.option.markexpr != UNIT_LANE:
        return
    if config.getoption("numprocesses", None) is None and not config.option.collectonly:
        config.option.numprocesses = "auto"
        config.option.dist = "worksteal"


def test_kind(item: pytest.Item) -> str:
    """``process`` (starts processes), ``integration`` (PostgreSQL or NATS) or ``unit`` (neither).

    Decided by folder, file, the fixtures a test uses (directly or through other fixtures) and
    whether its module imports ``subprocess``, so a test is a unit test exactly when it cannot
    reach a database, a broker or a process.
    """
    path = Path(str(item.path)).relative_to(Path(__file__).parent)
    fixtures = set(getattr(item, "fixturenames", ()))
    starts_processes = "subprocess" in vars(getattr(item, "module", None) or object())
    if (
        path.parts[0] in PROCESS_FOLDERS
        or path.name in PROCESS_FILES
        or fixtures & PROCESS_FIXTURES
        or starts_processes
    ):
        return "process"
    callspec = getattr(item, "callspec", None)
    on_postgres = callspec is not None and callspec.params.get("any_store") == "postgres"
    if fixtures & SERVICE_FIXTURES or on_postgres or item.get_closest_marker("postgres") is not None:
        return "integration"
    return "unit"


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Mark every test with its kind: ``uv run pytest -m unit`` is the fast lane."""
    for item in items:
        item.add_marker(test_kind(item))


def pytest_collection_finish(session: pytest.Session) -> None:
    """Move what every test shares (imported modules, strategies, the collected tests) out of the
    cyclic collector's way.

    The collector's full passes walk every object that survived earlier ones; without this they
    walked the whole collected suite, a few hundred milliseconds each, dozens of times a run. What
    a test makes is created after the freeze and is collected as before, so an unclosed resource
    still warns (and fails) in the same way.
    """
    gc.collect()
    gc.freeze()


class OfflineError(AssertionError):
    """A unit test tried to reach a database or a broker."""


@pytest.fixture(autouse=True)
def _unit_tests_stay_offline(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> None:
    """In a ``unit`` test every PostgreSQL or NATS connection fails: the mark cannot lie."""
    if request.node.get_closest_marker("unit") is None:
        return

    def refuse(*_: object, **__: object) -> None:
        raise OfflineError(f"{request.node.nodeid} is marked unit but connects to a server")

    monkeypatch.setattr(psycopg.Connection, "connect", refuse)
    monkeypatch.setattr(psycopg.AsyncConnection, "connect", refuse)
    monkeypatch.setattr(nats, "connect", refuse)


def _unique(prefix: str) -> str:
    return f"{prefix}{uuid.uuid4().hex[:12]}"


@pytest.fixture(scope="session")
def embedded_dir() -> Iterator[Path]:
    """The session's data folder for the embedded servers (used only when they are needed).

    It lies outside pytest's own temporary root on purpose: as root, PostgreSQL runs as an
    unprivileged user that must be able to enter every parent folder, and each new pytest run
    resets ``/tmp/pytest-of-<user>`` to mode 0700.
    """
    folder = Path(tempfile.mkdtemp(prefix="longhaul-test-"))
    yield folder
    shutil.rmtree(folder, ignore_errors=True)


@pytest.fixture(scope="session")
def database_url(request: pytest.FixtureRequest) -> Iterator[str]:
    """URL of the session's PostgreSQL: ``$LONGHAUL_TEST_DATABASE_URL``, else an embedded one."""
    url = os.environ.get(DATABASE_URL_ENV)
    if url:
        yield url
        return
    with EmbeddedPostgres(request.getfixturevalue("embedded_dir")) as server:
        assert server.url is not None
        yield server.url


@pytest.fixture(scope="session")
def nats_url(request: pytest.FixtureRequest) -> Iterator[str]:
    """URL of the session's NATS (JetStream): ``$LONGHAUL_TEST_NATS_URL``, else an embedded one."""
    url = os.environ.get(NATS_URL_ENV)
    if url:
        yield url
        return
    with EmbeddedNats(request.getfixturevalue("embedded_dir")) as server:
        assert server.url is not None
        yield server.url


@pytest.fixture
def store_config(database_url: str) -> Iterator[StoreConfig]:
    """A ``StoreConfig`` on a schema of this test's own (``t_<hex>``), dropped afterwards."""
    config = StoreConfig(database_url=database_url, schema=_unique("t_"), pool_size=2, max_overflow=4)
    yield config
    drop_schema(database_url, config.schema)


@pytest.fixture
def postgres_store(store_config: StoreConfig) -> Iterator[TaskApplication]:
    """A ``TaskApplication`` on this test's schema, closed afterwards."""
    task_store = TaskApplication(store_config)
    yield task_store
    task_store.close()


@pytest.fixture
def store(postgres_store: TaskApplication) -> TaskApplication:
    """The store of a test: on PostgreSQL (the gateway's tests override it with one in memory)."""
    return postgres_store


@pytest.fixture(params=["memory", "postgres"])
def any_store(request: pytest.FixtureRequest) -> Iterator[TaskApplication]:
    """The real ``TaskApplication`` in memory (no database needed), then on this test's schema."""
    config = MemoryConfig() if request.param == "memory" else request.getfixturevalue("store_config")
    task_store = TaskApplication(config)
    yield task_store
    task_store.close()


@pytest.fixture
def nats_names(nats_url: str) -> Iterator[tuple[str, str]]:
    """``(stream, subject_prefix)`` of this test's own; the stream is deleted afterwards if made."""
    token = uuid.uuid4().hex[:12]
    stream, prefix = f"T_{token}", f"t{token}"
    yield stream, prefix
    delete_stream(nats_url, stream)
    delete_stream(nats_url, f"{stream}_CHECKPOINTS")  # the sequencer's (store.public_form.subjects)


@pytest.fixture
def settings(
    store_config: StoreConfig,
    nats_url: str,
    nats_names: tuple[str, str],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> Settings:
    """``Settings`` for this test's schema, stream and subjects; short lease and sweep intervals.

    ``LONGHAUL_*`` variables of the calling shell are removed for the test, so they never leak in.
    """
    for name in list(os.environ):
        if name.startswith("LONGHAUL_") and name not in (DATABASE_URL_ENV, NATS_URL_ENV):
            monkeypatch.delenv(name)
    stream, prefix = nats_names
    return Settings(
        database_url=store_config.database_url,
        database_schema=store_config.schema,
        nats_url=nats_url,
        nats_stream=stream,
        nats_subject_prefix=prefix,
        data_dir=tmp_path / "data",
        lease_seconds=2.0,
        worker_grace_seconds=2.0,
        sweep_interval_seconds=0.2,
    )


@pytest.fixture
def cli(
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    store_config: StoreConfig,
    tmp_path: Path,
) -> Callable[..., tuple[int, str, str]]:
    """``cli(*args)`` runs ``longhaul ARGS`` on this test's schema: ``(exit code, stdout, stderr)``.

    ``LONGHAUL_*`` variables of the calling shell are removed first (the suite's own stay); the
    file store is a directory of the test's own (``tmp_path / "files"``).
    """
    for name in [n for n in os.environ if n.startswith("LONGHAUL_") and "TEST" not in n]:
        monkeypatch.delenv(name)
    monkeypatch.setenv("LONGHAUL_DATABASE_URL", store_config.database_url)
    monkeypatch.setenv("LONGHAUL_DATABASE_SCHEMA", store_config.schema)
    monkeypatch.setenv("LONGHAUL_FILE_STORE_URL", (tmp_path / "files").as_uri())

    def run(*args: str) -> tuple[int, str, str]:
        code = main(list(args))
        out, err = capsys.readouterr()
        return code, out, err

    return run


@pytest.fixture
def own_nats(tmp_path: Path) -> Iterator[NatsServer]:
    """A nats-server of this test's own, which it may stop, kill and start again (same port and store)."""
    server = NatsServer(tmp_path / "nats")
    server.start()
    yield server
    server.kill()
