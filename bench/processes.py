"""Start ``python -m longhaul.cli worker`` processes the way an operator would, for benchmarks."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from bench.common import REPO_ROOT

SKILL_MODULES = ["bench.noop_skills"]


def worker_env(database_url: str, schema: str, *, concurrency: int, lease_seconds: float) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("LONGHAUL_")}
    env.update(
        {
            "LONGHAUL_DATABASE_URL": database_url,
            "LONGHAUL_DATABASE_SCHEMA": schema,
            "LONGHAUL_WORKER_CONCURRENCY": str(concurrency),
            "LONGHAUL_LEASE_SECONDS": str(lease_seconds),
            "LONGHAUL_WORKER_GRACE_SECONDS": "2",
            "LONGHAUL_SKILL_MODULES": json.dumps(SKILL_MODULES),
            "PYTHONUNBUFFERED": "1",
            "PYTHONPATH": str(REPO_ROOT),
        }
    )
    return env


class WorkerProcess:
    """One worker process with its log in a file."""

    def __init__(self, env: dict[str, str], log_path: Path, *, instrumented: bool = False) -> None:
        self.log_path = log_path
        module = ["bench.instrumented_worker"] if instrumented else ["longhaul.cli", "worker"]
        with log_path.open("ab") as log:
            self.popen = subprocess.Popen(
                [sys.executable, "-m", *module],
                env=env,
                cwd=REPO_ROOT,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )

    @property
    def pid(self) -> int:
        return self.popen.pid

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def wait_started(self, timeout: float = 60.0) -> float:
        """Block until the worker logged that it started; returns the seconds it took."""
        t0 = time.monotonic()
        while time.monotonic() - t0 < timeout:
            if " started (concurrency" in self.log():
                return time.monotonic() - t0
            if self.popen.poll() is not None:
                raise RuntimeError(f"worker exited with {self.popen.returncode}:\n{self.log()}")
            time.sleep(0.02)
        raise TimeoutError(f"worker did not start in {timeout} s:\n{self.log()}")

    def kill(self) -> None:
        if self.popen.poll() is None:
            os.kill(self.popen.pid, signal.SIGKILL)
        self.popen.wait(10)

    def stop(self, timeout: float = 20.0) -> int:
        if self.popen.poll() is None:
            os.kill(self.popen.pid, signal.SIGTERM)
        try:
            return self.popen.wait(timeout)
        except subprocess.TimeoutExpired:
            self.kill()
            return self.popen.wait(10)
