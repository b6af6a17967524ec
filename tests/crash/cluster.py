"""Helpers for the crash, race and pause tests: real ``longhaul`` processes and reads of the log.

``Cluster`` starts ``longhaul worker|gateway|sweeper|fake-iam`` as separate processes on the test's
own schema and stream, waits until each is ready, and stops whatever is still running at the end.
The test process reads the event log directly through the ``TaskApplication`` fixture.
"""

from __future__ import annotations

import itertools
import json
import re
import subprocess
import sys
import time
import uuid
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from uuid import UUID

import httpx

from domain.task import Task
from longhaul.settings import Settings
from store.log.application import TaskApplication
from store.log.errors import ConflictError
from tests.support.processes import LonghaulProcess, free_port, settings_env, wait_for_http, wait_until

JSON = dict[str, Any]
ROOT = Path(__file__).resolve().parents[2]
TEST_SKILLS = "tests.crash.skills"
STARTUP_TIMEOUT = 45.0
_WORKER_STARTED = re.compile(r"worker (\S+) started")


class Cluster:
    """The processes of one test, all on the test's schema, stream and subjects."""

    def __init__(self, settings: Settings, tmp_path: Path, **overrides: str) -> None:
        self.settings = settings
        self.tmp_path = tmp_path
        # Four tasks per worker keep each worker's connection pool at five: PostgreSQL is shared.
        self.overrides = {"skill_modules": json.dumps([TEST_SKILLS]), "worker_concurrency": "4", **overrides}
        self.processes: list[LonghaulProcess] = []
        self._count = itertools.count(1)
        self._pending: list[tuple[str, LonghaulProcess]] = []
        self._ports: set[int] = set()

    def _port(self) -> int:
        """A free port no process of this cluster was given: one started in the background (the
        fake IAM) may not have bound its own yet, and ``free_port`` would give it out again."""
        while (port := free_port()) in self._ports:
            pass
        self._ports.add(port)
        return port

    def env(self, **overrides: str) -> dict[str, str]:
        """The environment of a child process: the settings, the cluster's and these overrides."""
        env = settings_env(self.settings, **{**self.overrides, **overrides})
        env["PYTHONPATH"] = str(ROOT)
        return env

    def ready(self) -> None:
        """Wait for every HTTP service started without waiting (the fake IAM) to answer."""
        while self._pending:
            url, process = self._pending.pop()
            wait_for_http(url, STARTUP_TIMEOUT, process)

    def start(self, args: list[str], **overrides: str) -> LonghaulProcess:
        """Start ``longhaul <args>`` (not waiting for readiness)."""
        log = self.tmp_path / f"{next(self._count):02d}-{args[0]}.log"
        process = LonghaulProcess(args, self.env(**overrides), log)
        self.processes.append(process)
        return process

    def worker(self, *, wait: bool = True, **overrides: str) -> LonghaulProcess:
        """A worker process, returned once it claims tasks (unless ``wait`` is false)."""
        process = self.start(["worker"], **overrides)
        if wait:
            self.wait_for_worker(process)
        return process

    def wait_for_worker(self, process: LonghaulProcess) -> None:
        """Wait until a worker started with ``wait=False`` claims tasks."""
        wait_until(lambda: _ready(process, _WORKER_STARTED), STARTUP_TIMEOUT, "the worker to start")
        self.ready()

    def workers(self, count: int, **overrides: str) -> list[LonghaulProcess]:
        """``count`` workers started together (they start in parallel), returned once all are ready."""
        processes = [self.start(["worker"], **overrides) for _ in range(count)]
        for process in processes:
            wait_until(lambda p=process: _ready(p, _WORKER_STARTED), STARTUP_TIMEOUT, "the workers to start")  # type: ignore[misc]
        self.ready()
        return processes

    def gateway(self, **overrides: str) -> str:
        """A gateway process; returns its base URL once it answers."""
        port = self._port()
        process = self.start(["gateway"], port=str(port), **overrides)
        base = f"http://127.0.0.1:{port}"
        wait_for_http(f"{base}/.well-known/agent-card.json", STARTUP_TIMEOUT, process)
        self.ready()
        return base

    def sweeper(self, **overrides: str) -> LonghaulProcess:
        """A sweeper process, returned once it sweeps."""
        process = self.start(["sweeper"], **overrides)
        wait_until(lambda: _ready(process, re.compile("sweeper started")), STARTUP_TIMEOUT, "the sweeper")
        return process

    def fake_iam(self) -> str:
        """A fake IAM process; returns its base URL and points later processes at it.

        It starts in the background: the next ``worker``/``gateway``/``ready`` call waits for it.
        """
        port = self._port()
        process = self.start(["fake-iam", "--port", str(port)])
        base = f"http://127.0.0.1:{port}"
        self._pending.append((f"{base}/health", process))
        self.overrides["iam_url"] = base
        return base

    def run(self, args: list[str], timeout: float = 60, **overrides: str) -> subprocess.CompletedProcess[str]:
        """Run a one-shot ``longhaul <args>`` to its end (or a long-running one that exits early)."""
        return subprocess.run(
            [sys.executable, "-m", "longhaul.cli", *args],
            env=self.env(**overrides),
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )

    def stop_all(self) -> None:
        """Stop every process still running (SIGCONT first, for stopped ones)."""
        for process in self.processes:
            if process.alive():
                process.stop()

    def logs(self) -> str:
        """Every process's log, for failure messages."""
        return "\n".join(f"==== {p.args} ({p.pid})\n{p.log()}" for p in self.processes)


def _ready(process: LonghaulProcess, pattern: re.Pattern[str]) -> bool:
    if not process.alive():
        raise AssertionError(f"{process.args} exited early:\n{process.log()}")
    return pattern.search(process.log()) is not None


def worker_id(process: LonghaulProcess) -> str:
    """The worker id a worker process announced when it started."""
    match = _WORKER_STARTED.search(process.log())
    assert match is not None, process.log()
    return match.group(1)


# ---------------------------------------------------------------------- tasks and the log


def user_message(params: JSON | None = None, text: str = "go") -> JSON:
    """A client message with a text part and, if given, a data part of skill parameters."""
    parts: list[JSON] = [{"text": text}]
    if params is not None:
        parts.append({"data": params})
    return {"messageId": uuid.uuid4().hex, "role": "ROLE_USER", "parts": parts}


def new_task(skill: str, params: JSON, version: int = 1) -> Task:
    """A submitted task (not saved yet), as the gateway would create it."""
    task_id, context_id = uuid.uuid4(), str(uuid.uuid4())
    message = {**user_message(params), "taskId": str(task_id), "contextId": context_id}
    return Task.submit(
        task_id=task_id,
        now=datetime.now(UTC),
        tenant="default",
        context_id=context_id,
        skill=skill,
        skill_version=version,
        message=message,
        params=params,
    )


def submit(store: TaskApplication, skill: str, params: JSON, version: int = 1) -> UUID:
    """Submit one task straight into the store; returns its id."""
    task = new_task(skill, params, version)
    store.save_tasks(task)
    return task.id


def answer(store: TaskApplication, task_id: UUID, data: JSON) -> None:
    """Answer a paused task straight through the store (what the gateway's SendMessage does)."""
    for _ in range(20):
        task = store.get(task_id)
        message = {**user_message(data, "answer"), "taskId": str(task_id), "contextId": task.context_id}
        task.receive_input(now=datetime.now(UTC), message=message)
        try:
            store.save_tasks(task)
        except ConflictError:
            continue
        return
    raise AssertionError(f"could not answer task {task_id}")


def events(store: TaskApplication, task_id: UUID) -> list[Any]:
    """Every event of the task, oldest first."""
    return list(store.history(task_id))


def kind(event: Any) -> str:
    """The event's type name (``LeaseGranted``, ``StepCompleted``...)."""
    return type(event).__name__


def of_kind(history: list[Any], *names: str) -> list[Any]:
    """The events of ``history`` whose type is one of ``names``."""
    return [e for e in history if kind(e) in names]


def epoch_of(event: Any) -> int | None:
    """The lease epoch an event was written under (``None`` for client and sweeper events)."""
    epoch = getattr(event, "epoch", None)
    return epoch if isinstance(epoch, int) else None


def timestamp(event: Any) -> float:
    """The event's time as unix seconds."""
    moment: datetime = event.timestamp
    return moment.timestamp()


def holder_pid(store: TaskApplication, task_id: UUID) -> int | None:
    """The process id of the worker holding the task's latest lease (worker ids are host:pid:rand)."""
    grants = of_kind(events(store, task_id), "LeaseGranted")
    if not grants:
        return None
    return int(grants[-1].worker.split(":")[-2])


def wait_for_state(
    store: TaskApplication, task_id: UUID, state: str, timeout: float, cluster: Cluster
) -> Task:
    """Poll the store until the task is in ``state``; fail with every process's log otherwise."""
    try:
        wait_until(lambda: str(store.get(task_id).state) == state, timeout, f"task {task_id} to be {state}")
    except AssertionError as error:
        raise AssertionError(f"{error}; it is {store.get(task_id).state}\n{cluster.logs()}") from None
    return store.get(task_id)


def iam_calls(iam_url: str, task_id: UUID) -> list[JSON]:
    """Every request the fake IAM received for this task, oldest first."""
    calls: list[JSON] = httpx.get(f"{iam_url}/calls", params={"task_id": str(task_id)}, timeout=10).json()
    return calls


def rpc(base: str, method: str, params: JSON, timeout: float = 60.0) -> JSON:
    """One JSON-RPC call to a gateway; the whole response object."""
    response = httpx.post(
        f"{base}/a2a/jsonrpc",
        json={"jsonrpc": "2.0", "id": 1, "method": method, "params": params},
        headers={"A2A-Version": "1.0"},
        timeout=timeout,
    )
    body: JSON = response.json()
    return body


def elapsed(since: float) -> float:
    """Seconds since ``since`` (``time.monotonic()``)."""
    return time.monotonic() - since
