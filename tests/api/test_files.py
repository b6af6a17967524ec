"""Files by reference at the gateway: URLs in every answer, downloads, uploads (ADR 0062, docs/api.md#files).

A task's artifact holds a stored file as the log keeps it (``domain.files.file_part``: the bytes
in a file store on ``tmp_path``, the reference committed as a worker commits an artifact). Every
answer of both bindings shows the part with the gateway's URL, never the log's ``longhaul-file:``
form; the URL serves the bytes (whole, ranged, revalidated) to the task's tenant only. A client
uploads a file with one streamed request and refers to it in a message; the log keeps the
message's part in the log's form. Streams and webhooks are in ``test_file_frames.py``.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
from collections.abc import AsyncIterator, Callable
from datetime import timedelta
from pathlib import Path
from typing import Any
from urllib.parse import quote
from uuid import UUID

import httpx
import obstore
import pytest
import pytest_asyncio
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from litestar import Litestar

from api.api_keys import KeyRing, parse_pairs
from api.byte_ranges import ByteRange, UnsatisfiableError, requested_range
from api.files import content_disposition
from domain.files import SCHEME, FileRef, file_part, stored_file
from store.files import FileStore, open_uploads
from store.log.application import TaskApplication
from tests.api.streams_support import served
from tests.api.support import (
    A2A_HEADERS,
    PUBLIC_URL,
    FakeClock,
    error_of,
    http_client,
    log_position,
    user_message,
)

JSON = dict[str, Any]

ACME_KEY = "acme-key-0123456789abcdef"
GLOBEX_KEY = "globex-key-0123456789abcdef"
ACME = {**A2A_HEADERS, "Authorization": f"Bearer {ACME_KEY}"}
GLOBEX = {**A2A_HEADERS, "Authorization": f"Bearer {GLOBEX_KEY}"}
IMMEDIATE = {"returnImmediately": True}
FILES = PUBLIC_URL + "/a2a/files"
DATA = b"".join(hashlib.sha256(f"7:{i}".encode()).digest() for i in range(40_000))  # 1.28 MB
SHA = hashlib.sha256(DATA).hexdigest()


# ------------------------------------------------------------------ fixtures and helpers


@pytest.fixture
def files(tmp_path: Path) -> FileStore:
    return FileStore.from_url(f"file://{tmp_path / 'files'}")


@pytest_asyncio.fixture
async def http(make_app: Callable[..., Litestar], files: FileStore) -> AsyncIterator[httpx.AsyncClient]:
    """A gateway with a file store and two tenants' keys (acme, globex)."""
    keys = KeyRing(parse_pairs(f"acme={ACME_KEY},globex={GLOBEX_KEY}"))
    async with http_client(make_app(files=files, api_keys=keys, max_upload_bytes=2 * len(DATA))) as client:
        yield client


async def chunks(data: bytes, size: int = 64 * 1024) -> AsyncIterator[bytes]:
    for start in range(0, len(data), size):
        yield data[start : start + size]


async def rpc(http: httpx.AsyncClient, method: str, params: JSON, headers: JSON = ACME) -> JSON:
    answer = await http.post(
        "/a2a/jsonrpc", json={"jsonrpc": "2.0", "id": 1, "method": method, "params": params}, headers=headers
    )
    assert answer.status_code == 200, answer.text
    decoded: JSON = answer.json()
    return decoded


async def new_task(http: httpx.AsyncClient, headers: JSON = ACME, **message: Any) -> UUID:
    answer = await rpc(
        http, "SendMessage", {"message": user_message(**message), "configuration": IMMEDIATE}, headers
    )
    return UUID(answer["result"]["task"]["id"])


def commit_file(
    store: TaskApplication, clock: FakeClock, task_id: UUID, part: JSON, *, complete: bool = True
) -> None:
    """As a worker commits a file: an artifact holding ``part``; then completed, the part in its message."""
    task = store.get(task_id)
    now = clock()
    epoch = task.grant_lease(worker="test-worker", now=now, until=now + timedelta(hours=1))
    task.append_artifact(
        epoch=epoch, now=now, artifact={"artifactId": "report", "name": "report", "parts": [part]}
    )
    if complete:
        message = {"role": "ROLE_AGENT", "parts": [{"text": "your report"}, part]}
        task.complete(epoch=epoch, now=now, message=message)
    store.save_tasks(task)


async def task_with_file(
    http: httpx.AsyncClient,
    store: TaskApplication,
    clock: FakeClock,
    files: FileStore,
    *,
    filename: str = "report.pdf",
    complete: bool = True,
) -> UUID:
    stored = await files.put(chunks(DATA))
    task_id = await new_task(http)
    part = file_part(FileRef(stored.sha256, stored.size), media_type="application/pdf", filename=filename)
    await asyncio.to_thread(commit_file, store, clock, task_id, part, complete=complete)
    return task_id


def url_of(task_id: UUID, sha256: str = SHA) -> str:
    return f"{FILES}/{task_id}/{sha256}"


def shown_part(task_id: UUID, filename: str = "report.pdf") -> JSON:
    """The part every answer shows for the stored file."""
    return {
        "url": url_of(task_id),
        "mediaType": "application/pdf",
        "filename": filename,
        "metadata": {"sha256": SHA, "size": len(DATA)},
    }


def no_log_form(document: object) -> None:
    assert SCHEME not in json.dumps(document), document


async def upload(
    http: httpx.AsyncClient,
    data: bytes,
    headers: JSON = ACME,
    *,
    query: str = "",
    media_type: str = "text/csv",
) -> httpx.Response:
    return await http.post(
        "/a2a/files" + query, content=chunks(data), headers={**headers, "Content-Type": media_type}
    )


# ------------------------------------------------------------------ every answer shows the URL


async def test_get_and_cancel_show_a_stored_file_with_the_gateways_url_on_both_bindings(
    http: httpx.AsyncClient, store: TaskApplication, clock: FakeClock, files: FileStore
) -> None:
    done = await task_with_file(http, store, clock, files)
    working = await task_with_file(http, store, clock, files, filename="draft.pdf", complete=False)

    got = (await rpc(http, "GetTask", {"id": str(done)}))["result"]
    rest = (await http.get(f"/a2a/rest/tasks/{done}", headers=ACME)).json()
    canceled = (await rpc(http, "CancelTask", {"id": str(working)}))["result"]

    for task in (got, rest):
        assert task["artifacts"][0]["parts"] == [shown_part(done)]
        assert task["status"]["message"]["parts"][1] == shown_part(done)
        no_log_form(task)
    assert canceled["artifacts"][0]["parts"] == [shown_part(working, "draft.pdf")]
    no_log_form(canceled)
    stored = store.get(done)
    assert stored.artifacts["report"]["parts"][0]["url"] == SCHEME + SHA, "the log keeps its own form"


async def test_a_task_without_files_is_answered_as_before(http: httpx.AsyncClient) -> None:
    task_id = await new_task(http, text="plain")

    got = (await rpc(http, "GetTask", {"id": str(task_id)}))["result"]

    assert got["history"][0]["parts"] == [{"text": "plain"}]


# ------------------------------------------------------------------ downloads


async def test_the_url_serves_the_bytes_with_the_parts_media_type_name_and_hash(
    http: httpx.AsyncClient, store: TaskApplication, clock: FakeClock, files: FileStore
) -> None:
    task_id = await task_with_file(http, store, clock, files)

    got = await http.get(url_of(task_id), headers=ACME)
    head = await http.head(url_of(task_id), headers=ACME)

    assert got.status_code == 200
    assert got.content == DATA
    assert got.headers["content-type"] == "application/pdf"
    assert got.headers["content-length"] == str(len(DATA))
    assert got.headers["etag"] == f'"{SHA}"'
    assert got.headers["accept-ranges"] == "bytes"
    assert got.headers["content-disposition"] == 'attachment; filename="report.pdf"'
    assert got.headers["x-content-type-options"] == "nosniff"
    assert head.status_code == 200
    assert head.content == b""
    assert head.headers["content-length"] == str(len(DATA))
    assert head.headers["etag"] == f'"{SHA}"'


async def test_ranges_resume_a_broken_download_and_revalidation_answers_304(
    http: httpx.AsyncClient, store: TaskApplication, clock: FakeClock, files: FileStore
) -> None:
    task_id = await task_with_file(http, store, clock, files)
    url = url_of(task_id)
    size = len(DATA)

    first = await http.get(url, headers={**ACME, "Range": "bytes=0-99999"})
    rest = await http.get(url, headers={**ACME, "Range": "bytes=100000-", "If-Range": f'"{SHA}"'})
    tail = await http.get(url, headers={**ACME, "Range": "bytes=-10"})
    past = await http.get(url, headers={**ACME, "Range": f"bytes={size}-"})
    stale_if_range = await http.get(url, headers={**ACME, "Range": "bytes=0-9", "If-Range": '"other"'})
    cached = await http.get(url, headers={**ACME, "If-None-Match": f'W/"{SHA}", "x"'})

    assert first.status_code == 206
    assert first.headers["content-range"] == f"bytes 0-99999/{size}"
    assert first.headers["content-length"] == "100000"
    assert rest.status_code == 206
    assert rest.headers["content-range"] == f"bytes 100000-{size - 1}/{size}"
    assert first.content + rest.content == DATA, "a resumed download is the file"
    assert hashlib.sha256(first.content + rest.content).hexdigest() == SHA
    assert tail.status_code == 206
    assert tail.content == DATA[-10:]
    assert past.status_code == 416
    assert past.headers["content-range"] == f"bytes */{size}"
    assert stale_if_range.status_code == 200, "If-Range of another version: the whole file"
    assert stale_if_range.content == DATA
    assert cached.status_code == 304
    assert cached.content == b""
    assert cached.headers["etag"] == f'"{SHA}"'


async def test_another_tenant_an_unknown_hash_or_task_all_get_the_same_404(
    http: httpx.AsyncClient, store: TaskApplication, clock: FakeClock, files: FileStore
) -> None:
    task_id = await task_with_file(http, store, clock, files)
    other = await files.put(chunks(b"another tenant's file"))  # stored, but not this task's
    unknown_task = "0b7d3f6a-2f1e-4c8e-9a53-1f0e3c2d4b5a"

    answers = [
        await http.get(url_of(task_id), headers=GLOBEX),
        await http.head(url_of(task_id), headers=GLOBEX),
        await http.get(url_of(task_id, other.sha256), headers=ACME),
        await http.get(url_of(task_id, "0" * 64), headers=ACME),
        await http.get(url_of(task_id, "not-a-hash"), headers=ACME),
        await http.get(f"{FILES}/{unknown_task}/{SHA}", headers=ACME),
        await http.get(f"{FILES}/not-a-task/{SHA}", headers=ACME),
    ]
    unauthenticated = await http.get(url_of(task_id))

    assert [a.status_code for a in answers] == [404] * len(answers)
    bodies = {answers[0].text.replace(str(task_id), "T"), answers[5].text.replace(unknown_task, "T")}
    assert len(bodies) == 1, "another tenant's task reads as an unknown task"
    assert answers[0].json()["error"]["status"] == "NOT_FOUND"
    assert answers[0].text == answers[2].text.replace(other.sha256, SHA)
    assert unauthenticated.status_code == 401


async def test_a_gateway_without_a_file_store_answers_404(
    make_app: Callable[..., Litestar], store: TaskApplication, clock: FakeClock, files: FileStore
) -> None:
    async with http_client(make_app()) as http:
        task_id = await task_with_file(http, store, clock, files)
        got = await http.get(url_of(task_id))
        posted = await http.post("/a2a/files", content=b"x")
        task = (await rpc(http, "GetTask", {"id": str(task_id)}, A2A_HEADERS))["result"]

    assert got.status_code == 404
    assert posted.status_code == 404
    assert task["artifacts"][0]["parts"][0]["url"] == url_of(task_id), (
        "the URL still never leaks the log's form"
    )


async def test_a_file_gone_from_the_store_is_404(
    http: httpx.AsyncClient, store: TaskApplication, clock: FakeClock, files: FileStore
) -> None:
    task_id = await task_with_file(http, store, clock, files)
    await files.delete(SHA)

    assert (await http.get(url_of(task_id), headers=ACME)).status_code == 404


@pytest.mark.parametrize(
    ("filename", "header"),
    [
        (None, "attachment"),
        ("report.pdf", 'attachment; filename="report.pdf"'),
        (
            'a "quoted"\\name',
            "attachment; filename=\"a _quoted__name\"; filename*=UTF-8''a%20%22quoted%22%5Cname",
        ),
        (
            "résumé 2026.pdf",
            "attachment; filename=\"r_sum_ 2026.pdf\"; filename*=UTF-8''r%C3%A9sum%C3%A9%202026.pdf",
        ),
        ("line\r\nbreak", "attachment; filename=\"line__break\"; filename*=UTF-8''line%0D%0Abreak"),
    ],
)
def test_content_disposition_names_the_file_in_ascii_and_in_utf_8(filename: str | None, header: str) -> None:
    assert content_disposition(filename) == header


async def test_a_non_ascii_file_name_downloads_with_filename_star(
    http: httpx.AsyncClient, store: TaskApplication, clock: FakeClock, files: FileStore
) -> None:
    task_id = await task_with_file(http, store, clock, files, filename="отчёт.pdf")

    got = await http.head(url_of(task_id), headers=ACME)

    assert got.headers["content-disposition"].endswith("filename*=UTF-8''" + quote("отчёт.pdf", safe=""))


# ------------------------------------------------------------------ Range headers


@pytest.mark.parametrize(
    ("header", "size", "expected"),
    [
        ("bytes=0-0", 10, ByteRange(0, 0)),
        ("bytes=2-5", 10, ByteRange(2, 5)),
        ("bytes=2-", 10, ByteRange(2, 9)),
        ("bytes=5-100", 10, ByteRange(5, 9)),
        ("bytes=-3", 10, ByteRange(7, 9)),
        ("bytes=-30", 10, ByteRange(0, 9)),
        ("bytes=0-" + "9" * 40, 10, ByteRange(0, 9)),
        (" bytes=1-2 ", 10, ByteRange(1, 2)),
        ("bytes=5-2", 10, None),
        ("bytes=0-1,3-4", 10, None),
        ("items=0-1", 10, None),
        ("bytes=-", 10, None),
        ("bytes=x-1", 10, None),
        (None, 10, None),
    ],
)
def test_one_range_is_served_anything_else_is_the_whole_file(
    header: str | None, size: int, expected: ByteRange | None
) -> None:
    assert requested_range(header, size) == expected


@pytest.mark.parametrize(
    ("header", "size"),
    [("bytes=10-", 10), ("bytes=-0", 10), ("bytes=0-", 0), ("bytes=-5", 0), ("bytes=" + "9" * 40 + "-", 10)],
)
def test_a_range_past_the_end_is_unsatisfiable(header: str, size: int) -> None:
    with pytest.raises(UnsatisfiableError):
        requested_range(header, size)


@given(
    header=st.one_of(st.text(max_size=40), st.from_regex(r"bytes=[0-9]{0,25}-[0-9]{0,25}", fullmatch=True)),
    size=st.integers(0, 2**40),
)
def test_any_range_header_is_a_range_inside_the_file_the_whole_file_or_unsatisfiable(
    header: str, size: int
) -> None:
    try:
        wanted = requested_range(header, size)
    except UnsatisfiableError:
        return
    if wanted is not None:
        assert 0 <= wanted.start <= wanted.end < size
        assert wanted.length == wanted.end - wanted.start + 1


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    headers=st.dictionaries(
        st.sampled_from(["Range", "If-Range", "If-None-Match"]),
        st.one_of(
            st.text(st.characters(min_codepoint=32, max_codepoint=126), max_size=30),
            st.from_regex(r"bytes=-?[0-9]{0,22}-?[0-9]{0,22}", fullmatch=True),
        ),
    )
)
async def test_bad_range_headers_never_fail_the_download(
    headers: dict[str, str], ranged: tuple[httpx.AsyncClient, str]
) -> None:
    http, url = ranged
    got = await http.get(url, headers={**ACME, **headers})

    assert got.status_code in (200, 206, 304, 416), got.text
    if got.status_code == 206:
        start, end = (int(n) for n in got.headers["content-range"].split(" ")[1].split("/")[0].split("-"))
        assert got.content == DATA[start : end + 1]
    elif got.status_code == 200:
        assert got.content == DATA


@pytest_asyncio.fixture
async def ranged(
    http: httpx.AsyncClient, store: TaskApplication, clock: FakeClock, files: FileStore
) -> tuple[httpx.AsyncClient, str]:
    task_id = await task_with_file(http, store, clock, files)
    return http, url_of(task_id)


# ------------------------------------------------------------------ uploads


@pytest.mark.postgres  # the upload records in their table
async def test_an_upload_referred_to_in_a_message_is_kept_by_reference_and_downloads(
    http: httpx.AsyncClient, store: TaskApplication
) -> None:
    uploaded = await upload(http, DATA, query="?filename=input.csv")
    assert uploaded.status_code == 201, uploaded.text
    answer = uploaded.json()
    assert answer == {
        "url": f"{FILES}/uploads/{SHA}",
        "sha256": SHA,
        "size": len(DATA),
        "mediaType": "text/csv",
        "filename": "input.csv",
    }
    part = {"url": answer["url"], "mediaType": "text/csv", "metadata": {"note": "mine"}}
    message = {**user_message("sum this"), "parts": [{"text": "sum this"}, part]}

    sent = (await rpc(http, "SendMessage", {"message": message, "configuration": IMMEDIATE}))["result"][
        "task"
    ]

    task_id = UUID(sent["id"])
    logged = store.get(task_id).history[0]["parts"][1]
    assert logged == {
        "url": SCHEME + SHA,
        "mediaType": "text/csv",
        "filename": "input.csv",
        "metadata": {"note": "mine", "sha256": SHA, "size": len(DATA)},
    }, "the log keeps the upload as a stored file of the task"
    shown = sent["history"][0]["parts"][1]
    assert shown["url"] == url_of(task_id)
    no_log_form(sent)
    assert (await http.get(shown["url"], headers=ACME)).content == DATA
    assert (await http.get(answer["url"], headers=ACME)).content == DATA, "the uploader reads its upload"
    assert (await http.get(answer["url"], headers=GLOBEX)).status_code == 404


async def test_an_upload_over_rest_with_a_content_disposition_name(
    http: httpx.AsyncClient, store: TaskApplication
) -> None:
    headers = {
        **ACME,
        "Content-Type": "application/pdf",
        "Content-Disposition": "attachment; filename*=UTF-8''%C3%A9t%C3%A9.pdf",
    }
    answer = (await http.post("/a2a/files", content=b"%PDF-1.7 tiny", headers=headers)).json()
    message = {**user_message(), "parts": [{"url": answer["url"]}]}

    sent = await http.post(
        "/a2a/rest/message:send", json={"message": message, "configuration": IMMEDIATE}, headers=ACME
    )

    assert sent.status_code == 200, sent.text
    task_id = UUID(sent.json()["task"]["id"])
    logged = store.get(task_id).history[0]["parts"][0]
    assert stored_file(logged) == FileRef(answer["sha256"], len(b"%PDF-1.7 tiny"))
    assert logged["mediaType"] == "application/pdf"
    assert logged["filename"] == "été.pdf"


@pytest.mark.postgres  # the upload records in their table
async def test_another_tenants_upload_or_the_log_form_is_invalid_params_naming_the_part(
    http: httpx.AsyncClient, store: TaskApplication
) -> None:
    acme_upload = (await upload(http, DATA)).json()
    before = log_position(store)
    texts = [{"text": "see"}]
    cases = {
        "message.parts[1].url": {"url": acme_upload["url"]},  # acme's upload, sent by globex
        "message.parts[1]": {"url": SCHEME + SHA, "metadata": {"sha256": SHA, "size": len(DATA)}},
    }
    for field, part in cases.items():
        message = {**user_message(), "parts": [*texts, part]}
        answer = await rpc(http, "SendMessage", {"message": message}, GLOBEX)
        error = error_of(answer, -32602, "INVALID_PARAMS")
        assert error["data"][1]["fieldViolations"][0]["field"] == field, error
        rest = await http.post("/a2a/rest/message:send", json={"message": message}, headers=GLOBEX)
        assert rest.status_code == 400
        assert rest.json()["error"]["details"][1]["fieldViolations"][0]["field"] == field
    unknown = {**user_message(), "parts": [{"url": f"{FILES}/uploads/{'0' * 64}"}]}
    malformed = {**user_message(), "parts": [{"url": f"{FILES}/uploads/../secrets"}]}
    error_of(await rpc(http, "SendMessage", {"message": unknown}), -32602, "INVALID_PARAMS")
    error_of(await rpc(http, "SendMessage", {"message": malformed}), -32602, "INVALID_PARAMS")
    assert log_position(store) == before, "nothing was submitted"


async def test_an_outside_url_passes_as_the_client_sent_it(
    http: httpx.AsyncClient, store: TaskApplication
) -> None:
    part = {"url": "https://example.com/data.csv", "mediaType": "text/csv"}
    message = {**user_message(), "parts": [part]}

    sent = (await rpc(http, "SendMessage", {"message": message, "configuration": IMMEDIATE}))["result"][
        "task"
    ]

    assert store.get(UUID(sent["id"])).history[0]["parts"] == [part]


async def test_an_upload_over_the_limit_is_413_and_nothing_is_kept(
    http: httpx.AsyncClient, files: FileStore, store: TaskApplication
) -> None:
    too_big = DATA * 2 + b"!"
    streamed = await upload(http, too_big)  # no Content-Length: refused as it arrives
    declared = await http.post("/a2a/files", content=too_big, headers=ACME)  # refused before a byte is read

    for answer in (streamed, declared):
        assert answer.status_code == 413
        assert answer.json()["error"]["status"] == "INVALID_ARGUMENT"
        assert "LONGHAUL_MAX_UPLOAD_BYTES" in answer.json()["error"]["message"]
    assert [h async for h in files.hashes()] == []
    assert [m async for batch in obstore.list(files.store, prefix="incoming") for m in batch] == []


async def test_an_upload_larger_than_the_json_body_limit_is_accepted(
    make_app: Callable[..., Litestar], files: FileStore
) -> None:
    async with http_client(make_app(files=files, max_body_bytes=1024)) as http:
        answer = await http.post("/a2a/files", content=chunks(DATA))

    assert answer.status_code == 201, answer.text
    assert answer.json()["sha256"] == SHA


async def test_an_upload_the_client_breaks_off_leaves_no_file_and_no_record(
    make_app: Callable[..., Litestar], files: FileStore, store: TaskApplication
) -> None:
    """The client goes away mid-body: the server receives ``http.disconnect`` (as uvicorn sends it)."""
    app = make_app(files=files)
    pieces: list[JSON] = [{"type": "http.request", "body": DATA[:65536], "more_body": True}] * 3
    incoming: list[JSON] = [*pieces, {"type": "http.disconnect"}]
    sent: list[JSON] = []

    async def receive() -> JSON:
        if incoming:
            return incoming.pop(0)
        await asyncio.sleep(3600)
        raise AssertionError

    async def send(message: JSON) -> None:
        sent.append(message)

    scope = {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": "POST",
        "scheme": "http",
        "path": "/a2a/files",
        "raw_path": b"/a2a/files",
        "query_string": b"",
        "root_path": "",
        "headers": [(b"host", b"gateway.test"), (b"content-type", b"text/plain")],
        "client": ("127.0.0.1", 5000),
        "server": ("gateway.test", 80),
    }
    await asyncio.wait_for(app(scope, receive, send), 10)  # type: ignore[arg-type]

    assert incoming == [], "the whole broken body was read"
    assert [h async for h in files.hashes()] == []
    assert [m async for batch in obstore.list(files.store, prefix="incoming") for m in batch] == []
    partial = hashlib.sha256(DATA[:65536] * 3).hexdigest()
    assert open_uploads(store).find("default", partial) is None


async def test_an_open_gateway_serves_a_file_of_any_tenants_task(
    make_app: Callable[..., Litestar], store: TaskApplication, clock: FakeClock, files: FileStore
) -> None:
    """Without keys a caller may name any tenant, so the file URL (which names none) reads any task's."""
    async with http_client(make_app(files=files)) as http:
        stored = await files.put(chunks(DATA))
        answer = await rpc(
            http,
            "SendMessage",
            {"message": user_message(), "configuration": IMMEDIATE, "tenant": "initech"},
            A2A_HEADERS,
        )
        task_id = UUID(answer["result"]["task"]["id"])
        part = file_part(FileRef(stored.sha256, stored.size), media_type="text/plain")
        await asyncio.to_thread(commit_file, store, clock, task_id, part)
        got = await http.get(url_of(task_id))

    assert got.status_code == 200
    assert got.content == DATA
    assert got.headers["content-disposition"] == "attachment"
    assert got.headers["content-type"].startswith("text/plain")


def files_on_disk(root: Path) -> list[Path]:
    return [path for path in root.rglob("*") if path.is_file()]


async def test_a_real_connection_closed_mid_upload_leaves_nothing_on_disk(
    make_app: Callable[..., Litestar], files: FileStore, tmp_path: Path, store: TaskApplication
) -> None:
    """Over uvicorn: the client sends part of its body and closes the connection."""
    root = tmp_path / "files"
    async with served(make_app(files=files)) as base:
        host, port = base.removeprefix("http://").split(":")
        _, writer = await asyncio.open_connection(host, int(port))
        head = (
            "POST /a2a/files HTTP/1.1\r\nHost: gateway.test\r\nContent-Type: text/plain\r\n"
            f"Content-Length: {10 * len(DATA)}\r\n\r\n"
        )
        writer.write(head.encode() + DATA)
        await writer.drain()
        async with asyncio.timeout(10):
            while not files_on_disk(root):  # noqa: ASYNC110 - the upload is being written (a file)
                await asyncio.sleep(0.01)
        writer.close()
        await writer.wait_closed()
        async with asyncio.timeout(10):
            while files_on_disk(root):  # noqa: ASYNC110 - a file on disk, no event to wait on
                await asyncio.sleep(0.01)

    assert [h async for h in files.hashes()] == []
    assert open_uploads(store).find("default", SHA) is None


async def test_the_audit_state_shows_the_task_as_get_task_did_and_its_events_the_logs_form(
    http: httpx.AsyncClient, store: TaskApplication, clock: FakeClock, files: FileStore
) -> None:
    task_id = await task_with_file(http, store, clock, files)
    version = store.get(task_id).version

    state = (await http.get(f"/audit/v1/tasks/{task_id}/state?version={version}", headers=ACME)).json()
    events = (await http.get(f"/audit/v1/tasks/{task_id}/events", headers=ACME)).json()

    assert state["task"]["artifacts"][0]["parts"] == [shown_part(task_id)]
    assert SCHEME + SHA in json.dumps(events), "an auditor reads the events as the log holds them"
