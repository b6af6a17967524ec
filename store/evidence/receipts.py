"""Receipts: a task's latest event proven to be in a signed checkpoint, verifiable offline.

This one file is also the auditor's verifier: copy it anywhere and run it, with Python 3.11 or later
and the ``cryptography`` package, without longhaul::

    python receipts.py verify RECEIPT.json --key VKEY

(``VKEY`` is the log's verifier key string, or a file holding it; ``--key`` again for each other key
of the log, old and new around a key rotation.) It exits 0 if the receipt verifies,
1 if it does not, 2 if it cannot be read. So that it needs nothing else, the definitions it shares
with ``store/evidence/merkle.py``, ``store/evidence/signed_notes.py`` and
``store/evidence/checkpoints.py`` are copies of theirs, kept identical by
``tests/store/test_receipts.py``; change them there and copy them here.

A receipt (format ``longhaul-receipt/v1``, ``docs/audit.md`` "Receipts") is a JSON object::

    {
      "format": "longhaul-receipt/v1",
      "leaf": {"task_id": "<UUID>", "version": <int>, "chain_hash": "<base64 of 32 bytes>"},
      "leaf_index": <int>,
      "inclusion_proof": ["<base64 of 32 bytes>", ...],
      "checkpoint": "<the signed checkpoint note, verbatim>"
    }

It verifies if the checkpoint note carries a valid signature by the given key, whose name is the
checkpoint's origin, and the inclusion proof leads from the leaf's hash,
``SHA-256(0x00 || task_id (16) || version (8, big-endian) || chain_hash (32))``, at ``leaf_index`` to
the checkpoint's root for its tree size.

Longer than 500 lines on purpose: an auditor copies this one file and runs it, so it holds its own
copies of what it needs.
"""

from __future__ import annotations

import argparse
import base64
import binascii
import hashlib
import json
import re
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from uuid import UUID

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

FORMAT = "longhaul-receipt/v1"
"""The ``format`` of the receipts this file reads and writes; a new layout gets a new one."""


class ReceiptError(ValueError):
    """A receipt document that is not exactly the JSON of :data:`FORMAT`."""


@dataclass(frozen=True)
class Receipt:
    """A signed checkpoint, one leaf of its tree (a task's event), the leaf's index and inclusion proof."""

    checkpoint: str
    task_id: UUID
    version: int
    chain_hash: bytes
    leaf_index: int
    inclusion_proof: tuple[bytes, ...]

    def to_json(self) -> str:
        """The receipt document (indented JSON, ending in a newline)."""
        document = {
            "format": FORMAT,
            "leaf": {
                "task_id": str(self.task_id),
                "version": self.version,
                "chain_hash": base64.b64encode(self.chain_hash).decode(),
            },
            "leaf_index": self.leaf_index,
            "inclusion_proof": [base64.b64encode(h).decode() for h in self.inclusion_proof],
            "checkpoint": self.checkpoint,
        }
        return json.dumps(document, indent=2, ensure_ascii=False) + "\n"

    @classmethod
    def from_json(cls, document: str | bytes) -> Receipt:
        """The receipt of a document; :class:`ReceiptError` for anything but the exact format."""
        try:
            value = json.loads(document)
        except (ValueError, UnicodeDecodeError) as error:
            raise ReceiptError(f"a receipt is a JSON document ({error})") from None
        top = _fields(value, "the receipt", ("format", "leaf", "leaf_index", "inclusion_proof", "checkpoint"))
        if top["format"] != FORMAT:
            raise ReceiptError(f"this verifier reads receipts of format {FORMAT!r}, not {top['format']!r}")
        leaf = _fields(top["leaf"], "the leaf", ("task_id", "version", "chain_hash"))
        proof = top["inclusion_proof"]
        if not isinstance(proof, list):
            raise ReceiptError("inclusion_proof is a list of base64 hashes")
        if not isinstance(top["checkpoint"], str):
            raise ReceiptError("checkpoint is the signed checkpoint note, a string")
        try:
            task_id = UUID(_typed(leaf["task_id"], str, "leaf.task_id"))
        except ValueError:
            raise ReceiptError(f"leaf.task_id is a UUID, not {leaf['task_id']!r}") from None
        return cls(
            checkpoint=top["checkpoint"],
            task_id=task_id,
            version=_typed(leaf["version"], int, "leaf.version"),
            chain_hash=_hash(leaf["chain_hash"], "leaf.chain_hash"),
            leaf_index=_typed(top["leaf_index"], int, "leaf_index"),
            inclusion_proof=tuple(_hash(h, f"inclusion_proof[{i}]") for i, h in enumerate(proof)),
        )


def _fields(value: object, what: str, names: Sequence[str]) -> Mapping[str, Any]:
    if not isinstance(value, dict):
        raise ReceiptError(f"{what} is a JSON object")
    missing, unknown = [n for n in names if n not in value], sorted(set(value) - set(names))
    if missing or unknown:
        raise ReceiptError(
            f"{what} has exactly the fields {', '.join(names)} (missing {missing}, unknown {unknown})"
        )
    return value


def _typed(value: Any, kind: type, what: str) -> Any:
    if not isinstance(value, kind) or isinstance(value, bool):
        raise ReceiptError(f"{what} is a JSON {'string' if kind is str else 'integer'}, not {value!r}")
    return value


def _hash(value: Any, what: str) -> bytes:
    text = _typed(value, str, what)
    try:
        data = base64.b64decode(text, validate=True)
    except (binascii.Error, ValueError):
        raise ReceiptError(f"{what} is base64, not {text[:60]!r}") from None
    if base64.b64encode(data).decode() != text or len(data) != HASH_SIZE:
        raise ReceiptError(f"{what} is the canonical base64 of {HASH_SIZE} bytes, not {text[:60]!r}")
    return data


@dataclass(frozen=True)
class ReceiptVerdict:
    """Whether a receipt verified, one sentence saying why, and what it proved when it did."""

    valid: bool
    reason: str
    receipt: Receipt | None = None
    checkpoint: Checkpoint | None = None


def verify_receipt(
    receipt: Receipt | str | bytes, verifier_keys: VerifierKey | str | Sequence[VerifierKey | str]
) -> ReceiptVerdict:
    """Check a receipt with the log's verifier key alone (or its keys: old and new around a rotation).

    Raises:
        NoteError: a verifier key is not one (this module's own ``NoteError``, a ``ValueError``).
            The receipt itself is never an exception: a malformed or false one is a verdict with
            ``valid`` false.
    """
    given = [verifier_keys] if isinstance(verifier_keys, VerifierKey | str) else list(verifier_keys)
    keys = [key if isinstance(key, VerifierKey) else VerifierKey.parse(key) for key in given]
    try:
        parsed = receipt if isinstance(receipt, Receipt) else Receipt.from_json(receipt)
    except ReceiptError as error:
        return ReceiptVerdict(False, f"malformed receipt: {error}")
    try:
        checkpoint, signer = _proven_checkpoint(parsed, keys)
    except ReceiptError as error:
        return ReceiptVerdict(False, str(error), parsed)
    return ReceiptVerdict(
        True,
        f"task {parsed.task_id} at version {parsed.version} is leaf {parsed.leaf_index} of the tree of "
        f"size {checkpoint.size} that {signer.name}+{signer.key_id:08x} signed",
        parsed,
        checkpoint,
    )


def _proven_checkpoint(receipt: Receipt, keys: Sequence[VerifierKey]) -> tuple[Checkpoint, VerifierKey]:
    """The checkpoint one of ``keys`` signed, and that key, if the receipt's leaf and proof lead to its root.

    Raises:
        ReceiptError: they do not; the message says which step failed.
    """
    names = ", ".join(f"{key.name}+{key.key_id:08x}" for key in keys)
    try:
        text, verified = open_note(receipt.checkpoint, keys)
    except NoteError as error:
        raise ReceiptError(f"the checkpoint is not signed by {names}: {error}") from None
    try:
        checkpoint = parse_checkpoint(text)
    except CheckpointError as error:
        raise ReceiptError(f"the signed note is not a checkpoint: {error}") from None
    signers = [key for key in verified if key.name == checkpoint.origin]
    if not signers:
        raise ReceiptError(
            f"the checkpoint is of {checkpoint.origin!r}, not of the key's log {verified[0].name!r}"
        )
    try:
        leaf_hash = hash_leaf(event_leaf(receipt.task_id, receipt.version, receipt.chain_hash))
        root = root_from_inclusion_proof(
            receipt.leaf_index, checkpoint.size, leaf_hash, receipt.inclusion_proof
        )
    except ValueError as error:  # ProofError included
        raise ReceiptError(f"the inclusion proof does not fit: {error}") from None
    if root != checkpoint.root_hash:
        raise ReceiptError(
            f"the inclusion proof of leaf {receipt.leaf_index} does not lead to the signed root of the tree "
            f"of size {checkpoint.size}: the leaf or the proof was altered"
        )
    return checkpoint, signers[0]


def main(argv: Sequence[str] | None = None) -> int:
    """``receipts.py verify RECEIPT.json --key VKEY [--key VKEY]``: 0 valid, 1 not, 2 unreadable input."""
    parser = argparse.ArgumentParser(prog="receipts.py", description="Verify longhaul receipts offline.")
    commands = parser.add_subparsers(dest="command", required=True)
    verify = commands.add_parser("verify", help="verify a receipt against the log's verifier key")
    verify.add_argument("receipt", metavar="RECEIPT", help="the receipt JSON file ('-' for standard input)")
    verify.add_argument(
        "--key",
        metavar="VKEY",
        required=True,
        action="append",
        help="the log's verifier key, or a file holding it; repeat it for each key of the log (rotation)",
    )
    args = parser.parse_args(argv)
    try:
        document = sys.stdin.buffer.read() if args.receipt == "-" else Path(args.receipt).read_bytes()
        keys = [VerifierKey.parse(k if "+" in k else Path(k).read_text(encoding="utf-8")) for k in args.key]
    except (OSError, UnicodeDecodeError, NoteError) as error:
        sys.stderr.write(f"receipts.py: {error}\n")
        return 2
    verdict = verify_receipt(document, keys)
    sys.stdout.write(f"{'valid' if verdict.valid else 'NOT VALID'}: {verdict.reason}\n")
    return 0 if verdict.valid else 1


# -------------------- copied from store/evidence/merkle.py

HASH_SIZE = 32
"""Bytes of a SHA-256 hash: every leaf hash, node hash, root and proof element."""


class ProofError(ValueError):
    """A Merkle proof that does not verify, or does not fit the sizes and index it claims."""


def hash_leaf(data: bytes) -> bytes:
    """RFC 9162 leaf hash: ``SHA-256(0x00 || data)``."""
    return hashlib.sha256(b"\x00" + data).digest()


def hash_children(left: bytes, right: bytes) -> bytes:
    """RFC 9162 inner node hash: ``SHA-256(0x01 || left || right)``."""
    return hashlib.sha256(b"\x01" + left + right).digest()


def event_leaf(task_id: UUID, version: int, chain_hash: bytes) -> bytes:
    """A longhaul leaf's data: ``task_id.bytes (16) || version (8, big-endian) || chain_hash (32)``.

    The chain hash of a task's event at ``version`` commits to every earlier event of the task, so the
    leaf of a task's last event commits to its whole history.
    """
    if not 0 < version < 2**64:
        raise ValueError(f"a task version is from 1 to 2**64 - 1, not {version}")
    if len(chain_hash) != HASH_SIZE:
        raise ValueError(f"a chain hash has {HASH_SIZE} bytes, not {len(chain_hash)}")
    return task_id.bytes + version.to_bytes(8, "big") + chain_hash


def root_from_inclusion_proof(index: int, size: int, leaf_hash: bytes, proof: Sequence[bytes]) -> bytes:
    """The root that ``proof`` gives for the leaf at ``index`` of a tree of ``size`` (RFC 9162 §2.1.3.2).

    Raises:
        ProofError: the index is outside the tree, a hash is not 32 bytes, or the proof is too short
            or too long for that index and size.
    """
    if not 0 <= index < size:
        raise ProofError(f"leaf index {index} is outside a tree of size {size}")
    if len(leaf_hash) != HASH_SIZE or any(len(element) != HASH_SIZE for element in proof):
        raise ProofError(f"a leaf hash and every proof element have {HASH_SIZE} bytes")
    fn, sn, result = index, size - 1, leaf_hash
    for element in proof:
        if sn == 0:
            raise ProofError(f"the proof has more than the hashes a leaf of a tree of size {size} needs")
        if fn & 1 or fn == sn:
            result = hash_children(element, result)
            while not fn & 1 and fn != 0:
                fn, sn = fn >> 1, sn >> 1
        else:
            result = hash_children(result, element)
        fn, sn = fn >> 1, sn >> 1
    if sn != 0:
        raise ProofError(f"the proof has fewer hashes than a leaf of a tree of size {size} needs")
    return result


# -------------------- copied from store/evidence/signed_notes.py

ED25519 = 0x01
"""The signature type byte of Ed25519 in key IDs and key strings."""

MAX_SIGNATURES = 100
"""More signature lines than this make a note malformed (the spec asks to accept at least 16)."""

SIGNATURE_PREFIX = "\u2014 "
"""Each signature line starts with an em dash (U+2014) and a space."""


class NoteError(ValueError):
    """A malformed note or key, a signature that does not verify, or no signature by a known key."""


def check_key_name(name: str) -> None:
    """Raise :class:`NoteError` unless ``name`` is a key name: non-empty, no spaces, no ``+``."""
    if not name or "+" in name or any(c.isspace() for c in name) or not name.isprintable():
        raise NoteError(f"a key name is non-empty, without spaces or '+': not {name!r}")


def key_id(name: str, public_key: bytes) -> int:
    """A key's ID: the first 4 bytes, big-endian, of ``SHA-256(name || 0x0A || 0x01 || public_key)``."""
    digest = hashlib.sha256(name.encode() + b"\n" + bytes([ED25519]) + public_key).digest()
    return int.from_bytes(digest[:4], "big")


def decode_base64(text: str, what: str) -> bytes:
    """Standard padded base64 in its one canonical spelling, else :class:`NoteError` naming ``what``."""
    try:
        data = base64.b64decode(text, validate=True)
    except (binascii.Error, ValueError):
        raise NoteError(f"{what} is not base64: {text[:40]!r}") from None
    if base64.b64encode(data).decode() != text:
        raise NoteError(f"{what} is not in canonical base64: {text[:40]!r}")
    return data


def _key_parts(text: str, what: str) -> tuple[str, int, bytes]:
    """``name+hex8+base64(0x01 || 32 bytes)``: the name, the key ID written in it, the 32 key bytes.

    Errors quote nothing of ``text`` but the name: a signer key's bytes are secret.
    """
    name, _, rest = text.partition("+")
    hex_id, _, key = rest.partition("+")
    check_key_name(name)
    if len(hex_id) != 8 or not all(c in "0123456789abcdef" for c in hex_id):
        raise NoteError(f"{what} {name!r}: the key ID is 8 lowercase hex digits")
    try:
        material = base64.b64decode(key, validate=True)
    except (binascii.Error, ValueError):
        raise NoteError(f"{what} {name!r}: the key is not base64") from None
    if base64.b64encode(material).decode() != key:
        raise NoteError(f"{what} {name!r}: the key is not in canonical base64")
    if len(material) != 33 or material[0] != ED25519:
        raise NoteError(f"{what} {name!r}: the key is the byte 0x01 and 32 bytes of an Ed25519 key")
    return name, int(hex_id, 16), material[1:]


@dataclass(frozen=True)
class VerifierKey:
    """An Ed25519 verifier key of signed notes: ``name+hex8(key ID)+base64(0x01 || public key)``."""

    name: str
    key_id: int
    public_key: bytes

    @classmethod
    def parse(cls, text: str) -> VerifierKey:
        """The verifier key ``text`` spells; :class:`NoteError` if it is malformed or its ID is wrong."""
        name, written_id, public_key = _key_parts(text.strip(), "verifier key")
        if written_id != key_id(name, public_key):
            raise NoteError(f"verifier key {name!r}: its key ID {written_id:08x} is not the key's")
        return cls(name, written_id, public_key)

    def __str__(self) -> str:
        encoded = base64.b64encode(bytes([ED25519]) + self.public_key).decode()
        return f"{self.name}+{self.key_id:08x}+{encoded}"

    def verify(self, message: bytes, signature: bytes) -> bool:
        """Whether ``signature`` is this key's Ed25519 signature of ``message``."""
        try:
            Ed25519PublicKey.from_public_bytes(self.public_key).verify(signature, message)
        except InvalidSignature:
            return False
        return True


@dataclass(frozen=True)
class Signature:
    """One signature line of a note: the key's name and ID, and the signature bytes."""

    name: str
    key_id: int
    signature: bytes

    def line(self) -> str:
        """The line as a note writes it, without its newline."""
        encoded = base64.b64encode(self.key_id.to_bytes(4, "big") + self.signature).decode()
        return f"{SIGNATURE_PREFIX}{self.name} {encoded}"


@dataclass(frozen=True)
class Note:
    """A note split into its text (with its final newline) and its signatures, none checked yet."""

    text: str
    signatures: tuple[Signature, ...]


def _check_text(text: str) -> None:
    if any(c < " " and c != "\n" for c in text):
        raise NoteError("a note has no control character but newline")


def parse_note(note: str | bytes) -> Note:
    """Split a signed note into text and signatures; :class:`NoteError` if it is malformed."""
    if isinstance(note, bytes):
        try:
            note = note.decode("utf-8")
        except UnicodeDecodeError:
            raise NoteError("a note is UTF-8") from None
    _check_text(note)
    split = note.rfind("\n\n")
    if split < 0:
        raise NoteError("a note has its text, a blank line, then its signatures")
    text, lines = note[: split + 1], note[split + 2 :]
    if not lines or not lines.endswith("\n"):
        raise NoteError("a note ends with at least one signature line and a newline")
    signatures = []
    for line in lines.removesuffix("\n").split("\n"):
        if not line.startswith(SIGNATURE_PREFIX):
            raise NoteError(f"a signature line starts with an em dash and a space: {line[:40]!r}")
        name, _, encoded = line.removeprefix(SIGNATURE_PREFIX).partition(" ")
        check_key_name(name)
        data = decode_base64(encoded, f"the signature of {name!r}")
        if len(data) < 5:
            raise NoteError(f"the signature of {name!r} is too short to hold a key ID and a signature")
        signatures.append(Signature(name, int.from_bytes(data[:4], "big"), data[4:]))
    if len(signatures) > MAX_SIGNATURES:
        raise NoteError(f"a note has at most {MAX_SIGNATURES} signatures, not {len(signatures)}")
    return Note(text, tuple(signatures))


def open_note(note: str | bytes, verifiers: Sequence[VerifierKey]) -> tuple[str, list[VerifierKey]]:
    """The note's text and the known keys whose signatures verified, in the note's order.

    Signatures of keys not in ``verifiers`` (by name and key ID) are ignored.

    Raises:
        NoteError: the note is malformed, a known key's signature does not verify, or no known key
            signed it.
    """
    parsed = parse_note(note)
    known: dict[tuple[str, int], VerifierKey] = {}
    for verifier in verifiers:
        if known.setdefault((verifier.name, verifier.key_id), verifier) != verifier:
            raise NoteError(f"two different verifier keys are {verifier.name}+{verifier.key_id:08x}")
    verified: list[VerifierKey] = []
    message = parsed.text.encode()
    for signature in parsed.signatures:
        key = known.get((signature.name, signature.key_id))
        if key is None or key in verified:
            continue
        if not key.verify(message, signature.signature):
            raise NoteError(
                f"the signature of {signature.name}+{signature.key_id:08x} does not verify: "
                "the note was altered after it was signed"
            )
        verified.append(key)
    if not verified:
        names = ", ".join(f"{s.name}+{s.key_id:08x}" for s in parsed.signatures)
        raise NoteError(f"no signature by a known key (the note is signed by {names})")
    return parsed.text, verified


# -------------------- copied from store/evidence/checkpoints.py

ROOT_HASH_SIZE = 32
"""Bytes of a checkpoint's root hash (SHA-256)."""

TREE_SIZE = re.compile(r"0|[1-9][0-9]*")


class CheckpointError(ValueError):
    """A checkpoint text that is not exactly origin, tree size, root hash and extension lines."""


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


if __name__ == "__main__":
    sys.exit(main())
