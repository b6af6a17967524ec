"""Run ``longhaul`` subcommands as real processes, the way an operator would."""

from __future__ import annotations

import asyncio
import inspect
import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

import httpx

from longhaul.settings import Settings


def free_port() -> int:
    """A TCP port nobody listens on right now."""
    return free_ports(1)[0]


def free_ports(count: int) -> list[int]:
    """``count`` different TCP ports nobody listens on right now.

    Each is held until all are chosen: ``free_port()`` called again may give a port it gave
    before, once the socket that found it is closed.
    """
    sockets = [socket.socket() for _ in range(count)]
    try:
        for sock in sockets:
            sock.bind(("127.0.0.1", 0))
        return [int(sock.getsockname()[1]) for sock in sockets]
    finally:
        for sock in sockets:
            sock.close()


def settings_env(settings: Settings, **overrides: str) -> dict[str, str]:
    """The process environment that gives a child process ``settings`` (plus ``overrides``)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("LONGHAUL_")}
    values = settings.model_dump(mode="json")
    for name, value in values.items():
        if value is not None:
            text = json.dumps(value) if isinstance(value, list) else str(value)
            env[f"LONGHAUL_{name.upper()}"] = text
    env.update({f"LONGHAUL_{k.upper()}": v for k, v in overrides.items()})
    env["PYTHONUNBUFFERED"] = "1"
    return env


class LonghaulProcess:
    """One ``longhaul <command>`` child process with its output in a log file."""

    def __init__(self, args: list[str], env: dict[str, str], log_path: Path) -> None:
        self.args = args
        self.log_path = log_path
        with log_path.open("ab") as log:  # the child keeps its own descriptor
            self.popen = subprocess.Popen(
                [sys.executable, "-m", "longhaul.cli", *args],
                env=env,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )

    @property
    def pid(self) -> int:
        """The child's process id."""
        return self.popen.pid

    def log(self) -> str:
        """Everything the process printed so far."""
        return self.log_path.read_text(errors="replace")

    def signal(self, sig: signal.Signals) -> None:
        """Send ``sig`` (SIGKILL, SIGSTOP, SIGCONT, SIGTERM...)."""
        if self.popen.poll() is None:
            os.kill(self.popen.pid, sig)

    def stop(self, timeout: float = 20.0) -> int:
        """SIGTERM, then wait; SIGKILL if it does not exit in time. Returns the exit code."""
        self.signal(signal.SIGCONT)
        self.signal(signal.SIGTERM)
        try:
            code = self.popen.wait(timeout)
        except subprocess.TimeoutExpired:
            self.popen.kill()
            code = self.popen.wait(10)
        return code

    def kill(self) -> None:
        """SIGKILL and reap."""
        self.signal(signal.SIGKILL)
        self.popen.wait(10)

    def alive(self) -> bool:
        """Whether the process still runs."""
        return self.popen.poll() is None


def wait_until(check: Callable[[], bool], timeout: float, what: str, interval: float = 0.05) -> None:
    """Poll ``check`` until it is true; fail with ``what`` after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():
            return
        time.sleep(interval)
    raise AssertionError(f"timed out after {timeout}s waiting for {what}")


async def until(
    check: Callable[[], bool | Awaitable[bool]], seconds: float, what: str, interval: float = 0.025
) -> None:
    """``wait_until`` for a test on an event loop: the loop runs between the checks.

    ``check`` may return an awaitable (an async check, or ``asyncio.to_thread`` of a blocking one).
    """
    deadline = time.monotonic() + seconds
    while not await _checked(check()):
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {seconds}s waiting for {what}")
        await asyncio.sleep(interval)


async def _checked(answer: bool | Awaitable[bool]) -> bool:
    return await answer if inspect.isawaitable(answer) else answer


def wait_for_http(url: str, timeout: float, process: LonghaulProcess | None = None) -> None:
    """Wait until ``url`` answers 200 (and ``process`` is still alive)."""

    def ready() -> bool:
        if process is not None and not process.alive():
            raise AssertionError(f"{process.args} exited early:\n{process.log()}")
        try:
            return httpx.get(url, timeout=1.0).status_code == 200
        except httpx.HTTPError:
            return False

    wait_until(ready, timeout, f"{url} to answer")


def rpc(base_url: str, method: str, params: dict[str, object], timeout: float = 60.0) -> dict[str, object]:
    """One JSON-RPC call to the gateway; returns the whole response object."""
    response = httpx.post(
        f"{base_url}/a2a/jsonrpc",
        json={"jsonrpc": "2.0", "id": 1, "method": method, "params": params},
        headers={"A2A-Version": "1.0"},
        timeout=timeout,
    )
    body: dict[str, object] = response.json()
    return body
