"""``longhaul history ID | head -1``: a reader that leaves early ends the command quietly."""

from __future__ import annotations

import os
import subprocess
import sys
from datetime import UTC, datetime
from uuid import UUID

import pytest

from longhaul.cli import SIGPIPE_EXIT
from store.log.application import TaskApplication
from store.log.config import StoreConfig
from tests.support.tasks import new_task


@pytest.fixture
def task_id(postgres_store: TaskApplication) -> UUID:
    """A task whose history is longer than a pipe's buffer (64 KiB), so the writer must block."""
    task = new_task(datetime.now(UTC), text="x" * 200_000)
    postgres_store.save_tasks(task)
    return task.id


def _env(store_config: StoreConfig) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("LONGHAUL_")}
    env["LONGHAUL_DATABASE_URL"] = store_config.database_url
    env["LONGHAUL_DATABASE_SCHEMA"] = store_config.schema
    return env


def test_a_closed_pipe_ends_history_with_the_sigpipe_status_and_no_traceback(
    task_id: UUID, store_config: StoreConfig
) -> None:
    """The reader is gone before the first write: every write fails, deterministically."""
    read_end, write_end = os.pipe()
    os.close(read_end)
    try:
        done = subprocess.run(
            [sys.executable, "-m", "longhaul.cli", "history", str(task_id)],
            env=_env(store_config),
            stdout=write_end,
            stderr=subprocess.PIPE,
            text=True,
            timeout=60,
            check=False,
        )
    finally:
        os.close(write_end)
    assert "Traceback" not in done.stderr
    assert "BrokenPipeError" not in done.stderr
    assert done.returncode == SIGPIPE_EXIT


def test_history_piped_into_head_prints_one_line_quietly(task_id: UUID, store_config: StoreConfig) -> None:
    """The shell pipeline an operator types; ``head`` may leave before or after the last write."""
    command = f'"{sys.executable}" -m longhaul.cli history {task_id}'
    script = f'{command} | head -1; echo "status ${{PIPESTATUS[0]}}"'
    done = subprocess.run(
        ["bash", "-c", script],
        env=_env(store_config),
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    first, status = done.stdout.splitlines()
    assert first.startswith("v1 ")
    assert status in ("status 0", f"status {SIGPIPE_EXIT}")
    assert "Traceback" not in done.stderr
