"""RFC 9162 Merkle trees: known vectors, the append-only tree, and proofs of random trees.

The vectors are those of transparency-dev/merkle (Apache-2.0), read at commit 417fb0c3:
``testonly/constants.go`` (the eight leaf inputs, the roots of every size 0-8) and the "happy path"
cases of ``testdata/inclusion/{1,2,3,4}`` and ``testdata/consistency/{1,2,3,4}``; the edge cases of
``testdata/consistency/additional`` decide what the RFC leaves open.
"""

from __future__ import annotations

import base64
from uuid import UUID

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from store.evidence.merkle import (
    EMPTY_ROOT,
    InMemorySubtreeHashes,
    MerkleTree,
    Node,
    ProofError,
    consistency_proof,
    event_leaf,
    hash_children,
    hash_leaf,
    inclusion_proof,
    root_at,
    root_from_inclusion_proof,
    tree_head,
    verify_consistency,
    verify_inclusion,
)

# transparency-dev/merkle testonly/constants.go: LeafInputs() and RootHashes()
LEAF_INPUTS = [
    bytes.fromhex(h)
    for h in (
        "",
        "00",
        "10",
        "2021",
        "3031",
        "40414243",
        "5051525354555657",
        "606162636465666768696a6b6c6d6e6f",
    )
]
ROOTS = [
    bytes.fromhex(h)
    for h in (
        "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855",
        "6e340b9cffb37a989ca544e6bb780a2c78901d3fb33738768511a30617afa01d",
        "fac54203e7cc696cf0dfcb42c92a1d9dbaf70ad9e621f4bd8d98662f00e3c125",
        "aeb6bcfe274b70a14fb067a5e5578264db0fa9b51af5e0ba159158f329e06e77",
        "d37ee418976dd95753c1c73862b9398fa2a2cf9b4ff0fdfe8b30cd95209614b7",
        "4e3bbb1f7b478dcfe71fb631631519a3bca12c9aefca1612bfce4c13a86264d4",
        "76e67dadbcdf1e10e1b74ddc608abd2f98dfb16fbce75277b5232a127f2087ef",
        "ddb89be403809e325750d3d263cd78929c2942b7942a34b77e122c9594a74c8c",
        "5dc9da79a70659a9ad559cb701ded9a2ab9d823aad2f4960cfe370eff4604328",
    )
]


def b64(text: str) -> bytes:
    return base64.b64decode(text)


# testdata/inclusion/{1,2,3,4}/happy-path.json: (leaf index, tree size, proof)
INCLUSION = [
    (
        0,
        8,
        [
            "lqKW0iTyhcZ77pPDD4owkVfw2qNdxbh+QQt4YwoJz8c=",
            "Xwg/ChozygdqlSeYMlgNs+DvRYS9/x9UyKNg9Q3jAx4=",
            "a0eq8p7jwq+a+Im8H7klTavTEXfxYjLdaqsDXKOb9uQ=",
        ],
    ),
    (
        5,
        8,
        [
            "vBoGQ7EuTS18d5GPROD095qDi2z57FtcKD4fTYhZnms=",
            "yoVOoSjtBQtBs1/8G4e46yveRh6eO1WW7Oa51ZdaCuA=",
            "037kGJdt2VdTwcc4Yrk5j6Kiz5tP8P3+izDNlSCWFLc=",
        ],
    ),
    (2, 3, ["+sVCA+fMaWzw38tCySodnbr3CtnmIfS9jZhmLwDjwSU="]),
    (
        1,
        5,
        [
            "bjQLnP+zepicpUTmu3gKLHiQHT+zNzh2hRGjBhevoB0=",
            "Xwg/ChozygdqlSeYMlgNs+DvRYS9/x9UyKNg9Q3jAx4=",
            "vBoGQ7EuTS18d5GPROD095qDi2z57FtcKD4fTYhZnms=",
        ],
    ),
]

# testdata/consistency/{1,2,3,4}/happy-path.json: (size1, size2, proof)
CONSISTENCY = [
    (
        1,
        8,
        [
            "lqKW0iTyhcZ77pPDD4owkVfw2qNdxbh+QQt4YwoJz8c=",
            "Xwg/ChozygdqlSeYMlgNs+DvRYS9/x9UyKNg9Q3jAx4=",
            "a0eq8p7jwq+a+Im8H7klTavTEXfxYjLdaqsDXKOb9uQ=",
        ],
    ),
    (
        6,
        8,
        [
            "DrxdNDf74tsVi58Sah0RjjCBgQMdCpSfje3t68VY72o=",
            "yoVOoSjtBQtBs1/8G4e46yveRh6eO1WW7Oa51ZdaCuA=",
            "037kGJdt2VdTwcc4Yrk5j6Kiz5tP8P3+izDNlSCWFLc=",
        ],
    ),
    (2, 5, ["Xwg/ChozygdqlSeYMlgNs+DvRYS9/x9UyKNg9Q3jAx4=", "vBoGQ7EuTS18d5GPROD095qDi2z57FtcKD4fTYhZnms="]),
    (
        6,
        7,
        [
            "DrxdNDf74tsVi58Sah0RjjCBgQMdCpSfje3t68VY72o=",
            "sIaT7C5yFZcTBkHoIR5+7cy0wmQTlj7ubB4u0W/7Gl8=",
            "037kGJdt2VdTwcc4Yrk5j6Kiz5tP8P3+izDNlSCWFLc=",
        ],
    ),
]


def _kept(leaf_hashes: list[bytes]) -> tuple[MerkleTree, InMemorySubtreeHashes]:
    tree, kept = MerkleTree(), InMemorySubtreeHashes()
    for leaf in leaf_hashes:
        kept.add(tree.append(leaf))
    return tree, kept


VECTOR_LEAVES = [hash_leaf(data) for data in LEAF_INPUTS]


class TestKnownVectors:
    def test_the_empty_tree_is_the_hash_of_nothing(self) -> None:
        assert EMPTY_ROOT == ROOTS[0] == tree_head([])

    @pytest.mark.parametrize("size", range(9))
    def test_tree_heads(self, size: int) -> None:
        assert tree_head(VECTOR_LEAVES[:size]) == ROOTS[size]
        tree, kept = _kept(VECTOR_LEAVES[:size])
        assert tree.root() == ROOTS[size]
        assert root_at(size, kept) == ROOTS[size]

    @pytest.mark.parametrize(("index", "size", "proof"), INCLUSION)
    def test_inclusion_proofs(self, index: int, size: int, proof: list[str]) -> None:
        _, kept = _kept(VECTOR_LEAVES)
        assert inclusion_proof(index, size, kept) == [b64(h) for h in proof]
        verify_inclusion(index, size, VECTOR_LEAVES[index], [b64(h) for h in proof], ROOTS[size])

    @pytest.mark.parametrize(("size1", "size2", "proof"), CONSISTENCY)
    def test_consistency_proofs(self, size1: int, size2: int, proof: list[str]) -> None:
        _, kept = _kept(VECTOR_LEAVES)
        assert consistency_proof(size1, size2, kept) == [b64(h) for h in proof]
        verify_consistency(size1, size2, ROOTS[size1], ROOTS[size2], [b64(h) for h in proof])

    def test_a_single_leaf_is_its_own_root_with_an_empty_proof(self) -> None:
        verify_inclusion(0, 1, VECTOR_LEAVES[0], [], ROOTS[1])
        with pytest.raises(ProofError):
            verify_inclusion(0, 1, VECTOR_LEAVES[0], [], EMPTY_ROOT)

    @pytest.mark.parametrize(
        ("size1", "size2", "root1", "root2", "proof"),
        [
            (0, 1, EMPTY_ROOT, ROOTS[1], []),  # from the empty tree: proves nothing
            (0, 0, EMPTY_ROOT, EMPTY_ROOT, []),
            (1, 0, ROOTS[1], EMPTY_ROOT, []),  # shrinking
            (2, 1, ROOTS[2], ROOTS[1], []),
            (1, 1, ROOTS[1], ROOTS[2], []),  # equal sizes, different roots
            (1, 1, ROOTS[1], ROOTS[1], [ROOTS[1]]),  # equal sizes need an empty proof
            (1, 2, ROOTS[1], ROOTS[2], []),  # different sizes need a proof
        ],
    )
    def test_consistency_edge_cases_are_refused(
        self, size1: int, size2: int, root1: bytes, root2: bytes, proof: list[bytes]
    ) -> None:
        with pytest.raises(ProofError):
            verify_consistency(size1, size2, root1, root2, proof)

    def test_equal_sizes_with_equal_roots_are_consistent(self) -> None:
        verify_consistency(3, 3, ROOTS[3], ROOTS[3], [])


class TestEventLeaves:
    def test_a_leaf_is_task_id_version_and_chain_hash(self) -> None:
        task_id = UUID("0190a5f3-7c2e-7b1a-9d4e-5f6a7b8c9d0e")
        data = event_leaf(task_id, 7, bytes(range(32)))
        assert len(data) == 56
        assert data == task_id.bytes + (7).to_bytes(8, "big") + bytes(range(32))

    @pytest.mark.parametrize(("version", "chain_hash"), [(0, bytes(32)), (2**64, bytes(32)), (1, bytes(31))])
    def test_a_leaf_refuses_what_the_format_cannot_hold(self, version: int, chain_hash: bytes) -> None:
        with pytest.raises(ValueError, match=r"version|chain hash"):
            event_leaf(UUID(int=1), version, chain_hash)


class TestTheAppendOnlyTree:
    def test_each_append_gives_the_perfect_subtrees_it_completed(self) -> None:
        tree = MerkleTree()
        for leaf in VECTOR_LEAVES[:7]:
            tree.append(leaf)
        completed = tree.append(VECTOR_LEAVES[7])
        assert [node for node, _ in completed] == [Node(0, 7), Node(1, 3), Node(2, 1), Node(3, 0)]
        assert completed[-1][1] == ROOTS[8]

    def test_the_edge_is_one_root_per_perfect_subtree(self) -> None:
        tree, _ = _kept(VECTOR_LEAVES[:7])
        assert [node for node, _ in tree.edge] == [Node(2, 0), Node(1, 2), Node(0, 6)]
        assert tree.edge[0][1] == ROOTS[4]

    def test_a_resumed_tree_continues_as_the_first(self) -> None:
        tree, kept = _kept(VECTOR_LEAVES[:5])
        resumed = MerkleTree.resume(5, kept)
        assert resumed.root() == tree.root() == ROOTS[5]
        for leaf in VECTOR_LEAVES[5:]:
            kept.add(resumed.append(leaf))
        assert resumed.size == 8
        assert resumed.root() == ROOTS[8]

    def test_an_edge_that_does_not_fit_the_size_is_refused(self) -> None:
        with pytest.raises(ValueError, match="edge roots"):
            MerkleTree(3, [ROOTS[2]])

    def test_a_leaf_hash_has_32_bytes(self) -> None:
        with pytest.raises(ValueError, match="32 bytes"):
            MerkleTree().append(b"short")

    def test_proofs_read_few_subtrees_in_one_call(self) -> None:
        leaves = [hash_leaf(i.to_bytes(4, "big")) for i in range(1000)]
        _, kept = _kept(leaves)
        for read in (
            lambda: inclusion_proof(0, 999, kept),
            lambda: inclusion_proof(998, 999, kept),
            lambda: consistency_proof(500, 999, kept),
            lambda: root_at(999, kept),
        ):
            kept.reads = kept.calls = 0
            read()
            assert kept.calls == 1
            assert kept.reads <= 2 * 10  # O(log n): about two per level of a tree of 2**10 leaves


# ---------------------------------------------------------------------------------------- properties

leaf_lists = st.lists(st.binary(max_size=8), min_size=1, max_size=70).map(
    lambda datas: [hash_leaf(data + i.to_bytes(2, "big")) for i, data in enumerate(datas)]
)


@settings(max_examples=150, deadline=None)
@given(leaves=leaf_lists, data=st.data())
def test_every_inclusion_proof_verifies_and_any_change_fails(
    leaves: list[bytes], data: st.DataObject
) -> None:
    size = data.draw(st.integers(1, len(leaves)), label="size")
    index = data.draw(st.integers(0, size - 1), label="index")
    _, kept = _kept(leaves)
    root, proof = tree_head(leaves[:size]), inclusion_proof(index, size, kept)
    verify_inclusion(index, size, leaves[index], proof, root)

    other_leaf = hash_leaf(b"not a leaf of the tree")
    # (index, size, leaf hash, proof); each is checked against the root of its own size
    changes = [
        (index, size, other_leaf, proof),
        (index, size - 1, leaves[index], proof) if index < size - 1 else None,
        (index, size + 1, leaves[index], proof) if size < len(leaves) else None,
        (index + 1, size, leaves[index], proof) if index + 1 < size else None,
        (index - 1, size, leaves[index], proof) if index else None,
        (index, size, leaves[index], [*proof, leaves[0]]),
        (index, size, leaves[index], proof[:-1]) if proof else None,
        (index, size, leaves[index], proof[::-1]) if proof[::-1] != proof else None,
    ]
    if proof:
        position = data.draw(st.integers(0, len(proof) - 1), label="altered element")
        bit = data.draw(st.integers(0, 255), label="altered bit")
        altered = bytearray(proof[position])
        altered[bit // 8] ^= 1 << (bit % 8)
        changes.append(
            (index, size, leaves[index], [*proof[:position], bytes(altered), *proof[position + 1 :]])
        )
    for change in filter(None, changes):
        with pytest.raises(ProofError):
            verify_inclusion(*change, tree_head(leaves[: change[1]]))


@settings(max_examples=150, deadline=None)
@given(leaves=leaf_lists, data=st.data())
def test_every_consistency_proof_verifies_and_any_change_fails(
    leaves: list[bytes], data: st.DataObject
) -> None:
    size2 = data.draw(st.integers(1, len(leaves)), label="size2")
    size1 = data.draw(st.integers(1, size2), label="size1")
    _, kept = _kept(leaves)
    root1, root2 = tree_head(leaves[:size1]), tree_head(leaves[:size2])
    proof = consistency_proof(size1, size2, kept)
    verify_consistency(size1, size2, root1, root2, proof)
    if size1 == size2:
        return

    forged_root = hash_children(root1, root2)
    changes = [
        (size1, size2, forged_root, root2, proof),
        (size1, size2, root1, forged_root, proof),
        (size1, size2, root1, root2, proof[:-1]),
        (size1, size2, root1, root2, [*proof, root1]),
        (size1 + 1, size2, tree_head(leaves[: size1 + 1]), root2, proof) if size1 + 1 < size2 else None,
        (size1 - 1, size2, tree_head(leaves[: size1 - 1]), root2, proof) if size1 > 1 else None,
        (size1, size2 + 1, root1, tree_head(leaves[: size2 + 1]), proof) if size2 < len(leaves) else None,
        (size2, size1, root2, root1, proof),
    ]
    position = data.draw(st.integers(0, len(proof) - 1), label="altered element")
    bit = data.draw(st.integers(0, 255), label="altered bit")
    altered = bytearray(proof[position])
    altered[bit // 8] ^= 1 << (bit % 8)
    changes.append((size1, size2, root1, root2, [*proof[:position], bytes(altered), *proof[position + 1 :]]))
    for change in filter(None, changes):
        with pytest.raises(ProofError):
            verify_consistency(*change)


@settings(max_examples=100, deadline=None)
@given(leaves=leaf_lists)
def test_the_append_only_tree_has_the_rfc_root_at_every_size(leaves: list[bytes]) -> None:
    tree, kept = MerkleTree(), InMemorySubtreeHashes()
    for size, leaf in enumerate(leaves, start=1):
        kept.add(tree.append(leaf))
        assert tree.root() == tree_head(leaves[:size]) == root_at(size, kept)
    for size in range(1, len(leaves) + 1):
        assert root_at(size, kept) == tree_head(leaves[:size])


@given(
    index=st.integers(-2, 40),
    size=st.integers(0, 40),
    proof=st.lists(st.binary(min_size=0, max_size=40), max_size=8),
)
def test_junk_proofs_are_refused_not_crashes(index: int, size: int, proof: list[bytes]) -> None:
    try:
        root = root_from_inclusion_proof(index, size, bytes(32), proof)
    except ProofError:
        return
    assert 0 <= index < size
    assert len(root) == 32
