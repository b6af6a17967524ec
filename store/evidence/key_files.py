"""The checkpoint signing key on disk: one signer key string in a file only its owner can read.

The file holds ``PRIVATE+KEY+<name>+<key ID>+<base64>`` and a newline (``store/evidence/signed_notes.py``),
the same string Go's ``golang.org/x/mod/sumdb/note`` reads. :func:`create_signer_key` writes a new
one with mode 0600 and never replaces a file; :func:`load_signer_key` refuses a file that its group
or others may read or write, and never quotes the file's content in an error.
"""

from __future__ import annotations

import contextlib
import os
import stat
from pathlib import Path

from store.evidence.signed_notes import NoteError, SignerKey


class KeyFileError(Exception):
    """A signing key file that is missing, unsafe or malformed; the message says what to do."""


def load_signer_key(path: Path) -> SignerKey:
    """The signer key in ``path``, which must be a regular file only its owner can read and write."""
    try:
        mode = path.stat().st_mode
    except FileNotFoundError:
        raise KeyFileError(f"no signing key file at {path}") from None
    if not stat.S_ISREG(mode):
        raise KeyFileError(f"the signing key {path} is not a regular file")
    if mode & 0o077:
        raise KeyFileError(
            f"the signing key {path} may be read or written by others (mode {stat.S_IMODE(mode):04o}); "
            f"only its owner may: chmod 600 {path}"
        )
    try:
        return SignerKey.parse(path.read_text(encoding="utf-8"))
    except (NoteError, UnicodeDecodeError) as error:
        raise KeyFileError(f"{path} holds no signer key ({error})") from None


def create_signer_key(path: Path, name: str) -> SignerKey:
    """Make a new signer key named ``name`` in ``path`` (mode 0600); refuse if ``path`` exists.

    The key is written to a temporary file beside ``path`` and linked into place, so a crash leaves
    either no key file or a whole one.
    """
    key = SignerKey.generate(name)
    path.parent.mkdir(parents=True, exist_ok=True)
    temporary = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    descriptor = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        with os.fdopen(descriptor, "w", encoding="utf-8") as file:
            os.fchmod(file.fileno(), 0o600)
            file.write(f"{key}\n")
            file.flush()
            os.fsync(file.fileno())
        try:
            os.link(temporary, path)
        except FileExistsError:
            raise KeyFileError(f"{path} exists already; a signing key is never replaced") from None
    finally:
        with contextlib.suppress(FileNotFoundError):
            temporary.unlink()
    return key
