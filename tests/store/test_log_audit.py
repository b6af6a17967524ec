"""The pure log audit (``store/evidence/log_audit.py``): an intact log gives no fault; one damage is named.

Hypothesis draws the log (tasks with versions, interleaved in any order), where checkpoints were
signed, the page size, and the damage; the tree, subtrees and checkpoints are built as the
sequencer builds them (``MerkleTree``, its completed subtrees, signed notes).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from uuid import UUID

from hypothesis import given
from hypothesis import strategies as st

from store.evidence.checkpoints import Checkpoint
from store.evidence.log_audit import InLog, LeafPass, LogFault, checkpoint_faults, consistency_faults
from store.evidence.merkle import MerkleTree, Node, consistency_proof
from store.evidence.merkle_log import Leaf, PurgedTask, StoredCheckpoint
from store.evidence.signed_notes import SignerKey, sign_note

SIGNER = SignerKey.generate("longhaul/test")
WHEN = datetime(2026, 5, 1, tzinfo=UTC)


@dataclass
class Log:
    leaves: list[Leaf]
    in_log: dict[tuple[UUID, int], InLog]
    nodes: dict[Node, bytes]
    checkpoints: list[StoredCheckpoint]

    def subtree_hashes(self, nodes: Sequence[Node]) -> list[bytes]:
        """The stored subtrees (``store.evidence.merkle.SubtreeHashes``), for the consistency proofs."""
        return [self.nodes[node] for node in nodes]


@st.composite
def logs(draw: st.DrawFn) -> Log:
    counts = draw(st.lists(st.integers(1, 6), min_size=1, max_size=6))
    order = draw(st.permutations([t for t, n in enumerate(counts) for _ in range(n)]))
    sizes = sorted(draw(st.sets(st.integers(1, len(order)), min_size=1, max_size=4)))
    tree, nodes = MerkleTree(), dict[Node, bytes]()
    versions = [0] * len(counts)
    leaves, in_log, checkpoints = [], {}, []
    for index, task in enumerate(order):
        versions[task] += 1
        task_id = UUID(int=task + 1)
        chain = bytes([task, versions[task]]) * 16
        leaf = Leaf(index, index + 1, task_id, versions[task], chain)
        leaves.append(leaf)
        in_log[(task_id, leaf.version)] = InLog(chain, True)
        nodes.update(tree.append(leaf.leaf_hash))
        if tree.size in sizes:
            root = tree.root()
            note = sign_note(Checkpoint(SIGNER.name, tree.size, root).body(), SIGNER)
            checkpoints.append(StoredCheckpoint(tree.size, root, note, WHEN))
    return Log(leaves, in_log, nodes, checkpoints)


def _audit(
    log: Log,
    page: int,
    *,
    in_log: Mapping[tuple[UUID, int], InLog] | None = None,
    purged: Mapping[UUID, PurgedTask] | None = None,
) -> list[str]:
    entries = log.in_log if in_log is None else in_log
    audit = LeafPass(log.checkpoints, purged or {})
    faults: list[LogFault] = checkpoint_faults(log.checkpoints, [SIGNER.verifier()])

    def stored(nodes: Sequence[Node]) -> dict[Node, bytes]:
        return {node: log.nodes[node] for node in nodes if node in log.nodes}

    for start in range(0, len(log.leaves), page):
        faults += audit.page(log.leaves[start : start + page], entries, stored)
    present = {task for task, _ in entries}
    faults += audit.finish(present)
    faults += consistency_faults(log.checkpoints, lambda a, b: consistency_proof(a, b, log))
    return [str(fault) for fault in faults]


@given(logs(), st.integers(1, 7))
def test_an_intact_log_has_no_fault(log: Log, page: int) -> None:
    assert _audit(log, page) == []


@given(logs(), st.integers(1, 7), st.data())
def test_one_event_gone_from_the_log_is_named_alone(log: Log, page: int, data: st.DataObject) -> None:
    leaf = data.draw(st.sampled_from(log.leaves))
    in_log = {k: v for k, v in log.in_log.items() if k != (leaf.task_id, leaf.version)}
    faults = _audit(log, page, in_log=in_log)
    if any(task == leaf.task_id for task, _ in in_log):
        assert faults == [
            (
                f"task {leaf.task_id} version {leaf.version}: not-in-log: leaf {leaf.index} of the"
                " signed tree, but neither its event nor its hash is in the log"
            )
        ]
    else:  # its only event: the task is gone
        assert faults == [f"task {leaf.task_id}: deleted: version 1 is in the signed tree, none in the log"]


@given(logs(), st.integers(1, 7), st.data())
def test_a_whole_task_gone_is_named_once_unless_it_was_purged(
    log: Log, page: int, data: st.DataObject
) -> None:
    task_id = data.draw(st.sampled_from(sorted({leaf.task_id for leaf in log.leaves})))
    last = max(leaf.version for leaf in log.leaves if leaf.task_id == task_id)
    in_log = {k: v for k, v in log.in_log.items() if k[0] != task_id}
    span = f"versions 1..{last} are" if last > 1 else "version 1 is"
    assert _audit(log, page, in_log=in_log) == [
        f"task {task_id}: deleted: {span} in the signed tree, none in the log"
    ]
    purged = {task_id: PurgedTask(task_id, last, "a.jsonl.gz", WHEN)}
    assert _audit(log, page, in_log=in_log, purged=purged) == []


@given(logs(), st.integers(1, 7), st.data())
def test_one_altered_chain_hash_in_the_log_is_named_alone(log: Log, page: int, data: st.DataObject) -> None:
    leaf = data.draw(st.sampled_from(log.leaves))
    in_log = {**log.in_log, (leaf.task_id, leaf.version): InLog(bytes(32), True)}
    assert _audit(log, page, in_log=in_log) == [
        (
            f"task {leaf.task_id} version {leaf.version}: leaf-mismatch: leaf {leaf.index} of the signed tree"
            " holds its chain hash, the log another chain hash: the log or the leaf was altered"
        )
    ]


@given(logs(), st.integers(1, 7), st.data())
def test_one_altered_subtree_is_named_once(log: Log, page: int, data: st.DataObject) -> None:
    node = data.draw(st.sampled_from(sorted(log.nodes)))
    log.nodes[node] = bytes(32)
    start = node.position << node.level
    end = start + (1 << node.level) - 1
    subject = f"leaf {start}" if start == end else f"leaves {start}..{end}"
    faults = _audit(log, page)
    assert [f for f in faults if "subtree-mismatch" in f] == [
        (
            f"{subject}: subtree-mismatch: the stored hash of this subtree is not the one its leaves give:"
            " it or a leaf was altered"
        )
    ]
    assert all(f.startswith(("checkpoints ", subject)) for f in faults)  # at most the proofs it is in
