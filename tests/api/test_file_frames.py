"""Stored files in ListTasks and the streams of both bindings (PostgreSQL, NATS, a relay); pre-signed on S3.

What the log keeps as a stored file's part (``longhaul-file:sha256:…``) reaches a client only
with a URL: the gateway's ``/a2a/files/{task}/{sha256}`` over a directory, a pre-signed URL
over S3 (moto's server, started by ``tests/store/test_file_store.py``'s fixture).
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
from collections.abc import AsyncIterator, Callable
from datetime import timedelta
from pathlib import Path
from typing import Any
from uuid import UUID

import httpx
import pytest
from litestar import Litestar

from api.task_feed import TaskFeed
from domain.files import SCHEME, FileRef, file_part, parts_of
from store.files import FileStore, StoredFile
from store.log.application import TaskApplication
from store.log.config import StoreConfig
from store.public_form.subjects import NatsNames
from tests.api.streams_support import (
    A2A_HEADERS,
    open_rest_stream,
    open_stream,
    relay_and_feed,
    results,
    rpc_body,
    served,
)
from tests.api.support import PUBLIC_URL, Advance, FakeClock, log_position, user_message
from tests.store.test_file_store import BUCKET, s3_endpoint  # noqa: F401 - the moto server fixture
from tests.support.projector import projector_running

JSON = dict[str, Any]

pytestmark = pytest.mark.postgres

DATA = b"%PDF-1.7\n" + bytes(range(256)) * 400
SHA = hashlib.sha256(DATA).hexdigest()


@pytest.fixture
def files(tmp_path: Path) -> FileStore:
    return FileStore.from_url(f"file://{tmp_path / 'files'}")


@pytest.fixture
async def feed(store: TaskApplication, nats_url: str, nats_names: tuple[str, str]) -> AsyncIterator[TaskFeed]:
    names = NatsNames(url=nats_url, stream=nats_names[0], subject_prefix=nats_names[1])
    async with relay_and_feed(store, names) as task_feed:
        yield task_feed


@pytest.fixture
async def http(
    make_app: Callable[..., Litestar], feed: TaskFeed, files: FileStore
) -> AsyncIterator[httpx.AsyncClient]:
    async with (
        served(make_app(feed=feed, files=files, stream_keepalive_s=0.2)) as base,
        httpx.AsyncClient(base_url=base, headers=A2A_HEADERS, timeout=10) as client,
    ):
        yield client


async def single(data: bytes) -> AsyncIterator[bytes]:
    yield data


def the_part(stored: StoredFile) -> JSON:
    return file_part(FileRef(stored.sha256, stored.size), media_type="application/pdf", filename="report.pdf")


def commit_artifact(store: TaskApplication, clock: FakeClock, task_id: UUID, part: JSON) -> None:
    task = store.get(task_id)
    task.append_artifact(
        epoch=task.lease_epoch, now=clock(), artifact={"artifactId": "report", "parts": [part]}
    )
    store.save_tasks(task)


def complete_with(store: TaskApplication, clock: FakeClock, task_id: UUID, part: JSON) -> None:
    task = store.get(task_id)
    task.complete(epoch=task.lease_epoch, now=clock(), message={"role": "ROLE_AGENT", "parts": [part]})
    store.save_tasks(task)


async def started(http: httpx.AsyncClient, advance: Advance, **extra: Any) -> UUID:
    params = {"message": user_message(), "configuration": {"returnImmediately": True}, **extra}
    answer = await http.post("/a2a/jsonrpc", json=rpc_body("SendMessage", params))
    task_id = UUID(answer.json()["result"]["task"]["id"])
    await asyncio.to_thread(advance.start, task_id)
    return task_id


def parts_shown(frame: JSON) -> list[JSON]:
    """The file parts a StreamResponse shows; none in the log's form."""
    assert SCHEME not in json.dumps(frame), frame
    return [part for part in parts_of(frame) if "url" in part]


async def test_a_subscription_shows_each_file_with_the_gateways_url_and_a_resume_too(
    http: httpx.AsyncClient, store: TaskApplication, clock: FakeClock, advance: Advance, files: FileStore
) -> None:
    stored = await files.put(single(DATA))
    part = the_part(stored)
    task_id = await started(http, advance)
    url = f"{PUBLIC_URL}/a2a/files/{task_id}/{SHA}"

    async with open_stream(http, "SubscribeToTask", {"id": str(task_id)}) as stream:
        await stream.next()
        await asyncio.to_thread(commit_artifact, store, clock, task_id, part)
        artifact = await stream.next()
        await asyncio.to_thread(complete_with, store, clock, task_id, part)
        rest = await stream.rest()
    async with open_stream(http, "SubscribeToTask", {"id": str(task_id)}, last_event_id=2) as again:
        resumed = await again.rest()  # a terminal task's events, from the log
    async with open_rest_stream(http, "POST", f"/tasks/{task_id}:subscribe", last_event_id=2) as rest_stream:
        rest_frames = [event.data for event in await rest_stream.rest()]

    frames = results([artifact, *rest])
    assert [p["url"] for f in frames for p in parts_shown(f)] == [url, url]
    assert [p["url"] for f in results(resumed) for p in parts_shown(f)] == [url, url]
    assert [p["url"] for f in rest_frames for p in parts_shown(f)] == [url, url]
    downloaded = await http.get(url.removeprefix(PUBLIC_URL))
    assert downloaded.content == DATA


async def test_a_streamed_message_naming_an_upload_shows_it_with_a_url_in_its_first_frame(
    http: httpx.AsyncClient, store: TaskApplication
) -> None:
    uploaded = (
        await http.post("/a2a/files", content=DATA, headers={"Content-Type": "application/pdf"})
    ).json()
    message = {**user_message(), "parts": [{"text": "read this"}, {"url": uploaded["url"]}]}

    async with open_rest_stream(http, "POST", "/message:stream", {"message": message}) as stream:
        first = (await stream.next()).data
    async with open_stream(
        http, "SendStreamingMessage", {"message": {**message, "messageId": "m-2"}}
    ) as stream:
        second = results([await stream.next()])[0]

    for frame in (first, second):
        task_id = frame["task"]["id"]
        assert parts_shown(frame) == [
            {
                "url": f"{PUBLIC_URL}/a2a/files/{task_id}/{SHA}",
                "mediaType": "application/pdf",
                "metadata": {"sha256": SHA, "size": len(DATA)},
            }
        ]
        assert store.get(UUID(task_id)).history[0]["parts"][1]["url"] == SCHEME + SHA


async def test_list_tasks_shows_files_with_urls_on_both_bindings(
    http: httpx.AsyncClient,
    store: TaskApplication,
    store_config: StoreConfig,
    clock: FakeClock,
    advance: Advance,
    files: FileStore,
) -> None:
    stored = await files.put(single(DATA))
    task_id = await started(http, advance)
    await asyncio.to_thread(commit_artifact, store, clock, task_id, the_part(stored))
    with projector_running(store_config) as projector:
        await asyncio.to_thread(projector.wait, log_position(store), 20.0)
        listed = await http.post("/a2a/jsonrpc", json=rpc_body("ListTasks", {"includeArtifacts": True}))
        rest = await http.get("/a2a/rest/tasks", params={"includeArtifacts": "true"})

    for tasks in (listed.json()["result"]["tasks"], rest.json()["tasks"]):
        assert SCHEME not in json.dumps(tasks)
        assert tasks[0]["artifacts"][0]["parts"][0]["url"] == f"{PUBLIC_URL}/a2a/files/{task_id}/{SHA}"


@pytest.fixture
def s3_files(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> FileStore:
    """A file store on moto's S3 server (``s3_endpoint``, the fixture imported above)."""
    endpoint = request.getfixturevalue("s3_endpoint")
    for name, value in {
        "AWS_ACCESS_KEY_ID": "t",
        "AWS_SECRET_ACCESS_KEY": "t",
        "AWS_REGION": "us-east-1",
        "AWS_ENDPOINT_URL": endpoint,
        "AWS_ALLOW_HTTP": "true",
    }.items():
        monkeypatch.setenv(name, value)
    return FileStore.from_url(f"s3://{BUCKET}/{tmp_path.name}")


async def test_over_s3_answers_give_a_pre_signed_url_that_reads_the_file_without_a_key(
    make_app: Callable[..., Litestar],
    store: TaskApplication,
    clock: FakeClock,
    advance: Advance,
    s3_files: FileStore,
) -> None:
    stored = await s3_files.put(single(DATA))
    app = make_app(files=s3_files, file_url_expiry=timedelta(minutes=2))
    async with served(app) as base, httpx.AsyncClient(base_url=base, headers=A2A_HEADERS) as http:
        task_id = await started(http, advance)
        await asyncio.to_thread(commit_artifact, store, clock, task_id, the_part(stored))
        task = (await http.post("/a2a/jsonrpc", json=rpc_body("GetTask", {"id": str(task_id)}))).json()
        through_gateway = await http.get(f"/a2a/files/{task_id}/{SHA}")

    url = task["result"]["artifacts"][0]["parts"][0]["url"]
    assert url.startswith(f"{os.environ['AWS_ENDPOINT_URL']}/{BUCKET}/")
    assert "X-Amz-Expires=120" in url
    async with httpx.AsyncClient() as anyone:
        assert (await anyone.get(url)).content == DATA
    assert through_gateway.content == DATA, "the gateway's URL serves it too"
