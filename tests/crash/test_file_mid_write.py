"""A worker SIGKILLed while it writes a large file: the next worker resumes after the last chunk.

``big-file`` writes its artifact chunk by chunk into the file store, each chunk one commit with
the checkpoint that says how far the file got. Two worker processes run; the one that holds the
task is SIGKILLed once three chunks are committed, while it writes the fourth. The survivor
claims the task after the lease and writes from the fourth chunk on. Afterwards: every chunk is in
the log once, every file at an address in the store is whole (its bytes hash to its name: no half
file is visible), and the bytes a client downloads from a gateway, part by part as ``GetTask``
names them, hash to what the log says and are the skill's content.
"""

from __future__ import annotations

import asyncio
import hashlib
from pathlib import Path
from uuid import UUID

import httpx

from domain.files import files_in, stored_file
from store.files import FileStore
from store.log.application import TaskApplication
from tests.crash.cluster import Cluster, events, holder_pid, of_kind, rpc, submit, wait_for_state
from tests.support.processes import wait_until
from workers.skills.big_file import ARTIFACT, expected_bytes

CHUNK = 4 << 20
SIZE = 12 * CHUNK + 123456
KILL_AFTER = 3
"""Chunks committed before the kill."""


def _written(store: TaskApplication, task_id: UUID) -> int:
    return int(store.get(task_id).checkpoint.get("written", 0))


async def _rehashed(files: FileStore) -> dict[str, str]:
    """Every stored file's name and the hash of the bytes it holds."""
    found = {}
    async for name in files.hashes():
        digest = hashlib.sha256()
        async for chunk in files.read(name):
            digest.update(chunk)
        found[name] = digest.hexdigest()
    return found


async def _expected_hash() -> str:
    digest = hashlib.sha256()
    async for block in expected_bytes(SIZE, 11):
        digest.update(block)
    return digest.hexdigest()


def test_a_worker_killed_mid_file_resumes_and_the_bytes_are_the_ones_the_log_names(
    cluster: Cluster, store: TaskApplication, tmp_path: Path
) -> None:
    files_dir = tmp_path / "files"
    workers = cluster.workers(2, file_store_url=files_dir.as_uri())
    gateway = cluster.gateway(file_store_url=files_dir.as_uri())
    task_id = submit(store, "big-file", {"bytes": SIZE, "seed": 11, "chunk_bytes": CHUNK})

    wait_until(lambda: _written(store, task_id) >= KILL_AFTER * CHUNK, 60, "three chunks", interval=0.01)
    pid = holder_pid(store, task_id)
    victim = next(w for w in workers if w.pid == pid)
    victim.kill()
    at_kill = _written(store, task_id)
    assert at_kill < SIZE, "the kill came after the file was whole"

    task = wait_for_state(store, task_id, "TASK_STATE_COMPLETED", 120, cluster)
    history = events(store, task_id)

    # Each chunk was committed once: offsets strictly grow, under the victim's epoch then the survivor's.
    chunks = of_kind(history, "ArtifactChunkAppended")
    refs = [stored_file(chunk.artifact["parts"][0]) for chunk in chunks]
    assert all(ref is not None for ref in refs)
    assert [ref.size for ref in refs if ref] == [CHUNK] * 12 + [123456]
    epochs = [chunk.epoch for chunk in chunks]
    assert epochs == sorted(epochs)
    assert epochs.count(epochs[0]) * CHUNK == at_kill  # the victim's chunks end where it was killed
    assert len(set(epochs)) == 2

    store_of_files = FileStore.from_url(files_dir.as_uri())
    rehashed = asyncio.run(_rehashed(store_of_files))
    assert all(name == digest for name, digest in rehashed.items())  # no half file at any address
    referenced = {ref.sha256 for ref in files_in(task.artifacts)}
    assert referenced <= set(rehashed)
    # What a client downloads: each part's URL from GetTask, in order.
    answer = rpc(gateway, "GetTask", {"id": str(task_id)})["result"]
    [artifact] = [a for a in answer["artifacts"] if a["artifactId"] == ARTIFACT]
    downloaded = hashlib.sha256()
    for part, ref in zip(artifact["parts"], refs, strict=True):
        assert ref is not None
        assert part["url"].startswith(f"{gateway}/a2a/files/")
        got = httpx.get(part["url"], timeout=60)
        assert got.status_code == 200
        assert hashlib.sha256(got.content).hexdigest() == ref.sha256 == part["metadata"]["sha256"]
        downloaded.update(got.content)
    assert downloaded.hexdigest() == asyncio.run(_expected_hash())
