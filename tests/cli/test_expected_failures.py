"""Expected failures end in one line ``longhaul: …`` and exit 1, never in a traceback."""

from __future__ import annotations

import fcntl
import os
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from longhaul.cli import main
from tests.support.processes import free_port


@pytest.fixture(autouse=True)
def _clean_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in list(os.environ):
        if name.startswith("LONGHAUL_"):
            monkeypatch.delenv(name)


def _one_line(err: str) -> str:
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith("longhaul: ")
    assert "Traceback" not in err
    return lines[0]


@pytest.fixture
def held_data_dir(tmp_path: Path) -> Iterator[Path]:
    """A data directory whose embedded PostgreSQL lock another process holds (here: this one)."""
    folder = tmp_path / "data" / "postgres"
    folder.mkdir(parents=True)
    with (folder / "lock").open("a+b") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        yield tmp_path / "data"


def test_a_data_directory_in_use_by_another_up(
    held_data_dir: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("LONGHAUL_DATA_DIR", str(held_data_dir))
    monkeypatch.setenv("LONGHAUL_PORT", "0")

    assert main(["up"]) == 1

    line = _one_line(capsys.readouterr().err)
    assert "in use by another process" in line
    assert str(held_data_dir / "postgres") in line
    assert "LONGHAUL_DATA_DIR" in line


@pytest.mark.parametrize("command", [["up"], ["gateway"]])
def test_a_port_in_use(
    command: list[str], monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        monkeypatch.setenv("LONGHAUL_STORE", "memory")  # nothing to start before the gateway's socket
        monkeypatch.setenv("LONGHAUL_PORT", str(port))

        assert main(command) == 1

    line = _one_line(capsys.readouterr().err)
    assert line == f"longhaul: cannot listen on 127.0.0.1:{port}: Address already in use"


def test_fake_iam_on_a_port_in_use(capsys: pytest.CaptureFixture[str]) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]

        assert main(["fake-iam", "--port", str(port)]) == 1

    assert _one_line(capsys.readouterr().err).startswith(f"longhaul: cannot listen on 127.0.0.1:{port}")


@pytest.mark.parametrize("command", ["migrate", "worker"])
def test_an_unreachable_postgresql(command: str) -> None:
    """A subprocess: this test's process may not connect anywhere (it is a unit test)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("LONGHAUL_")}
    env["LONGHAUL_DATABASE_URL"] = f"postgresql://postgres:secret@127.0.0.1:{free_port()}/longhaul"
    done = subprocess.run(
        [sys.executable, "-m", "longhaul.cli", command],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 1
    line = _one_line(done.stderr)
    assert line.startswith("longhaul: cannot use PostgreSQL at postgresql://postgres:***@127.0.0.1:")
    assert "Connection refused" in line
    assert "secret" not in done.stderr
