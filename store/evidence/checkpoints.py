"""The C2SP tlog-checkpoint note text (https://c2sp.org/tlog-checkpoint): parse strictly, render.

Pure: the standard library only, no longhaul import, so an auditor can copy this file
(``tests/store/test_audit_imports.py`` keeps it so). A checkpoint is the body of a signed note
(``store/evidence/signed_notes.py`` signs and opens it), lines that each end in a newline:

1. the origin, the log's identity (longhaul's is ``longhaul/<deployment>``, :func:`longhaul_origin`);
2. the tree size in ASCII decimal, without leading zeros (``0`` for the empty tree);
3. the standard padded base64 of the 32-byte RFC 9162 root hash;
4. optional extension lines, each non-empty (longhaul writes none).

longhaul signs with a key named like the origin, as the spec recommends.
"""

from __future__ import annotations

import base64
import binascii
import re
from dataclasses import dataclass

ROOT_HASH_SIZE = 32
"""Bytes of a checkpoint's root hash (SHA-256)."""

DEPLOYMENT = re.compile(r"[a-z0-9]([a-z0-9.-]*[a-z0-9])?")
"""A deployment name in longhaul's origin: lowercase letters, digits, dots and dashes (a host name fits)."""

TREE_SIZE = re.compile(r"0|[1-9][0-9]*")


class CheckpointError(ValueError):
    """A checkpoint text that is not exactly origin, tree size, root hash and extension lines."""


def longhaul_origin(deployment: str) -> str:
    """The origin (and signing key name) of a longhaul deployment's checkpoints: ``longhaul/<deployment>``."""
    if not DEPLOYMENT.fullmatch(deployment):
        raise CheckpointError(
            f"a deployment name is lowercase letters, digits, dots and dashes, not {deployment!r}"
        )
    return f"longhaul/{deployment}"


@dataclass(frozen=True)
class Checkpoint:
    """A signed tree head: the log's origin, its size, its RFC 9162 root, and any extension lines."""

    origin: str
    size: int
    root_hash: bytes
    extensions: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if not self.origin or "\n" in self.origin:
            raise CheckpointError(f"an origin is one non-empty line, not {self.origin!r}")
        if not 0 <= self.size < 2**64:
            raise CheckpointError(f"a tree size is from 0 to 2**64 - 1, not {self.size}")
        if len(self.root_hash) != ROOT_HASH_SIZE:
            raise CheckpointError(f"a root hash has {ROOT_HASH_SIZE} bytes, not {len(self.root_hash)}")
        if any(not line or "\n" in line for line in self.extensions):
            raise CheckpointError("extension lines are non-empty single lines")

    def body(self) -> str:
        """The checkpoint as note text: one line each for origin, size, root, extensions."""
        lines = [self.origin, str(self.size), base64.b64encode(self.root_hash).decode(), *self.extensions]
        return "".join(f"{line}\n" for line in lines)


def parse_checkpoint(text: str) -> Checkpoint:
    """The checkpoint of a note text; :class:`CheckpointError` for anything but the exact format."""
    if any(c < " " and c != "\n" for c in text):
        raise CheckpointError("a checkpoint has no control character but newline")
    if not text.endswith("\n"):
        raise CheckpointError("a checkpoint's last line ends in a newline")
    lines = text.removesuffix("\n").split("\n")
    if len(lines) < 3:
        raise CheckpointError(f"a checkpoint has at least 3 lines (origin, size, root), not {len(lines)}")
    origin, size, root, *extensions = lines
    if not origin:
        raise CheckpointError("a checkpoint's origin line is not empty")
    if len(size) > 20 or not TREE_SIZE.fullmatch(size):
        raise CheckpointError(f"a tree size is a decimal number without leading zeros, not {size[:40]!r}")
    try:
        root_hash = base64.b64decode(root, validate=True)
    except (binascii.Error, ValueError):
        raise CheckpointError(f"a root hash is base64, not {root[:60]!r}") from None
    if base64.b64encode(root_hash).decode() != root:
        raise CheckpointError(f"a root hash is in canonical base64, not {root[:60]!r}")
    if any(not line for line in extensions):
        raise CheckpointError("a checkpoint's extension lines are not empty")
    return Checkpoint(origin, int(size), root_hash, tuple(extensions))
