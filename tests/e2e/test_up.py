"""`longhaul up` on a fresh folder: embedded PostgreSQL and NATS, a task that survives a restart."""

from __future__ import annotations

import os
import shutil
import signal
import stat
import subprocess
import sys
import tempfile
import time
import urllib.request
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from standardwebhooks.webhooks import Webhook

from store.evidence.signed_notes import SignerKey
from tests.support.processes import free_port, rpc, wait_for_http, wait_until
from tests.support.webhooks import Receiver

AGENT_CARD_WITHIN_S = 20


def _start_up(folder: Path, port: int, **settings: str) -> subprocess.Popen[bytes]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("LONGHAUL_")}
    env["LONGHAUL_PORT"] = str(port)
    env.update({f"LONGHAUL_{name.upper()}": value for name, value in settings.items()})
    with (folder / "up.log").open("ab") as log:
        return subprocess.Popen(
            [sys.executable, "-m", "longhaul.cli", "up"],
            cwd=folder,
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )


def _interrupt(process: subprocess.Popen[bytes]) -> int:
    process.send_signal(signal.SIGINT)  # what Ctrl-C sends
    return process.wait(60)


@pytest.fixture
def folder() -> Iterator[Path]:
    """A fresh working folder outside pytest's 0700 temporary root (see ``embedded_dir``)."""
    path = Path(tempfile.mkdtemp(prefix="longhaul-up-"))
    yield path
    shutil.rmtree(path, ignore_errors=True)


def test_up_serves_runs_and_keeps_tasks_across_restart(folder: Path) -> None:
    tmp_path = folder
    port = free_port()
    base = f"http://127.0.0.1:{port}"

    started = time.monotonic()
    up = _start_up(tmp_path, port, allow_private_webhooks="true")
    hooks = Receiver().start()
    try:
        wait_for_http(f"{base}/.well-known/agent-card.json", AGENT_CARD_WITHIN_S)
        assert time.monotonic() - started < AGENT_CARD_WITHIN_S
        message = {
            "messageId": str(uuid.uuid4()),
            "role": "ROLE_USER",
            "parts": [{"text": "still here after a restart?"}],
            "metadata": {"skill": "echo"},
        }
        sent = rpc(base, "SendMessage", {"message": message})
        task = sent["result"]["task"]  # type: ignore[index]
        assert task["status"]["state"] == "TASK_STATE_COMPLETED"
        assert task["artifacts"][0]["parts"][0]["text"] == "still here after a restart?"
        # up runs the dispatcher, signing with the secret it made in its data directory.
        config = {"url": hooks.url(), "token": "tok"}
        hooked = {**message, "messageId": str(uuid.uuid4())}
        rpc(base, "SendMessage", {"message": hooked, "configuration": {"taskPushNotificationConfig": config}})
        wait_until(lambda: len(hooks.answered()) >= 3, AGENT_CARD_WITHIN_S, "three webhooks from up")
        secret = (tmp_path / ".longhaul" / "webhook-secret").read_text().strip()
        for request in hooks.answered():
            Webhook(secret).verify(request.body, request.headers)
        assert [next(iter(r.json)) for r in hooks.answered()] == [
            "statusUpdate",
            "artifactUpdate",
            "statusUpdate",
        ]
    finally:
        hooks.stop()
        assert _interrupt(up) == 0, (tmp_path / "up.log").read_text()

    # The data lives in ./.longhaul by default.
    assert (tmp_path / ".longhaul").is_dir()
    # up made the checkpoint signing key there, the owner's alone, and logged its verifier key.
    audit_key = tmp_path / ".longhaul" / "audit-key"
    assert stat.S_IMODE(audit_key.stat().st_mode) == 0o600
    verifier = SignerKey.parse(audit_key.read_text()).verifier()
    assert f"its verifier key: {verifier}" in (tmp_path / "up.log").read_text()
    # up runs the sequencer, and its clean stop signed a checkpoint of what it sequenced.
    assert "checkpoint signed: tree size" in (tmp_path / "up.log").read_text()

    up = _start_up(tmp_path, port)
    try:
        wait_for_http(f"{base}/.well-known/agent-card.json", AGENT_CARD_WITHIN_S)
        fetched = rpc(base, "GetTask", {"id": task["id"]})["result"]
        assert fetched["status"]["state"] == "TASK_STATE_COMPLETED"  # type: ignore[index]
        assert fetched["artifacts"] == task["artifacts"]  # type: ignore[index]
        # up runs the projector: ListTasks lists the task from the current-task view.
        deadline = time.monotonic() + AGENT_CARD_WITHIN_S
        while (listed := rpc(base, "ListTasks", {})["result"])["totalSize"] == 0:  # type: ignore[index]
            assert time.monotonic() < deadline, "the projector never listed the task"
            time.sleep(0.1)
        assert task["id"] in [t["id"] for t in listed["tasks"]]  # type: ignore[index]
    finally:
        assert _interrupt(up) == 0, (tmp_path / "up.log").read_text()
    assert (tmp_path / ".longhaul" / "webhook-secret").read_text().strip() == secret  # kept
    assert SignerKey.parse(audit_key.read_text()).verifier() == verifier  # kept
    leftovers = subprocess.run(["pgrep", "-f", str(tmp_path)], capture_output=True, text=True, check=False)
    assert leftovers.stdout.strip() == "", f"processes left running: {leftovers.stdout}"


def test_up_in_memory_runs_tasks_without_a_database_and_keeps_nothing(folder: Path) -> None:
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    message = {
        "messageId": str(uuid.uuid4()),
        "role": "ROLE_USER",
        "parts": [{"text": "only in memory"}],
        "metadata": {"skill": "echo"},
    }
    up = _start_up(folder, port, store="memory")
    try:
        wait_for_http(f"{base}/.well-known/agent-card.json", AGENT_CARD_WITHIN_S)
        task = rpc(base, "SendMessage", {"message": message})["result"]["task"]  # type: ignore[index]
        assert task["status"]["state"] == "TASK_STATE_COMPLETED"
        # The gateway's /metrics includes the worker's of the same process.
        with urllib.request.urlopen(f"{base}/metrics", timeout=10) as response:
            metrics = response.read().decode()
        assert 'longhaul_tasks{state="TASK_STATE_COMPLETED"} 1.0' in metrics
        assert 'longhaul_worker_claims_total{skill="echo"} 1.0' in metrics
    finally:
        assert _interrupt(up) == 0, (folder / "up.log").read_text()
    log = (folder / "up.log").read_text()
    assert "LONGHAUL_STORE=memory" in log
    assert not (folder / ".longhaul" / "postgres").exists()  # no PostgreSQL, no NATS
    assert not (folder / ".longhaul" / "nats").exists()
    assert not (folder / ".longhaul" / "audit-key").exists()  # no log to sign checkpoints of

    up = _start_up(folder, port, store="memory")
    try:
        wait_for_http(f"{base}/.well-known/agent-card.json", AGENT_CARD_WITHIN_S)
        fetched = rpc(base, "GetTask", {"id": task["id"]})
        assert "error" in fetched  # nothing was kept
    finally:
        assert _interrupt(up) == 0, (folder / "up.log").read_text()
