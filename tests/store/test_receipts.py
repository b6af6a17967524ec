"""Receipts verify offline with the verifier key alone; every alteration is refused with its reason.

The receipt is made the way the sequencer will make it: events appended to a :class:`MerkleTree`,
the checkpoint of its size signed, the inclusion proof read from the kept subtrees. The standalone
verifier is run as a subprocess from a folder that holds ``receipts.py`` and nothing else, by a
Python that can import ``cryptography`` but no longhaul package.
"""

from __future__ import annotations

import ast
import base64
import hashlib
import json
import shutil
import subprocess
import sys
from dataclasses import dataclass, replace
from pathlib import Path
from uuid import UUID

import cryptography
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import store.evidence.receipts
from store.evidence.checkpoints import Checkpoint, longhaul_origin
from store.evidence.merkle import InMemorySubtreeHashes, MerkleTree, event_leaf, hash_leaf, inclusion_proof
from store.evidence.receipts import FORMAT, Receipt, ReceiptError, verify_receipt
from store.evidence.signed_notes import SignerKey, sign_note

ROOT = Path(__file__).resolve().parents[2]
RECEIPTS = ROOT / "store" / "evidence" / "receipts.py"
ORIGIN = longhaul_origin("test.example")
KEY = SignerKey(ORIGIN, hashlib.sha256(b"tests/store/test_receipts.py").digest())


@dataclass(frozen=True)
class Event:
    task_id: UUID
    version: int
    chain_hash: bytes


def _events(count: int) -> list[Event]:
    tasks = [UUID(int=n + 1) for n in range(max(1, count // 3))]
    return [
        Event(tasks[n % len(tasks)], n // len(tasks) + 1, hashlib.sha256(n.to_bytes(4, "big")).digest())
        for n in range(count)
    ]


def issue(events: list[Event], leaf_index: int, signer: SignerKey = KEY, origin: str = ORIGIN) -> Receipt:
    """A receipt for ``events[leaf_index]`` in the checkpoint of all ``events``, signed by ``signer``."""
    tree, kept = MerkleTree(), InMemorySubtreeHashes()
    for event in events:
        kept.add(tree.append(hash_leaf(event_leaf(event.task_id, event.version, event.chain_hash))))
    note = sign_note(Checkpoint(origin, tree.size, tree.root()).body(), signer)
    event = events[leaf_index]
    proof = tuple(inclusion_proof(leaf_index, tree.size, kept))
    return Receipt(note, event.task_id, event.version, event.chain_hash, leaf_index, proof)


EVENTS = _events(13)
RECEIPT = issue(EVENTS, 9)
VKEY = str(KEY.verifier())


class TestVerifying:
    def test_a_receipt_verifies_with_the_verifier_key(self) -> None:
        verdict = verify_receipt(RECEIPT.to_json(), VKEY)
        assert verdict.valid, verdict.reason
        assert verdict.receipt == RECEIPT
        assert verdict.checkpoint is not None
        assert verdict.checkpoint.size == 13
        assert f"task {EVENTS[9].task_id} at version {EVENTS[9].version} is leaf 9" in verdict.reason

    def test_the_json_document_round_trips(self) -> None:
        assert Receipt.from_json(RECEIPT.to_json()) == RECEIPT
        assert Receipt.from_json(RECEIPT.to_json().encode()) == RECEIPT
        assert json.loads(RECEIPT.to_json())["format"] == FORMAT == "longhaul-receipt/v1"

    @pytest.mark.parametrize(
        ("change", "reason"),
        [
            ({"task_id": UUID(int=99)}, "does not lead to the signed root"),
            ({"version": EVENTS[9].version + 1}, "does not lead to the signed root"),
            ({"chain_hash": bytes(32)}, "does not lead to the signed root"),
            ({"leaf_index": 8}, "does not lead to the signed root"),
            ({"leaf_index": 13}, "outside a tree of size 13"),
            ({"inclusion_proof": RECEIPT.inclusion_proof[:-1]}, "fewer hashes"),
            ({"inclusion_proof": (*RECEIPT.inclusion_proof, bytes(32))}, "more than the hashes"),
            ({"inclusion_proof": RECEIPT.inclusion_proof[::-1]}, "does not lead to the signed root"),
            ({"version": 0}, "a task version is from 1"),
        ],
    )
    def test_an_altered_leaf_or_proof_is_refused(self, change: dict[str, object], reason: str) -> None:
        verdict = verify_receipt(replace(RECEIPT, **change), VKEY)  # type: ignore[arg-type]
        assert not verdict.valid
        assert reason in verdict.reason

    @pytest.mark.parametrize(
        ("old", "new"), [("\n13\n", "\n14\n"), ("longhaul/test.example\n", "longhaul/other.example\n")]
    )
    def test_an_altered_checkpoint_fails_its_signature(self, old: str, new: str) -> None:
        forged = replace(RECEIPT, checkpoint=RECEIPT.checkpoint.replace(old, new, 1))
        verdict = verify_receipt(forged, VKEY)
        assert not verdict.valid
        assert "does not verify: the note was altered" in verdict.reason

    def test_a_checkpoint_signed_by_another_key_is_refused(self) -> None:
        impostor = SignerKey.generate(ORIGIN)
        verdict = verify_receipt(issue(EVENTS, 9, signer=impostor), VKEY)
        assert not verdict.valid
        assert "no signature by a known key" in verdict.reason

    def test_a_receipt_of_another_log_is_refused_even_when_signed(self) -> None:
        other = SignerKey.generate("longhaul/elsewhere")
        verdict = verify_receipt(issue(EVENTS, 9, signer=other, origin=ORIGIN), str(other.verifier()))
        assert not verdict.valid
        assert "is of 'longhaul/test.example', not of the key's log 'longhaul/elsewhere'" in verdict.reason

    def test_a_signed_note_that_is_no_checkpoint_is_refused(self) -> None:
        verdict = verify_receipt(replace(RECEIPT, checkpoint=sign_note("hello\n", KEY)), VKEY)
        assert not verdict.valid
        assert "not a checkpoint" in verdict.reason

    def test_around_a_rotation_either_key_of_the_log_verifies(self) -> None:
        new_key = SignerKey.generate(ORIGIN)
        signed_by_new = issue(EVENTS, 9, signer=new_key)
        both = [VKEY, str(new_key.verifier())]
        assert verify_receipt(RECEIPT, both).valid
        verdict = verify_receipt(signed_by_new, both)
        assert verdict.valid, verdict.reason
        assert f"that {ORIGIN}+{new_key.key_id:08x} signed" in verdict.reason
        assert not verify_receipt(signed_by_new, VKEY).valid  # the old key alone does not

    def test_a_bad_verifier_key_is_the_callers_error(self) -> None:
        with pytest.raises(store.evidence.receipts.NoteError, match="key name"):
            verify_receipt(RECEIPT, "not a key")


def _document(**changes: object) -> str:
    document = json.loads(RECEIPT.to_json())
    for path, value in changes.items():
        *parents, last = path.split("__")
        target = document
        for parent in parents:
            target = target[parent]
        if value is None:
            del target[last]
        else:
            target[last] = value
    return json.dumps(document)


class TestTheDocument:
    @pytest.mark.parametrize(
        ("document", "reason"),
        [
            ("not json", "a receipt is a JSON document"),
            ("[]", "the receipt is a JSON object"),
            (
                _document(format="longhaul-receipt/v2"),
                "receipts of format 'longhaul-receipt/v1', not 'longhaul-receipt/v2'",
            ),
            (_document(format=None), "missing ['format']"),
            (_document(extra=1), "unknown ['extra']"),
            (_document(leaf__extra=1), "unknown ['extra']"),
            (_document(leaf__task_id="nope"), "leaf.task_id is a UUID"),
            (_document(leaf__version="3"), "leaf.version is a JSON integer"),
            (_document(leaf__version=True), "leaf.version is a JSON integer"),
            (_document(leaf_index=1.0), "leaf_index is a JSON integer"),
            (_document(leaf__chain_hash="AAAA"), "leaf.chain_hash is the canonical base64 of 32 bytes"),
            (_document(inclusion_proof="AAAA"), "inclusion_proof is a list"),
            (_document(inclusion_proof=["%%%"]), "inclusion_proof[0] is base64"),
            (_document(checkpoint=["x"]), "checkpoint is the signed checkpoint note"),
        ],
    )
    def test_a_malformed_document_is_refused_with_its_reason(self, document: str, reason: str) -> None:
        with pytest.raises(ReceiptError) as refused:
            Receipt.from_json(document)
        assert reason in str(refused.value)
        verdict = verify_receipt(document, VKEY)
        assert not verdict.valid
        assert verdict.reason.startswith("malformed receipt: ")


@settings(max_examples=60, deadline=None)
@given(count=st.integers(1, 80), data=st.data())
def test_every_leaf_of_every_tree_has_a_receipt_that_verifies(count: int, data: st.DataObject) -> None:
    events = _events(count)
    index = data.draw(st.integers(0, count - 1), label="leaf index")
    verdict = verify_receipt(issue(events, index).to_json(), VKEY)
    assert verdict.valid, verdict.reason


@settings(max_examples=150, deadline=None)
@given(position=st.integers(0, len(RECEIPT.to_json()) - 1), replacement=st.sampled_from('0aA/+="{} \n'))
def test_any_changed_character_of_a_receipt_is_refused_or_changes_nothing(
    position: int, replacement: str
) -> None:
    document = RECEIPT.to_json()
    altered = document[:position] + replacement + document[position + 1 :]
    verdict = verify_receipt(altered, VKEY)
    if verdict.valid:  # only layout may change: the same receipt, written otherwise
        assert verdict.receipt == RECEIPT


# ---------------------------------------------------------------------------------------- copies


def _definitions(path: Path) -> dict[str, str]:
    """Each top-level function, class and constant of a module, as its AST dump."""
    found = {}
    for node in ast.parse(path.read_text()).body:
        if isinstance(node, ast.FunctionDef | ast.ClassDef):
            found[node.name] = ast.dump(node)
        elif isinstance(node, ast.Assign) and isinstance(node.targets[0], ast.Name):
            found[node.targets[0].id] = ast.dump(node)
    return found


def test_the_definitions_receipts_shares_are_exact_copies() -> None:
    receipts = _definitions(RECEIPTS)
    shared = []
    for source in ("merkle.py", "signed_notes.py", "checkpoints.py"):
        for name, dump in _definitions(ROOT / "store" / "evidence" / source).items():
            if name in receipts:
                shared.append(name)
                assert receipts[name] == dump, (
                    f"store/evidence/receipts.py's {name} differs from store/evidence/{source}'s: copy it"
                )
    assert {"root_from_inclusion_proof", "VerifierKey", "open_note", "parse_checkpoint"} <= set(shared)


def test_the_copies_are_all_receipts_needs_and_it_needs_no_import_of_them() -> None:
    assert not {"store.evidence.merkle", "store.evidence.signed_notes", "store.evidence.checkpoints"} & set(
        vars(store.evidence.receipts)
    )
    assert store.evidence.receipts.hash_leaf is not hash_leaf  # its own copy


# ---------------------------------------------------------------------------------------- standalone


@pytest.fixture
def auditor(tmp_path: Path) -> tuple[Path, dict[str, str]]:
    """A folder holding only ``receipts.py``, and an environment whose Python finds ``cryptography`` only."""
    folder = tmp_path / "auditor"
    folder.mkdir()
    shutil.copy(RECEIPTS, folder / "receipts.py")
    site = tmp_path / "site"
    site.mkdir()
    packages = Path(cryptography.__file__).parent.parent
    for entry in packages.iterdir():
        if entry.name.startswith(("cryptography", "cffi", "_cffi_backend", "pycparser")):
            (site / entry.name).symlink_to(entry)
    return folder, {"PYTHONPATH": str(site), "PATH": "/usr/bin:/bin"}


def _run(
    folder: Path, env: dict[str, str], *args: str, stdin: str | None = None
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-S", *args],
        check=False,
        cwd=folder,
        env=env,
        input=stdin,
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_the_auditors_python_cannot_import_longhaul(auditor: tuple[Path, dict[str, str]]) -> None:
    folder, env = auditor
    for package in ("store", "domain", "longhaul"):
        assert _run(folder, env, "-c", f"import {package}").returncode != 0
    assert _run(folder, env, "-c", "import cryptography").returncode == 0


def test_the_copied_file_verifies_a_receipt_alone(auditor: tuple[Path, dict[str, str]]) -> None:
    folder, env = auditor
    (folder / "receipt.json").write_text(RECEIPT.to_json())
    (folder / "log.vkey").write_text(VKEY + "\n")

    by_string = _run(folder, env, "receipts.py", "verify", "receipt.json", "--key", VKEY)
    assert (by_string.returncode, by_string.stderr) == (0, "")
    assert by_string.stdout.startswith(
        f"valid: task {EVENTS[9].task_id} at version {EVENTS[9].version} is leaf 9"
    )

    by_file = _run(folder, env, "receipts.py", "verify", "-", "--key", "log.vkey", stdin=RECEIPT.to_json())
    assert by_file.returncode == 0, by_file.stdout + by_file.stderr

    (folder / "new.vkey").write_text(str(SignerKey.generate(ORIGIN).verifier()))
    two_keys = _run(folder, env, "receipts.py", "verify", "receipt.json", "--key", "new.vkey", "--key", VKEY)
    assert two_keys.returncode == 0, two_keys.stdout + two_keys.stderr


def test_the_copied_file_refuses_an_altered_receipt(auditor: tuple[Path, dict[str, str]]) -> None:
    folder, env = auditor
    forged = replace(RECEIPT, chain_hash=bytes(32))
    (folder / "receipt.json").write_text(forged.to_json())
    result = _run(folder, env, "receipts.py", "verify", "receipt.json", "--key", VKEY)
    assert result.returncode == 1
    assert result.stdout.startswith(
        "NOT VALID: the inclusion proof of leaf 9 does not lead to the signed root"
    )


def test_the_copied_file_says_what_it_cannot_read(auditor: tuple[Path, dict[str, str]]) -> None:
    folder, env = auditor
    missing = _run(folder, env, "receipts.py", "verify", "absent.json", "--key", VKEY)
    assert missing.returncode == 2
    assert "absent.json" in missing.stderr
    (folder / "receipt.json").write_text(RECEIPT.to_json())
    bad_key = _run(folder, env, "receipts.py", "verify", "receipt.json", "--key", "x+y+z")
    assert bad_key.returncode == 2
    assert "verifier key" in bad_key.stderr
    usage = _run(folder, env, "receipts.py", "verify", "receipt.json")
    assert usage.returncode == 2
    assert "--key" in usage.stderr


def test_the_proof_in_a_receipt_is_base64_of_32_byte_hashes() -> None:
    document = json.loads(RECEIPT.to_json())
    assert [len(base64.b64decode(h)) for h in document["inclusion_proof"]] == [32] * len(
        RECEIPT.inclusion_proof
    )
    assert document["checkpoint"] == RECEIPT.checkpoint
