"""``longhaul tail``: the relay's messages, live, one readable line (or the JSON) per event."""

from __future__ import annotations

import asyncio
import io
import json
import os
import signal
import subprocess
import sys
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import nats
import pytest
from nats.js import JetStreamContext

from domain.task import Task
from longhaul.cli import SIGPIPE_EXIT
from longhaul.tail import Start, filter_subject, line, parse_since, tail
from store.log.application import TaskApplication
from store.public_form.subjects import NatsNames
from tests.support.tasks import new_task
from workers.relay import Relay, ensure_stream


@pytest.fixture
def names(nats_url: str, nats_names: tuple[str, str]) -> NatsNames:
    return NatsNames(url=nats_url, stream=nats_names[0], subject_prefix=nats_names[1])


@pytest.fixture
async def js(names: NatsNames) -> AsyncIterator[JetStreamContext]:
    client = await nats.connect(names.url)
    js = client.jetstream()
    await ensure_stream(js, names)
    yield js
    await client.close()


def _task(store: TaskApplication, tenant: str) -> Task:
    """A task with two events: Submitted and LeaseGranted."""
    now = datetime.now(UTC)
    task = new_task(now, tenant=tenant, text="hello")
    task.grant_lease(worker="w", now=now, until=now + timedelta(seconds=30))
    store.save_tasks(task)
    return task


async def _relay(store: TaskApplication, names: NatsNames, count: int) -> None:
    """Run the real relay until it has published ``count`` events."""
    relay = Relay(store=store, names=names)
    stop = asyncio.Event()
    running = asyncio.ensure_future(relay.run(stop))
    for _ in range(400):
        if relay.published >= count:
            break
        await asyncio.sleep(0.025)
    stop.set()
    await running
    assert relay.published == count


async def _consumers(js: JetStreamContext, names: NatsNames, count: int) -> None:
    for _ in range(400):
        if (await js.stream_info(names.stream)).state.consumer_count >= count:
            return
        await asyncio.sleep(0.025)
    pytest.fail("the consumer was never created")


async def _until(out: io.StringIO, lines: int) -> list[str]:
    for _ in range(400):
        if out.getvalue().count("\n") >= lines:
            break
        await asyncio.sleep(0.025)
    return out.getvalue().splitlines()


async def test_tail_prints_new_events_one_line_each_filtered_by_tenant(
    store: TaskApplication, names: NatsNames, js: JetStreamContext
) -> None:
    _task(store, "acme")
    await _relay(store, names, 2)  # before tail starts: not shown by default
    out = io.StringIO()
    stop = asyncio.Event()
    tailing = asyncio.ensure_future(tail(names, stop, tenant="other co", out=out))
    await _consumers(js, names, 1)
    _task(store, "acme")
    wanted = _task(store, "other co")
    await _relay(store, names, 4)
    lines = await _until(out, 2)
    stop.set()
    assert await tailing == 2
    assert len(lines) == 2
    submitted, granted = lines
    assert f"  other co  {wanted.id}  v1    Submitted " in submitted
    assert submitted.split()[0].endswith("Z")
    assert '"tenant": "other co"' in submitted
    assert submitted.endswith("…")  # the body is cut short
    assert f"{wanted.id}  v2    LeaseGranted " in granted
    assert '"worker": "w"' in granted


async def test_tail_from_the_start_of_one_task_as_json(
    store: TaskApplication, names: NatsNames, js: JetStreamContext
) -> None:
    wanted = _task(store, "acme")
    _task(store, "acme")
    await _relay(store, names, 4)
    out = io.StringIO()
    stop = asyncio.Event()
    tailing = asyncio.ensure_future(
        tail(names, stop, task_id=wanted.id, start=Start(from_start=True), as_json=True, out=out)
    )
    lines = await _until(out, 2)
    await asyncio.sleep(0.1)  # nothing more comes: the other task is filtered out
    stop.set()
    assert await tailing == 2
    messages = [json.loads(text) for text in lines]
    assert [(m["taskId"], m["version"], m["type"]) for m in messages] == [
        (str(wanted.id), 1, "Submitted"),
        (str(wanted.id), 2, "LeaseGranted"),
    ]
    assert messages[0]["body"]["skill"] == "echo"


def test_filters_and_since() -> None:
    names = NatsNames(url="nats://x", stream="S", subject_prefix="p")
    assert filter_subject(names, None, None) == "p.tasks.*.*.*"
    assert filter_subject(names, "acme.eu", None) == "p.tasks.acme_eu.*.*"
    assert parse_since("2026-12-01T10:00:00Z") == datetime(2026, 12, 1, 10, tzinfo=UTC)
    ago = datetime.now(UTC) - parse_since("PT1H")
    assert timedelta(minutes=59) < ago < timedelta(minutes=61)
    assert timedelta(seconds=599) < datetime.now(UTC) - parse_since("600") < timedelta(seconds=601)
    with pytest.raises(ValueError, match="neither a time"):
        parse_since("yesterday-ish")
    omitted = {"time": "t", "tenant": "a", "taskId": "i", "version": 3, "type": "T", "body": None}
    assert line(omitted | {"bodyOmitted": "too big"}).endswith("(body omitted: too big)")


def _env(names: NatsNames, tmp_path: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("LONGHAUL_")}
    env |= {
        "LONGHAUL_NATS_URL": names.url,
        "LONGHAUL_NATS_STREAM": names.stream,
        "LONGHAUL_NATS_SUBJECT_PREFIX": names.subject_prefix,
        "LONGHAUL_DATA_DIR": str(tmp_path),
    }
    return env


async def test_tail_piped_into_head_ends_quietly(
    store: TaskApplication, names: NatsNames, js: JetStreamContext, tmp_path: Path
) -> None:
    """``head -1`` leaves after the first line; tail notices while it waits for the next event."""
    task = _task(store, "acme")
    await _relay(store, names, 2)
    command = f'"{sys.executable}" -m longhaul.cli tail --from-start --task {task.id}'
    script = f'{command} | head -1; echo "status ${{PIPESTATUS[0]}}"'
    done = await asyncio.to_thread(
        subprocess.run,
        ["bash", "-c", script],
        env=_env(names, tmp_path),
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    first, status = done.stdout.splitlines()
    assert f"{task.id}  v1    Submitted" in first
    assert status == f"status {SIGPIPE_EXIT}"
    assert done.stderr == ""


async def test_ctrl_c_ends_tail_quietly(names: NatsNames, js: JetStreamContext, tmp_path: Path) -> None:
    process = subprocess.Popen(  # noqa: ASYNC220 - started, then awaited below without blocking the loop
        [sys.executable, "-m", "longhaul.cli", "tail"],
        env=_env(names, tmp_path),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        await _consumers(js, names, 1)
        process.send_signal(signal.SIGINT)
        stdout, stderr = await asyncio.to_thread(process.communicate, timeout=30)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    assert (process.returncode, stdout, stderr) == (0, "", "")


def test_tail_without_a_stream_says_so(names: NatsNames, tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "longhaul.cli", "tail"],
        env=_env(names, tmp_path),
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 1
    assert f"has no stream {names.stream}" in done.stderr
