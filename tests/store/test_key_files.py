"""The signing key file: made with mode 0600, never replaced, loaded only if only its owner can read it."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from store.evidence.key_files import KeyFileError, create_signer_key, load_signer_key
from store.evidence.signed_notes import open_note, sign_note


def test_a_new_key_file_is_the_owners_alone_and_loads_back(tmp_path: Path) -> None:
    path = tmp_path / "keys" / "checkpoint.key"
    made = create_signer_key(path, "longhaul/test")
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert path.read_text() == f"{made}\n"
    assert load_signer_key(path) == made
    assert [p.name for p in path.parent.iterdir()] == ["checkpoint.key"]  # no temporary file left


def test_the_key_signs_notes_its_verifier_key_opens(tmp_path: Path) -> None:
    key = create_signer_key(tmp_path / "checkpoint.key", "longhaul/test")
    note = sign_note("longhaul/test\n0\n47DEQpj8HBSa+/TImW+5JCeuQeRkm5NMpJWZG3hSuFU=\n", key)
    assert open_note(note, [load_signer_key(tmp_path / "checkpoint.key").verifier()])[1] == [key.verifier()]


def test_a_new_key_is_made_even_under_a_permissive_umask(tmp_path: Path) -> None:
    previous = os.umask(0)
    try:
        create_signer_key(tmp_path / "checkpoint.key", "longhaul/test")
    finally:
        os.umask(previous)
    assert stat.S_IMODE((tmp_path / "checkpoint.key").stat().st_mode) == 0o600


def test_an_existing_key_is_never_replaced(tmp_path: Path) -> None:
    path = tmp_path / "checkpoint.key"
    first = create_signer_key(path, "longhaul/test")
    with pytest.raises(KeyFileError, match="never replaced"):
        create_signer_key(path, "longhaul/test")
    assert load_signer_key(path) == first
    assert [p.name for p in tmp_path.iterdir()] == ["checkpoint.key"]


@pytest.mark.parametrize("mode", [0o640, 0o604, 0o620, 0o602, 0o644, 0o666])
def test_a_key_others_may_read_or_write_is_refused(tmp_path: Path, mode: int) -> None:
    path = tmp_path / "checkpoint.key"
    create_signer_key(path, "longhaul/test")
    path.chmod(mode)
    with pytest.raises(KeyFileError, match=f"mode {mode:04o}.*chmod 600"):
        load_signer_key(path)


def test_a_missing_key_or_a_folder_is_named(tmp_path: Path) -> None:
    with pytest.raises(KeyFileError, match="no signing key file at"):
        load_signer_key(tmp_path / "absent.key")
    with pytest.raises(KeyFileError, match="not a regular file"):
        load_signer_key(tmp_path)


@pytest.mark.parametrize(
    "content",
    [
        "not a key\n",
        "PRIVATE+KEY+longhaul/test+00000000+AYEKFALVFGyNhPJEMzD1QIDr+Y7hfZx09iUvxdXHKDFz\n",  # wrong key ID
        "PRIVATE+KEY+longhaul/test+c74f20a3+AYEKFALVFGyNhPJEMzD1QIDr+Y7hfZx09iUvxdXHKDF\n",
    ],
)
def test_a_file_without_a_signer_key_is_refused_without_quoting_it(tmp_path: Path, content: str) -> None:
    path = tmp_path / "checkpoint.key"
    path.write_text(content)
    path.chmod(0o600)
    with pytest.raises(KeyFileError, match="holds no signer key") as refused:
        load_signer_key(path)
    assert "AYEKFALV" not in str(refused.value)
