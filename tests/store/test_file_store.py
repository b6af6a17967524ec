"""The file store's contract, on both backends: a directory, and a real S3-protocol server.

The S3 side runs against ``moto`` in server mode (a real HTTP server speaking S3, started here),
through the same ``obstore`` client production uses: nothing between the store and the wire is a
mock.
"""

from __future__ import annotations

import hashlib
import socket
from collections.abc import AsyncIterator, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import httpx
import obstore
import pytest
from moto.server import ThreadedMotoServer

from store.files import FileNotStoredError, FileStore, StoredFile, address

MiB = 1024 * 1024
BUCKET = "longhaul-files"


@pytest.fixture(scope="module")
def s3_endpoint() -> Iterator[str]:
    """A moto S3 server of this module's own, with one bucket."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    server.start()
    endpoint = f"http://127.0.0.1:{port}"
    httpx.put(f"{endpoint}/{BUCKET}", timeout=10).raise_for_status()  # moto takes an unsigned create
    try:
        yield endpoint
    finally:
        server.stop()


@pytest.fixture(params=["directory", "s3"])
def files(request: pytest.FixtureRequest, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> FileStore:
    """An empty file store on each backend (on S3: a prefix of this test's own)."""
    if request.param == "directory":
        return FileStore.from_url(f"file://{tmp_path / 'files'}")
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


async def chunks_of(size: int, chunk: int = MiB, seed: bytes = b"x") -> AsyncIterator[bytes]:
    """``size`` bytes in chunks: each chunk a run of one byte value that changes chunk by chunk."""
    sent = 0
    index = 0
    while sent < size:
        part = bytes([(seed[0] + index) % 256]) * min(chunk, size - sent)
        sent += len(part)
        index += 1
        yield part


async def expected(size: int, chunk: int = MiB) -> bytes:
    return b"".join([c async for c in chunks_of(size, chunk)])


async def read_all(files: FileStore, sha256: str, start: int = 0, end: int | None = None) -> bytes:
    return b"".join([c async for c in files.read(sha256, start, end)])


async def listed(files: FileStore, prefix: str) -> list[str]:
    return [str(meta["path"]) async for batch in obstore.list(files.store, prefix=prefix) for meta in batch]


async def test_a_file_is_kept_under_the_hash_of_its_bytes_and_read_back_whole_or_in_ranges(
    files: FileStore,
) -> None:
    size = 12 * MiB + 7  # several multipart parts on S3, and an odd tail
    stored = await files.put(chunks_of(size))

    data = await expected(size)
    assert stored == StoredFile(hashlib.sha256(data).hexdigest(), size)
    assert await read_all(files, stored.sha256) == data
    assert await read_all(files, stored.sha256, 5 * MiB - 3, 5 * MiB + 3) == data[5 * MiB - 3 : 5 * MiB + 3]
    assert await read_all(files, stored.sha256, size - 10) == data[-10:], "from an offset to the end"
    assert await files.size(stored.sha256) == size
    assert [h async for h in files.hashes()] == [stored.sha256]
    assert await listed(files, "incoming") == [], "no temporary object is left behind"


async def pieces(data: bytes, size: int) -> AsyncIterator[bytes]:
    for start in range(0, len(data), size):
        yield data[start : start + size]


async def test_the_same_bytes_stored_twice_are_kept_once(files: FileStore) -> None:
    data = await expected(3 * MiB)
    first = await files.put(pieces(data, MiB))
    again = await files.put(pieces(data, 1000))  # other chunks, the same bytes

    assert again == first
    assert await listed(files, "sha256") == [address(first.sha256)]
    assert await listed(files, "incoming") == []


async def test_an_upload_that_breaks_leaves_no_file_and_no_temporary_object(files: FileStore) -> None:
    async def breaks() -> AsyncIterator[bytes]:
        async for chunk in chunks_of(8 * MiB):
            yield chunk
        raise ConnectionResetError("the client went away")

    with pytest.raises(ConnectionResetError):
        await files.put(breaks())

    assert [h async for h in files.hashes()] == []
    assert await listed(files, "incoming") == []


async def test_an_empty_file_is_a_file(files: FileStore) -> None:
    stored = await files.put(chunks_of(0))

    assert stored == StoredFile(hashlib.sha256(b"").hexdigest(), 0)
    assert await read_all(files, stored.sha256) == b""


async def test_a_missing_file_is_said_so_and_deleting_it_twice_is_harmless(files: FileStore) -> None:
    stored = await files.put(chunks_of(10))
    await files.delete(stored.sha256)
    await files.delete(stored.sha256)

    assert await files.size(stored.sha256) is None
    with pytest.raises(FileNotStoredError):
        await read_all(files, stored.sha256)
    assert [h async for h in files.hashes()] == []


async def test_old_temporary_objects_of_dead_uploads_are_removed(files: FileStore) -> None:
    await obstore.put_async(files.store, "incoming/left-by-a-killed-worker", b"half a file")
    kept = await files.put(chunks_of(100))

    assert await files.remove_incoming(older_than=datetime.now(UTC) - timedelta(hours=1)) == 0
    assert await files.remove_incoming(older_than=datetime.now(UTC) + timedelta(seconds=5)) == 1
    assert await listed(files, "incoming") == []
    assert await files.size(kept.sha256) == 100


@pytest.mark.parametrize("bad", ["", "ABC", "g" * 64, "../" + "a" * 61, "a" * 63])
def test_only_a_sha256_in_lower_case_hex_is_an_address(bad: str) -> None:
    with pytest.raises(ValueError, match="not a SHA-256"):
        address(bad)


async def test_a_signed_url_reads_the_file_without_credentials_on_s3_and_a_directory_signs_none(
    files: FileStore,
) -> None:
    data = await expected(3 * MiB + 5)
    stored = await files.put(pieces(data, MiB))

    url = await files.signed_url(stored.sha256, timedelta(minutes=5))

    if files.url.startswith("file://"):
        assert url is None, "a directory's files are served by the gateway"
        return
    assert url is not None
    assert "X-Amz-Expires=300" in url
    assert "X-Amz-Signature=" in url
    async with httpx.AsyncClient() as client:  # no credentials: the URL is the permission
        whole = await client.get(url)
        ranged = await client.get(url, headers={"Range": "bytes=10-19"})
    assert whole.status_code == 200
    assert whole.content == data
    assert ranged.status_code == 206
    assert ranged.content == data[10:20]
