"""RFC 9162 §2.1 Merkle trees over longhaul's events: hashing, tree heads, inclusion and consistency proofs.

Pure: the standard library only and no longhaul import, so an auditor can copy this file and check
longhaul's proofs without longhaul (``tests/store/test_audit_imports.py`` keeps it so).

- Hashing (§2.1.1): a leaf is ``SHA-256(0x00 || data)``, an inner node ``SHA-256(0x01 || left || right)``,
  the tree of no leaves ``SHA-256()``. A tree of n > 1 leaves splits at k, the largest power of two
  below n: ``MTH(D[n]) = node(MTH(D[0:k]), MTH(D[k:n]))``.
- A longhaul leaf's data is the 56 bytes of :func:`event_leaf`: task id, version, chain hash.
- Verification (§2.1.3.2, §2.1.4.2) raises :class:`ProofError` naming what does not fit.
- :class:`MerkleTree` is the sequencer's append-only tree: it keeps only the right edge (one root per
  perfect subtree of the size's binary decomposition), so appending and the root are O(log n). Each
  append hands back the perfect subtrees it completed; whoever keeps them (:class:`SubtreeHashes`, an
  in-memory one here, a table later) serves the proofs, which read O(log n) perfect subtrees in one call.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Sequence
from typing import NamedTuple, Protocol
from uuid import UUID

HASH_SIZE = 32
"""Bytes of a SHA-256 hash: every leaf hash, node hash, root and proof element."""

EMPTY_ROOT = hashlib.sha256().digest()
"""The root of the tree of no leaves (RFC 9162 §2.1.1: the hash of the empty string)."""


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


def _split(n: int) -> int:
    """The largest power of two below ``n`` (n > 1): where RFC 9162 splits a tree of n leaves."""
    return 1 << ((n - 1).bit_length() - 1)


def tree_head(leaf_hashes: Sequence[bytes]) -> bytes:
    """The root of the tree of these leaf hashes, by RFC 9162's recursive definition (for tests, audits)."""
    if not leaf_hashes:
        return EMPTY_ROOT
    if len(leaf_hashes) == 1:
        return leaf_hashes[0]
    k = _split(len(leaf_hashes))
    return hash_children(tree_head(leaf_hashes[:k]), tree_head(leaf_hashes[k:]))


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


def verify_inclusion(index: int, size: int, leaf_hash: bytes, proof: Sequence[bytes], root: bytes) -> None:
    """Check that ``proof`` shows the leaf at ``index`` in the tree of ``size`` with ``root``.

    Raises:
        ProofError: it does not.
    """
    if root_from_inclusion_proof(index, size, leaf_hash, proof) != root:
        raise ProofError(f"the inclusion proof of leaf {index} does not lead to the root of size {size}")


def verify_consistency(size1: int, size2: int, root1: bytes, root2: bytes, proof: Sequence[bytes]) -> None:
    """Check that the tree of ``size1`` with ``root1`` is a prefix of the one of ``size2`` with ``root2``.

    RFC 9162 §2.1.4.2, with the cases it leaves open decided as transparency-dev/merkle does: equal
    sizes need an empty proof and equal roots; the empty tree is a prefix of every tree, but a proof
    from it proves nothing, so it is refused.

    Raises:
        ProofError: the proof does not show it, or the sizes make no proof possible.
    """
    if not 0 < size1 <= size2:
        raise ProofError(f"no consistency proof goes from size {size1} to size {size2}")
    if any(len(h) != HASH_SIZE for h in (root1, root2, *proof)):
        raise ProofError(f"roots and proof elements have {HASH_SIZE} bytes")
    if size1 == size2:
        if proof:
            raise ProofError("a consistency proof between equal sizes is empty")
        if root1 != root2:
            raise ProofError(f"two different roots for the same size {size1}")
        return
    if not proof:
        raise ProofError(f"a consistency proof from size {size1} to {size2} is not empty")
    fr, sr = _roots_from_consistency_proof(size1, size2, root1, proof)
    if fr != root1:
        raise ProofError(f"the consistency proof does not lead to the root of size {size1}")
    if sr != root2:
        raise ProofError(f"the consistency proof does not lead to the root of size {size2}")


def _roots_from_consistency_proof(
    size1: int, size2: int, root1: bytes, proof: Sequence[bytes]
) -> tuple[bytes, bytes]:
    """RFC 9162 §2.1.4.2 steps 2-7 (0 < size1 < size2): the roots of both sizes that ``proof`` gives."""
    path = [root1, *proof] if size1 & (size1 - 1) == 0 else list(proof)
    fn, sn = size1 - 1, size2 - 1
    while fn & 1:
        fn, sn = fn >> 1, sn >> 1
    fr = sr = path[0]
    for c in path[1:]:
        if sn == 0:
            raise ProofError(f"the consistency proof from size {size1} to {size2} is too long")
        if fn & 1 or fn == sn:
            fr, sr = hash_children(c, fr), hash_children(c, sr)
            while not fn & 1 and fn != 0:
                fn, sn = fn >> 1, sn >> 1
        else:
            sr = hash_children(sr, c)
        fn, sn = fn >> 1, sn >> 1
    if sn != 0:
        raise ProofError(f"the consistency proof from size {size1} to {size2} is too short")
    return fr, sr


# ---------------------------------------------------------------------------------------- stored subtrees


class Node(NamedTuple):
    """A perfect subtree: the ``2**level`` leaves from ``position * 2**level`` (level 0 is one leaf).

    A named tuple, not a dataclass: the sequencer makes about two per event, and a tuple is made faster.
    """

    level: int
    position: int


class SubtreeHashes(Protocol):
    """Where the hashes of perfect subtrees are kept (in memory for tests; a table for the sequencer).

    A perfect subtree never changes once its last leaf is appended, so a hash kept for a tree of size n
    serves the proofs of every size from then on.
    """

    def subtree_hashes(self, nodes: Sequence[Node]) -> Sequence[bytes]:
        """The hashes of ``nodes``, in their order; raises ``KeyError`` for a node not kept."""
        ...


class InMemorySubtreeHashes:
    """:class:`SubtreeHashes` in a dict: what :meth:`MerkleTree.append` gives is added with :meth:`add`."""

    def __init__(self) -> None:
        self._hashes: dict[Node, bytes] = {}
        self.reads = 0
        """How many nodes were read: a proof reads O(log n) of them."""
        self.calls = 0
        """How many times nodes were asked for: a proof asks once."""

    def add(self, nodes: Iterable[tuple[Node, bytes]]) -> None:
        """Keep these perfect subtrees' hashes."""
        self._hashes.update(nodes)

    def subtree_hashes(self, nodes: Sequence[Node]) -> list[bytes]:
        """The hashes of ``nodes``; ``KeyError`` for one not kept."""
        self.reads += len(nodes)
        self.calls += 1
        return [self._hashes[node] for node in nodes]


def _perfect_subtrees(start: int, end: int) -> list[Node]:
    """The perfect subtrees that make up the leaves ``[start, end)``, left to right.

    For the ranges RFC 9162's recursion makes (``start`` a multiple of a power of two at least
    ``end - start``), the range's hash folds these from the right: ``node(a, node(b, c))``.
    """
    nodes = []
    while start < end:
        level = (end - start).bit_length() - 1
        if start:
            level = min(level, (start & -start).bit_length() - 1)
        nodes.append(Node(level, start >> level))
        start += 1 << level
    return nodes


def _fold(hashes: Sequence[bytes]) -> bytes:
    result = hashes[-1]
    for left in reversed(hashes[:-1]):
        result = hash_children(left, result)
    return result


def _inclusion_ranges(index: int, start: int, end: int) -> list[tuple[int, int]]:
    """RFC 9162 §2.1.3.1 PATH as leaf ranges, leaf to root: the sibling range at each level."""
    ranges = []
    while end - start > 1:
        mid = start + _split(end - start)
        if index < mid:
            ranges.append((mid, end))
            end = mid
        else:
            ranges.append((start, mid))
            start = mid
    return ranges[::-1]


def _consistency_ranges(size1: int, size2: int) -> list[tuple[int, int]]:
    """RFC 9162 §2.1.4.1 SUBPROOF(size1, D[0:size2], true) as leaf ranges, in proof order."""
    ranges: list[tuple[int, int]] = []
    start, end, m, whole = 0, size2, size1, True
    while m != end - start:
        k = _split(end - start)
        if m <= k:
            ranges.append((start + k, end))
            end = start + k
        else:
            ranges.append((start, start + k))
            start, m, whole = start + k, m - k, False
    if not whole:
        ranges.append((start, end))
    return ranges[::-1]


def _hashes_of_ranges(ranges: Sequence[tuple[int, int]], hashes: SubtreeHashes) -> list[bytes]:
    """Each range's hash, from the perfect subtrees that make it up, read in one call."""
    plans = [_perfect_subtrees(start, end) for start, end in ranges]
    wanted = sorted({node for plan in plans for node in plan})
    found = dict(zip(wanted, hashes.subtree_hashes(wanted), strict=True))
    return [_fold([found[node] for node in plan]) for plan in plans]


def inclusion_proof(index: int, size: int, hashes: SubtreeHashes) -> list[bytes]:
    """The inclusion proof of the leaf at ``index`` in the tree of ``size`` (RFC 9162 §2.1.3.1)."""
    if not 0 <= index < size:
        raise ProofError(f"leaf index {index} is outside a tree of size {size}")
    return _hashes_of_ranges(_inclusion_ranges(index, 0, size), hashes)


def consistency_proof(size1: int, size2: int, hashes: SubtreeHashes) -> list[bytes]:
    """The consistency proof from the tree of ``size1`` to the one of ``size2`` (RFC 9162 §2.1.4.1)."""
    if not 0 < size1 <= size2:
        raise ProofError(f"no consistency proof goes from size {size1} to size {size2}")
    return _hashes_of_ranges(_consistency_ranges(size1, size2), hashes)


def root_at(size: int, hashes: SubtreeHashes) -> bytes:
    """The root of the tree of the first ``size`` leaves, from the kept subtrees (O(log n) reads)."""
    return _hashes_of_ranges([(0, size)], hashes)[0] if size else EMPTY_ROOT


class MerkleTree:
    """The append-only tree the sequencer keeps: only its right edge, one root per perfect subtree.

    A tree of size n = 2**a + 2**b + ... (a > b > ...) is kept as the roots of its perfect subtrees of
    2**a, 2**b, ... leaves; appending merges equal-sized ones, and the root folds them from the right.
    """

    def __init__(self, size: int = 0, edge: Sequence[bytes] = ()) -> None:
        if size < 0 or len(edge) != size.bit_count():
            raise ValueError(
                f"a tree of size {size} has {max(size, 0).bit_count()} edge roots, not {len(edge)}"
            )
        self._size = size
        self._edge = list(edge)

    @classmethod
    def resume(cls, size: int, hashes: SubtreeHashes) -> MerkleTree:
        """The tree of the first ``size`` leaves, its edge read from the kept subtrees."""
        return cls(size, hashes.subtree_hashes(_perfect_subtrees(0, size)))

    @property
    def size(self) -> int:
        """How many leaves the tree has."""
        return self._size

    @property
    def edge(self) -> list[tuple[Node, bytes]]:
        """The right edge: the perfect subtrees making up the tree, left to right, with their hashes."""
        return list(zip(_perfect_subtrees(0, self._size), self._edge, strict=True))

    def append(self, leaf_hash: bytes) -> list[tuple[Node, bytes]]:
        """Append a leaf; return the perfect subtrees it completed (the leaf first), to be kept."""
        if len(leaf_hash) != HASH_SIZE:
            raise ValueError(f"a leaf hash has {HASH_SIZE} bytes, not {len(leaf_hash)}")
        index, level, node_hash = self._size, 0, leaf_hash
        completed = [(Node(0, index), leaf_hash)]
        while index & 1:
            node_hash = hash_children(self._edge.pop(), node_hash)
            index, level = index >> 1, level + 1
            completed.append((Node(level, index), node_hash))
        self._edge.append(node_hash)
        self._size += 1
        return completed

    def root(self) -> bytes:
        """The tree head of the current size."""
        return _fold(self._edge) if self._edge else EMPTY_ROOT
