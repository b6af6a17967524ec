"""A first task end to end: separate gateway, worker and relay processes on real PostgreSQL and NATS."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import nats
import pytest
from nats.aio.client import Client
from nats.aio.msg import Msg

from longhaul.settings import Settings
from tests.support.processes import LonghaulProcess, free_port, rpc, settings_env, wait_for_http


@pytest.fixture
def service(settings: Settings, tmp_path: Path) -> Iterator[tuple[str, dict[str, str]]]:
    """Gateway, worker and relay as three processes; yields the gateway URL and the env."""
    port = free_port()
    env = settings_env(settings, port=str(port))
    processes = [
        LonghaulProcess([name], env, tmp_path / f"{name}.log") for name in ("gateway", "worker", "relay")
    ]
    base = f"http://127.0.0.1:{port}"
    try:
        wait_for_http(f"{base}/.well-known/agent-card.json", 30, processes[0])
        yield base, env
    finally:
        codes = [process.stop() for process in processes]
        assert codes == [0, 0, 0], "\n".join(p.log() for p in processes)


def test_send_message_runs_echo_to_completion(
    service: tuple[str, dict[str, str]], settings: Settings
) -> None:
    base, env = service
    subject_prefix = settings.nats_subject_prefix
    received: list[dict[str, Any]] = []

    async def listen() -> Client:
        client = await nats.connect(settings.nats_url or "")

        async def collect(msg: Msg) -> None:
            received.append(json.loads(msg.data))

        await client.subscribe(f"{subject_prefix}.tasks.>", cb=collect)
        return client

    async def scenario() -> tuple[Any, Any]:
        client = await listen()
        message = {
            "messageId": str(uuid.uuid4()),
            "role": "ROLE_USER",
            "parts": [{"text": "hello, longhaul"}],
            "metadata": {"skill": "echo"},
        }
        sent = await asyncio.to_thread(rpc, base, "SendMessage", {"message": message})
        task: Any = sent["result"]["task"]  # type: ignore[index]
        got = await asyncio.to_thread(rpc, base, "GetTask", {"id": task["id"]})
        for _ in range(100):  # the relay publishes right after the commit
            if any(m["type"] == "Completed" for m in received):
                break
            await asyncio.sleep(0.05)
        await client.close()
        return task, got["result"]

    task, fetched = asyncio.run(scenario())

    # SendMessage blocked until the task was done, and returned the echoed artifact.
    assert task["status"]["state"] == "TASK_STATE_COMPLETED"
    assert task["artifacts"][0]["parts"][0]["text"] == "hello, longhaul"
    # GetTask returns the same task.
    assert fetched["id"] == task["id"]
    assert fetched["status"] == task["status"]
    assert fetched["artifacts"] == task["artifacts"]

    # The history lists every event in order, with version, time, type, actor and fields.
    out = subprocess.run(
        [sys.executable, "-m", "longhaul.cli", "history", task["id"], "--json"],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    document = json.loads(out.stdout)
    assert document["taskId"] == task["id"]
    events = document["events"]
    types = [e["type"] for e in events]
    assert types == ["Submitted", "LeaseGranted", "ArtifactChunkAppended", "StepCompleted", "Completed"]
    assert [e["version"] for e in events] == list(range(1, len(events) + 1))
    assert all(e["time"].endswith("Z") for e in events)
    assert events[0]["fields"]["skill"] == "echo"
    assert events[0]["actor"]["kind"] == "client"
    assert {e["actor"]["kind"] for e in events[1:]} == {"worker"}

    # Every committed event went to NATS, in order, after its commit.
    relayed = [m for m in received if m["taskId"] == task["id"]]
    assert [m["type"] for m in relayed] == types
    positions = [m["position"] for m in relayed]
    assert positions == sorted(positions)

    human = subprocess.run(
        [sys.executable, "-m", "longhaul.cli", "history", task["id"]],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    assert "Completed" in human.stdout
    assert "v1 " in human.stdout
