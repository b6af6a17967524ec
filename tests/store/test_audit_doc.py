"""The worked example of ``docs/audit.md`` is what the code computes, byte for byte.

The example is made here, from a fixed key and three fixed events, with the modules an auditor
copies; the test fails if the doc's block differs. ``uv run python tests/store/test_audit_doc.py``
prints the block to paste.
"""

from __future__ import annotations

import hashlib
import re
import sys
from pathlib import Path
from uuid import UUID

from store.evidence.checkpoints import Checkpoint, longhaul_origin
from store.evidence.merkle import (
    InMemorySubtreeHashes,
    MerkleTree,
    consistency_proof,
    event_leaf,
    hash_children,
    hash_leaf,
    inclusion_proof,
    root_at,
    verify_consistency,
)
from store.evidence.receipts import Receipt, verify_receipt
from store.evidence.signed_notes import SignerKey, sign_note

DOC = Path(__file__).resolve().parents[2] / "docs" / "audit.md"
ORIGIN = longhaul_origin("demo.example")
KEY = SignerKey(ORIGIN, hashlib.sha256(b"longhaul docs/audit.md worked example").digest())
TASK_A = UUID("0190a5f3-7c2e-7b1a-9d4e-5f6a7b8c9d0e")
TASK_B = UUID("0190a5f3-9a41-7c03-8e15-2b3c4d5e6f70")
EVENTS = [  # (task, version, chain hash) in commit order; the chain hashes stand in for real ones
    (TASK_A, 1, hashlib.sha256(b"chain of task A at version 1").digest()),
    (TASK_B, 1, hashlib.sha256(b"chain of task B at version 1").digest()),
    (TASK_A, 2, hashlib.sha256(b"chain of task A at version 2").digest()),
]


def worked_example() -> str:
    """The text of the example block (without its fences)."""
    verifier = KEY.verifier()
    lines = [
        f"signer key    {KEY}",
        f"verifier key  {verifier}",
        f"public key    {verifier.public_key.hex()}",
        f"key ID        SHA-256({ORIGIN!r} || 0a || 01 || public key)[:4] = {verifier.key_id:08x}",
        "",
    ]
    tree, kept = MerkleTree(), InMemorySubtreeHashes()
    leaf_hashes = []
    for index, (task_id, version, chain_hash) in enumerate(EVENTS):
        data = event_leaf(task_id, version, chain_hash)
        leaf_hashes.append(hash_leaf(data))
        lines += [
            f"leaf {index}: task {task_id}, version {version}",
            f"  chain hash  {chain_hash.hex()}",
            f"  leaf input  {data[:16].hex()} {data[16:24].hex()} {data[24:].hex()}",
            f"  leaf hash   SHA-256(00 || leaf input) = {leaf_hashes[-1].hex()}",
        ]
        kept.add(tree.append(leaf_hashes[-1]))
    node = hash_children(leaf_hashes[0], leaf_hashes[1])
    assert root_at(2, kept) == node
    assert tree.root() == hash_children(node, leaf_hashes[2])
    lines += [
        "",
        f"root of size 2  SHA-256(01 || leaf hash 0 || leaf hash 1) = {node.hex()}",
        f"root of size 3  SHA-256(01 || root of size 2 || leaf hash 2) = {tree.root().hex()}",
    ]
    proof = consistency_proof(2, 3, kept)
    verify_consistency(2, 3, node, tree.root(), proof)
    lines += [f"consistency proof from size 2 to 3  [{', '.join(h.hex() for h in proof)}]", ""]

    note = sign_note(Checkpoint(ORIGIN, tree.size, tree.root()).body(), KEY)
    lines += ["checkpoint (the signed note):", "", *note.removesuffix("\n").split("\n"), ""]
    receipt = Receipt(note, TASK_A, 2, EVENTS[2][2], 2, tuple(inclusion_proof(2, 3, kept)))
    verdict = verify_receipt(receipt.to_json(), str(verifier))
    assert verdict.valid, verdict.reason
    lines += [
        "receipt of task A's last event (leaf 2):",
        "",
        *receipt.to_json().removesuffix("\n").split("\n"),
    ]
    return "\n".join(lines) + "\n"


def documented_example() -> str:
    """The fenced block after the ``<!-- worked example -->`` marker in docs/audit.md."""
    match = re.search(r"<!-- worked example[^\n]*-->\n```text\n(.*?)```\n", DOC.read_text(), re.DOTALL)
    assert match, "docs/audit.md has no ```text block after <!-- worked example ... -->"
    return match.group(1)


def test_the_worked_example_in_the_docs_is_what_the_code_computes() -> None:
    assert documented_example() == worked_example(), (
        "docs/audit.md's worked example differs from the code; paste the output of "
        "`uv run python tests/store/test_audit_doc.py`"
    )


if __name__ == "__main__":
    sys.stdout.write(worked_example())
