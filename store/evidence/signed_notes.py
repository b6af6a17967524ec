"""C2SP signed notes (https://c2sp.org/signed-note) with Ed25519: keys, signing, verifying.

Pure: the standard library and ``cryptography`` only, no longhaul import, so an auditor can copy this
file (``tests/store/test_audit_imports.py`` keeps it so). Compatible with Go's
``golang.org/x/mod/sumdb/note``: its test keys and notes are this module's test vectors.

- A note is UTF-8 text ending in a newline, a blank line, then signature lines
  ``— <key name> base64(key ID (4 bytes, big-endian) || signature)``; no control character but newline.
- Key ID: the first 4 bytes of ``SHA-256(name || 0x0A || 0x01 || 32-byte Ed25519 public key)``.
- Verifier key: ``name+hex8(key ID)+base64(0x01 || public key)``; signer key:
  ``PRIVATE+KEY+name+hex8(key ID)+base64(0x01 || 32-byte seed)``.
- Opening a note ignores signatures of unknown keys, refuses the note if a known key's signature does
  not verify, and needs at least one that does (:class:`NoteError` says which rule failed).
"""

from __future__ import annotations

import base64
import binascii
import hashlib
from collections.abc import Sequence
from dataclasses import dataclass, field

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey
from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat

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
class SignerKey:
    """An Ed25519 signer key: ``PRIVATE+KEY+name+hex8(key ID)+base64(0x01 || 32-byte seed)``.

    Its ``repr`` leaves the seed out; ``str`` spells the whole key (it is what a key file holds).
    """

    name: str
    seed: bytes = field(repr=False)

    @classmethod
    def generate(cls, name: str) -> SignerKey:
        """A new random key named ``name``."""
        check_key_name(name)
        seed = Ed25519PrivateKey.generate().private_bytes_raw()
        return cls(name, seed)

    @classmethod
    def parse(cls, text: str) -> SignerKey:
        """The signer key ``text`` spells; :class:`NoteError` (which never quotes the key) if malformed."""
        text = text.strip()
        if not text.startswith("PRIVATE+KEY+"):
            raise NoteError("a signer key starts with 'PRIVATE+KEY+'")
        name, written_id, seed = _key_parts(text.removeprefix("PRIVATE+KEY+"), "signer key")
        key = cls(name, seed)
        if written_id != key.key_id:
            raise NoteError(f"signer key {name!r}: its key ID {written_id:08x} is not the key's")
        return key

    def __str__(self) -> str:
        encoded = base64.b64encode(bytes([ED25519]) + self.seed).decode()
        return f"PRIVATE+KEY+{self.name}+{self.key_id:08x}+{encoded}"

    @property
    def public_key(self) -> bytes:
        """The 32-byte Ed25519 public key."""
        private = Ed25519PrivateKey.from_private_bytes(self.seed)
        return private.public_key().public_bytes(Encoding.Raw, PublicFormat.Raw)

    @property
    def key_id(self) -> int:
        """The key ID its signatures carry."""
        return key_id(self.name, self.public_key)

    def verifier(self) -> VerifierKey:
        """The verifier key that checks this key's signatures (safe to publish)."""
        return VerifierKey(self.name, self.key_id, self.public_key)

    def sign(self, message: bytes) -> bytes:
        """The Ed25519 signature of ``message``."""
        return Ed25519PrivateKey.from_private_bytes(self.seed).sign(message)


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


def sign_note(text: str, *signers: SignerKey) -> str:
    """The signed note of ``text`` (which ends in a newline) with one signature line per signer."""
    _check_text(text)
    if not text.endswith("\n"):
        raise NoteError("a note's text ends in a newline")
    if not signers:
        raise NoteError("a note needs at least one signature")
    message = text.encode()
    lines = [Signature(s.name, s.key_id, s.sign(message)).line() for s in signers]
    return text + "\n" + "".join(f"{line}\n" for line in lines)
