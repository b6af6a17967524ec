"""``longhaul worker`` processes started the way an operator would, for the step and resume parts."""

from __future__ import annotations

import os
import signal
from pathlib import Path

from bench.common import start, stop, wait_for


class WorkerProcess:
    """One ``python -m longhaul.cli worker`` with its log in a file."""

    def __init__(self, env: dict[str, str], log_path: Path) -> None:
        self.log_path = log_path
        self.popen = start(["longhaul.cli", "worker"], env, log_path)

    @property
    def pid(self) -> int:
        return self.popen.pid

    def wait_started(self, timeout: float = 60.0) -> float:
        """Block until the worker logged that it started: the seconds it took."""
        return wait_for(self.log_path, " started (concurrency", self.popen, timeout)

    def kill(self) -> None:
        if self.popen.poll() is None:
            os.kill(self.popen.pid, signal.SIGKILL)
        self.popen.wait(10)

    def stop(self) -> int:
        return stop(self.popen)
