"""big-file and checksum on the real runtime in memory: files written chunk by chunk, read back.

The kit's file store is in memory (``SkillKit.files``); the step API (``emit_file``,
``read_file``) is the worker's own.
"""

from __future__ import annotations

import base64
import hashlib
import itertools
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from domain.files import SCHEME, stored_file
from domain.skill import Complete, Skill, StepContext, StepOutcome
from domain.states import TaskState
from longhaul.testing import SkillKit, message_text
from workers.skills.big_file import ARTIFACT, BIG_FILE, content, expected_bytes
from workers.skills.checksum import CHECKSUM

CHUNK_COMMIT = ["ArtifactChunkAppended", "CheckpointSaved", "ProgressReported"]
"""One chunk of big-file: the file's reference, how far the file got and a progress message."""


@pytest.fixture
def kit() -> Iterator[SkillKit]:
    with SkillKit(BIG_FILE, CHECKSUM, file_inline_max_bytes=100) as kit:
        yield kit


async def whole(size: int, seed: int) -> bytes:
    return b"".join([block async for block in expected_bytes(size, seed)])


def test_the_content_is_the_digests_of_seed_and_index_cut_to_size() -> None:
    first = hashlib.sha256(b"7:0").digest() + hashlib.sha256(b"7:1").digest()
    assert content(7, 0, 40) == first[:40]
    assert content(7, 10, 40) == first[10:40]


@given(seed=st.integers(-5, 5), cuts=st.lists(st.integers(0, 300), min_size=2, max_size=6))
def test_pieces_of_the_content_join_to_the_whole(seed: int, cuts: list[int]) -> None:
    points = sorted(cuts)
    pieces = [content(seed, a, b) for a, b in itertools.pairwise(points)]
    assert b"".join(pieces) == content(seed, points[0], points[-1])
    assert len(b"".join(pieces)) == points[-1] - points[0]


async def test_big_file_writes_its_bytes_chunk_by_chunk_by_reference(kit: SkillKit) -> None:
    task_id = kit.submit("big-file", data={"bytes": 1050, "seed": 3, "chunk_bytes": 300})

    task = await kit.run(task_id)

    assert task.state == TaskState.COMPLETED
    assert await kit.file_bytes(task_id, ARTIFACT) == await whole(1050, 3)
    parts = task.artifacts[ARTIFACT]["parts"]
    refs = [stored_file(part) for part in parts]
    assert [ref.size if ref else None for ref in refs] == [300, 300, 300, 150]
    assert all(part["url"].startswith(SCHEME) and part["filename"] == ARTIFACT for part in parts)
    for ref, start in zip(refs, range(0, 1050, 300), strict=True):  # the hash in the log is the bytes'
        assert ref is not None
        assert ref.sha256 == hashlib.sha256(content(3, start, start + ref.size)).hexdigest()
    commits = kit.commits(task_id)
    assert commits.count(CHUNK_COMMIT) == 4


async def test_a_worker_killed_mid_file_resumes_after_the_last_chunk_it_committed(kit: SkillKit) -> None:
    task_id = kit.submit("big-file", data={"bytes": 1000, "seed": 4, "chunk_bytes": 300})

    await kit.run(task_id, crash_before_commit=3)  # two chunks kept; the third is lost with the worker
    task = await kit.run(task_id)

    assert task.state == TaskState.COMPLETED
    assert kit.commits(task_id).count(CHUNK_COMMIT) == 4  # no chunk committed twice
    assert await kit.file_bytes(task_id, ARTIFACT) == await whole(1000, 4)


async def test_a_small_file_stays_inline_in_its_event(kit: SkillKit) -> None:
    task_id = kit.submit("big-file", data={"bytes": 64, "seed": 1})

    task = await kit.run(task_id)

    [part] = task.artifacts[ARTIFACT]["parts"]
    assert "url" not in part
    assert base64.b64decode(part["raw"]) == content(1, 0, 64)


async def test_a_step_writes_a_file_from_a_path_on_disk(tmp_path: Path) -> None:
    on_disk = tmp_path / "report.pdf"
    on_disk.write_bytes(b"%PDF-" + bytes(range(256)) * 400)

    async def write(ctx: StepContext) -> StepOutcome:
        await ctx.emit_file(on_disk, filename="report.pdf", media_type="application/pdf")
        return Complete()

    with SkillKit(Skill(name="from-disk", version=1, steps=[write])) as kit:
        task = await kit.run(kit.submit("from-disk", text="go"))

        assert await kit.file_bytes(task.id, "report.pdf") == on_disk.read_bytes()
        [part] = task.artifacts["report.pdf"]["parts"]
        assert stored_file(part) is not None  # 100 KiB: by reference, not inline


async def test_bad_parameters_are_refused(kit: SkillKit) -> None:
    for params in (
        {"bytes": -1},
        {"bytes": "many"},
        {"bytes": 10, "seed": 1.5},
        {"bytes": 10, "chunk_bytes": 0},
    ):
        task = await kit.run(kit.submit("big-file", data=params))
        assert task.state == TaskState.REJECTED, params


async def test_checksum_hashes_inline_and_stored_files(kit: SkillKit) -> None:
    stored = await kit.files.keep(b"x" * 5000, media_type="application/pdf", filename="report.pdf")
    inline = {"raw": base64.b64encode(b"hello").decode(), "mediaType": "text/plain", "filename": "a.txt"}
    message = {"role": "ROLE_USER", "parts": [{"text": "hash these"}, inline, stored]}

    task = await kit.run(kit.submit("checksum", message=message))

    assert task.state == TaskState.COMPLETED
    [data] = [p["data"] for p in task.artifacts["checksums"]["parts"]]
    assert data == {
        "files": [
            {
                "sha256": hashlib.sha256(b"hello").hexdigest(),
                "size": 5,
                "filename": "a.txt",
                "mediaType": "text/plain",
            },
            {
                "sha256": hashlib.sha256(b"x" * 5000).hexdigest(),
                "size": 5000,
                "filename": "report.pdf",
                "mediaType": "application/pdf",
            },
        ]
    }


async def test_checksum_refuses_a_url_of_a_private_address(kit: SkillKit) -> None:
    message = {
        "role": "ROLE_USER",
        "parts": [{"url": "http://127.0.0.1:9/secret", "mediaType": "text/plain"}],
    }

    task = await kit.run(kit.submit("checksum", message=message))

    assert task.state == TaskState.FAILED
    assert "127.0.0.1" in (message_text(task.status_message) or "")
    assert "not a public address" in (message_text(task.status_message) or "")


async def test_checksum_without_a_file_is_refused(kit: SkillKit) -> None:
    task = await kit.run(kit.submit("checksum", text="no file here"))

    assert task.state == TaskState.REJECTED
