"""What a test's JetStream stream holds, beside the log, and a nats-server a test may kill.

``stream_messages`` reads a whole stream in stream order; ``relayed_exactly_once`` checks it
holds every event of the log once, in log-position order. ``NatsServer`` runs a nats-server
with JetStream of the test's own on a free loopback port; it can be stopped with any signal
(SIGKILL too) and started again on the same port and data.
"""

from __future__ import annotations

import asyncio
import json
import signal
import socket
import subprocess
from pathlib import Path
from typing import Any

import nats
from nats.js.api import DeliverPolicy

from longhaul.embedded import nats_server_binary
from store.application import TaskApplication
from tests.support.processes import free_port, wait_until

JSON = dict[str, Any]


def stream_messages(url: str, stream: str, subjects: str) -> list[tuple[str, JSON]]:
    """``(Nats-Msg-Id, message)`` of every message in ``stream``, in stream order."""

    async def read() -> list[tuple[str, JSON]]:
        client = await nats.connect(url, connect_timeout=5, max_reconnect_attempts=0)
        try:
            js = client.jetstream()
            count = (await js.stream_info(stream)).state.messages
            subscription = await js.subscribe(
                subjects, stream=stream, ordered_consumer=True, deliver_policy=DeliverPolicy.ALL
            )
            messages = []
            for _ in range(count):
                msg = await subscription.next_msg(timeout=10)
                messages.append(((msg.headers or {}).get("Nats-Msg-Id", ""), json.loads(msg.data)))
            await subscription.unsubscribe()
            return messages
        finally:
            await client.close()

    return asyncio.run(read())


def stream_count(url: str, stream: str) -> int:
    """How many messages ``stream`` holds (0 while it does not exist)."""

    async def count() -> int:
        client = await nats.connect(url, connect_timeout=5, max_reconnect_attempts=0)
        try:
            return (await client.jetstream().stream_info(stream)).state.messages
        except nats.js.errors.NotFoundError:
            return 0
        finally:
            await client.close()

    return asyncio.run(count())


def log_events(store: TaskApplication) -> list[tuple[int, str, int]]:
    """``(position, task id, version)`` of every event in the log, in position order."""
    notifications = store.recorder.select_notifications(start=1, limit=1_000_000)
    return [(n.id, str(n.originator_id), n.originator_version) for n in notifications]


def relayed_exactly_once(messages: list[tuple[str, JSON]], store: TaskApplication, stream: str) -> None:
    """Assert the stream holds each event of the log once, in log-position order, none skipped."""
    logged = log_events(store)
    ids = [msg_id for msg_id, _ in messages]
    assert len(ids) == len(set(ids)), "a message id is in the stream twice"
    assert ids == [f"{stream}:{position}" for position, _, _ in logged], "the stream is not the log"
    assert [(m["position"], m["taskId"], m["version"]) for _, m in messages] == logged


class NatsServer:
    """A nats-server with JetStream on a free loopback port, data in ``data_dir``."""

    def __init__(self, data_dir: Path) -> None:
        self.data_dir = data_dir
        self.port = free_port()
        self.url = f"nats://127.0.0.1:{self.port}"
        self._process: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        """Start it (on the same port and data as before) and wait until JetStream answers."""
        self.data_dir.mkdir(parents=True, exist_ok=True)
        command = [
            str(nats_server_binary()),
            "-a",
            "127.0.0.1",
            "-p",
            str(self.port),
            "-js",
            "-sd",
            str(self.data_dir),
        ]
        with (self.data_dir / "nats-server.log").open("ab") as log:
            self._process = subprocess.Popen(
                command, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
            )
        wait_until(self._ready, 20, "nats-server to answer")

    def stop(self, sig: signal.Signals = signal.SIGTERM) -> None:
        """Stop it with ``sig`` and wait until it is gone."""
        process, self._process = self._process, None
        if process is None or process.poll() is not None:
            return
        process.send_signal(sig)
        process.wait(timeout=20)

    def _ready(self) -> bool:
        try:
            with socket.create_connection(("127.0.0.1", self.port), timeout=1) as sock:
                return b"jetstream" in sock.recv(4096)
        except OSError:
            return False


def wait_for_stream(url: str, stream: str, count: int, timeout: float) -> None:
    """Wait until ``stream`` holds at least ``count`` messages."""
    wait_until(lambda: stream_count(url, stream) >= count, timeout, f"{count} messages in the stream")
