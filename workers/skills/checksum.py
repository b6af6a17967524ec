"""``checksum``: answers with the SHA-256 and size of every file part of the message it was sent.

A file part may be a file uploaded to longhaul, inline ``raw`` bytes, or an outside ``http(s)``
URL (fetched from public addresses only). The bytes stream through the hash in constant memory.
The answer is one artifact, ``checksums``, with a data part: one entry per file part, in order.
"""

from __future__ import annotations

import hashlib

from domain.files import UnreadableFileError
from domain.skill import JSON, Complete, Fail, Reject, Skill, StepContext, StepOutcome
from workers.skills.parts import parts_of


def is_file_part(part: JSON) -> bool:
    """A part that holds a file: bytes (``raw``) or a reference (``url``)."""
    return isinstance(part.get("raw"), str) or isinstance(part.get("url"), str)


async def checksum(ctx: StepContext) -> StepOutcome:
    """Hash each file part of the input; complete with their hashes and sizes."""
    files = [p for p in parts_of(ctx.latest_input) if is_file_part(p)]
    if not files:
        return Reject("checksum: the message has no file part (raw bytes or a url)")
    sums: list[JSON] = []
    for index, part in enumerate(files):
        digest, size = hashlib.sha256(), 0
        try:
            async for chunk in ctx.read_file(part):
                digest.update(chunk)
                size += len(chunk)
        except UnreadableFileError as error:
            return Fail(f"checksum: file part {index} cannot be read: {error}")
        entry: JSON = {"sha256": digest.hexdigest(), "size": size}
        for key in ("filename", "mediaType"):
            if isinstance(part.get(key), str):
                entry[key] = part[key]
        sums.append(entry)
    artifact = {"artifactId": "checksums", "name": "checksums", "parts": [{"data": {"files": sums}}]}
    return Complete(artifacts=[artifact], message=f"{len(sums)} file(s) hashed")


CHECKSUM = Skill(
    name="checksum",
    version=1,
    steps=[checksum],
    description="Answers with the SHA-256 and size of every file part (uploaded, raw or a URL) of its input.",
    tags=("example", "files"),
)
