"""The Merkle log in PostgreSQL: leaves in log order, proofs from stored subtrees, signed checkpoints."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import psycopg
import pytest
from psycopg import sql

from store.evidence.merkle import (
    EMPTY_ROOT,
    MerkleTree,
    event_leaf,
    hash_leaf,
    tree_head,
    verify_consistency,
    verify_inclusion,
)
from store.evidence.merkle_log import MerkleLog, catch_up
from store.evidence.receipts import verify_receipt
from store.evidence.signed_notes import SignerKey
from store.log.application import TaskApplication
from store.log.config import StoreConfig
from tests.support.tasks import new_task

START = datetime(2026, 5, 1, 9, 0, tzinfo=UTC)
UNTIL = START + timedelta(minutes=5)
SIGNER = SignerKey.generate("longhaul/test")


def _log(store: TaskApplication) -> MerkleLog:
    log = store.merkle_log
    assert log is not None
    return log


def test_a_memory_store_has_no_merkle_log(any_store: TaskApplication) -> None:
    assert (any_store.merkle_log is None) == (any_store.run_queue.__class__.__name__.startswith("Memory"))


def test_catch_up_sequences_every_event_in_log_order_and_signs_once(postgres_store: TaskApplication) -> None:
    log = _log(postgres_store)
    assert catch_up(log, postgres_store.recorder.select_notifications, SIGNER, START) is None  # empty log
    tasks = [new_task(START) for _ in range(3)]
    postgres_store.save_tasks(*tasks)
    for task in tasks:
        task.grant_lease(worker="w", now=START, until=UNTIL)
    postgres_store.save_each(*tasks)
    first = catch_up(log, postgres_store.recorder.select_notifications, SIGNER, START)
    assert first is not None
    assert first.size == 6
    assert catch_up(log, postgres_store.recorder.select_notifications, SIGNER, START) is None  # no new events
    tasks[0].complete(epoch=1, now=START, message=None)
    postgres_store.save_tasks(tasks[0])
    second = catch_up(log, postgres_store.recorder.select_notifications, SIGNER, START)
    assert second is not None
    assert second.size == 7

    leaves = list(log.leaves(page=2))  # pages of two: the paging is exercised
    notifications = postgres_store.recorder.select_notifications(1, 100)
    assert [(leaf.task_id, leaf.version) for leaf in leaves] == [
        (n.originator_id, n.originator_version) for n in notifications
    ]
    assert [leaf.index for leaf in leaves] == list(range(7))
    hashes = [hash_leaf(event_leaf(leaf.task_id, leaf.version, leaf.chain_hash)) for leaf in leaves]
    assert first.root_hash == tree_head(hashes[:6])
    assert second.root_hash == tree_head(hashes)
    assert log.tree().root() == tree_head(hashes)
    verify_consistency(6, 7, first.root_hash, second.root_hash, log.consistency_proof(6, 7))
    for leaf in leaves:
        verify_inclusion(leaf.index, 7, leaf.leaf_hash, log.inclusion_proof(leaf.index, 7), second.root_hash)
    assert [c.size for c in log.checkpoints()] == [6, 7]


def test_a_receipt_proves_the_tasks_last_covered_event(postgres_store: TaskApplication) -> None:
    log = _log(postgres_store)
    task = new_task(START)
    postgres_store.save_tasks(task)
    assert log.receipt(task.id) is None  # no checkpoint yet
    catch_up(log, postgres_store.recorder.select_notifications, SIGNER, START)
    task.grant_lease(worker="w", now=START, until=UNTIL)
    postgres_store.save_tasks(task)  # not yet covered by a checkpoint
    receipt = log.receipt(task.id)
    assert receipt is not None
    assert receipt.version == 1
    verdict = verify_receipt(receipt.to_json(), str(SIGNER.verifier()))
    assert verdict.valid, verdict.reason
    catch_up(log, postgres_store.recorder.select_notifications, SIGNER, START)
    receipt = log.receipt(task.id)
    assert receipt is not None
    assert receipt.version == 2
    assert verify_receipt(receipt, str(SIGNER.verifier())).valid
    assert not verify_receipt(receipt, str(SignerKey.generate("longhaul/test").verifier())).valid


def test_append_refuses_what_is_already_sequenced_and_leaves_the_tree_alone(
    postgres_store: TaskApplication,
) -> None:
    log = _log(postgres_store)
    postgres_store.save_tasks(new_task(START))
    catch_up(log, postgres_store.recorder.select_notifications, SIGNER, START)
    stale = MerkleTree()
    with pytest.raises(ValueError, match="sequenced up to 1"):
        log.append(stale, [(1, new_task(START).id, 1)])
    assert stale.size == 0
    assert stale.root() == EMPTY_ROOT
    assert log.size() == 1
    assert log.position() == 1


def test_an_event_without_a_chain_hash_is_passed_over(postgres_store: TaskApplication) -> None:
    log = _log(postgres_store)
    task = new_task(START)
    postgres_store.save_tasks(task)
    tree, passed = log.append(log.tree(), [(1, task.id, 1), (2, task.id, 2)])  # version 2 has no event
    assert tree.size == 1
    assert [(p.position, p.version) for p in passed] == [(2, 2)]
    assert log.position() == 2
    assert log.size() == 1


def test_an_event_deleted_and_re_inserted_is_passed_over_not_a_second_leaf(
    postgres_store: TaskApplication, store_config: StoreConfig
) -> None:
    log = _log(postgres_store)
    task = new_task(START)
    postgres_store.save_tasks(task)
    catch_up(log, postgres_store.recorder.select_notifications, SIGNER, START)
    events = sql.Identifier(store_config.schema, "longhaul_events")
    with psycopg.connect(store_config.database_url, autocommit=True) as conn:  # behind longhaul's back
        conn.execute(
            sql.SQL(
                "WITH gone AS (DELETE FROM {} WHERE originator_id = %s RETURNING *)"
                " INSERT INTO {} (originator_id, originator_version, topic, state)"
                " SELECT originator_id, originator_version, topic, state FROM gone"
            ).format(events, events),
            (task.id,),
        )
    tree, passed = log.append(log.tree(), [(2, task.id, 1)])  # its new position; the chain row is there
    assert tree.size == 1
    assert [(p.position, p.reason) for p in passed] == [
        (2, "its task and version are leaf 0 already (deleted and re-inserted)")
    ]
    assert log.position() == 2
