"""Webhook tests' receiver and tasks.

The receiver is a small real HTTP server in the test process (the edge of the world).

It records every request it answers (path, headers, body, status) and answers as told: a status
per path, an optional delay per path, an optional check of each POST before it answers, and it
can be taken down (connections refused) and back up on the same port.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from domain.task import Task
from store.log.application import TaskApplication
from tests.support.tasks import new_task


@dataclass(frozen=True)
class Received:
    """One request the receiver answered."""

    path: str
    headers: dict[str, str]
    body: bytes
    status: int
    at: float

    @property
    def json(self) -> Any:
        """The body as JSON."""
        return json.loads(self.body)


class Receiver:
    """Answers POSTs with ``status`` (per path: ``statuses``), after ``delays[path]`` seconds."""

    def __init__(self) -> None:
        self.received: list[Received] = []
        self.status = 200
        self.statuses: dict[str, int] = {}
        self.delays: dict[str, float] = {}
        self.on_post: Callable[[dict[str, str]], None] | None = None
        """Called with a POST's headers before it is answered (in the receiver's thread)."""
        self._lock = threading.Lock()
        self._server: ThreadingHTTPServer | None = None
        self.port = 0

    def start(self) -> Receiver:
        """Listen (on the same port as before, after ``stop``)."""
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
                time.sleep(receiver.delays.get(self.path, 0.0))
                if receiver.on_post is not None:
                    receiver.on_post(dict(self.headers.items()))
                status = receiver.statuses.get(self.path, receiver.status)
                with receiver._lock:
                    receiver.received.append(
                        Received(self.path, dict(self.headers.items()), body, status, time.monotonic())
                    )
                self.send_response(status)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, format: str, *args: Any) -> None:
                """Quiet."""

        self._server = ThreadingHTTPServer(("127.0.0.1", self.port), Handler)
        self._server.daemon_threads = True
        self.port = self._server.server_address[1]
        threading.Thread(target=self._server.serve_forever, daemon=True).start()
        return self

    def stop(self) -> None:
        """Stop listening: connections are refused until ``start``."""
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None

    def url(self, path: str = "/hook") -> str:
        """The URL of ``path`` on this receiver."""
        return f"http://127.0.0.1:{self.port}{path}"

    def answered(self, status: int = 200, path: str | None = None) -> list[Received]:
        """The requests answered with ``status`` (on ``path``), in arrival order."""
        with self._lock:
            return [r for r in self.received if r.status == status and (path is None or r.path == path)]


def finished_task(
    store: TaskApplication,
    url: str,
    *,
    tenant: str = "acme",
    config_id: str = "cfg-1",
    artifacts: int = 1,
    token: str | None = "tok-1",
) -> Task:
    """A saved task with a push config, then working, ``artifacts`` artifacts, and completed.

    Its deliveries: ``statusUpdate`` WORKING (v3), one ``artifactUpdate`` per artifact, then
    ``statusUpdate`` COMPLETED.
    """
    now = datetime.now(UTC)
    task = new_task(now, tenant=tenant)
    config: dict[str, Any] = {
        "id": config_id,
        "url": url,
        "authentication": {"scheme": "Bearer", "credentials": "s3cret"},
    }
    if token is not None:
        config["token"] = token
    task.set_push_config(now=now, config=config)
    epoch = task.grant_lease(worker="w", now=now, until=now + timedelta(seconds=30))
    for n in range(artifacts):
        task.append_artifact(
            epoch=epoch, now=now, artifact={"artifactId": f"a{n}", "parts": [{"text": f"part {n}"}]}
        )
    task.complete(epoch=epoch, now=now, message={"role": "ROLE_AGENT", "parts": [{"text": "done"}]})
    store.save_tasks(task)
    return task


def plain_task(store: TaskApplication, now: datetime) -> Task:
    """A saved task without push configs, leased and completed at ``now``: nothing to deliver."""
    task = new_task(now)
    epoch = task.grant_lease(worker="w", now=now, until=now + timedelta(seconds=30))
    task.complete(epoch=epoch, now=now, message=None)
    store.save_tasks(task)
    return task
