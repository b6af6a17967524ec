"""``big-file``: writes one artifact of any size, ``big-file.bin``, chunk by chunk into the file store.

Parameters (the first message's data part): ``{"bytes": N, "seed": S}``, and optionally
``"chunk_bytes"`` (default 256 MiB). The content is the concatenation of the SHA-256 digests of
``"{S}:{i}"`` for i = 0, 1, 2, …, cut to N bytes: anyone can recompute it (``expected_bytes``).

Each chunk is one file in the store and one commit (``emit_file`` with ``append``), together with
the checkpoint that says how far the file got: a worker killed mid-file resumes after the last
chunk it committed and never writes a committed chunk again. The bytes are made in a thread
(``run_sync``), a MiB at a time, so the worker's loop stays free and the memory stays constant.
"""

from __future__ import annotations

import hashlib
from collections.abc import AsyncIterator

from domain.skill import Complete, Reject, Skill, StepContext, StepOutcome
from workers.skills.parts import as_int

ARTIFACT = "big-file.bin"
DIGEST = 32
"""Bytes of one SHA-256 digest: the content's unit."""
BLOCK = 1 << 20
"""Bytes made at once (a multiple of ``DIGEST``)."""
DEFAULT_CHUNK = 256 << 20
MAX_BYTES = 1 << 40


def content(seed: int, start: int, end: int) -> bytes:
    """Bytes ``start`` to ``end`` (exclusive) of the content for ``seed``."""
    first, last = start // DIGEST, (end + DIGEST - 1) // DIGEST
    prefix = hashlib.sha256(f"{seed}:".encode())  # copying the hashed prefix: twice as fast as anew
    digests = []
    for i in range(first, last):
        digest = prefix.copy()
        digest.update(b"%d" % i)
        digests.append(digest.digest())
    whole = b"".join(digests)
    offset = start - first * DIGEST
    return whole[offset : offset + end - start]


def expected_bytes(size: int, seed: int) -> AsyncIterator[bytes]:
    """The whole content, a block at a time (for checks and tests)."""

    async def blocks() -> AsyncIterator[bytes]:
        for start in range(0, size, BLOCK):
            yield content(seed, start, min(size, start + BLOCK))

    return blocks()


async def write_file(ctx: StepContext) -> StepOutcome:
    """Write the file chunk by chunk, each chunk committed with how far the file got; then complete."""
    size, seed = as_int(ctx.params.get("bytes")), as_int(ctx.params.get("seed", 0))
    chunk = as_int(ctx.params.get("chunk_bytes", DEFAULT_CHUNK))
    if size is None or not 0 <= size <= MAX_BYTES:
        return Reject(
            f"big-file: bytes must be an integer from 0 to {MAX_BYTES}, not {ctx.params.get('bytes')!r}"
        )
    if seed is None:
        return Reject(f"big-file: seed must be an integer, not {ctx.params.get('seed')!r}")
    if chunk is None or chunk < 1:
        return Reject(
            f"big-file: chunk_bytes must be a positive integer, not {ctx.params.get('chunk_bytes')!r}"
        )
    written = as_int(ctx.checkpoint.get("written"))
    while written is None or written < size:  # None: not begun (an empty file is one empty chunk)
        start = written or 0
        end = min(size, start + chunk)

        async def blocks(start: int = start, end: int = end) -> AsyncIterator[bytes]:
            for at in range(start, end, BLOCK):
                yield await ctx.run_sync(content, seed, at, min(end, at + BLOCK))

        await ctx.emit_file(
            blocks(),
            filename=ARTIFACT,
            media_type="application/octet-stream",
            append=start > 0,
            last_chunk=end == size,
            checkpoint={"written": end},
            progress=f"{end} of {size} bytes written",
        )
        written = end
    return Complete(message=f"wrote {size} bytes")


BIG_FILE = Skill(
    name="big-file",
    version=1,
    steps=[write_file],
    description=(
        'Writes one artifact big-file.bin of {"bytes": N, "seed": S}: the SHA-256 digests of "S:0",'
        ' "S:1", ... cut to N bytes, chunk by chunk into the file store.'
    ),
    tags=("example", "files"),
)
