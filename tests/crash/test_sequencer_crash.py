"""A ``longhaul sequencer`` SIGKILLed while appends go on: the next one leaves every event a leaf once.

A backlog is committed, a sequencer process starts on it while a thread keeps committing, and is
killed once it has signed a few checkpoints (at whatever point of a batch it then is: with a gather
window longer than the checkpoint interval it spends nearly all its time gathering, so the kill
comes mid-gather, with events taken but not recorded). A second
sequencer process takes over from the stored tree and position. Afterwards every event of the
log is a leaf exactly once, in log order, the tree equals the one recomputed from the stored
events, and every stored checkpoint verifies with the verifier key, is consistent with the next
one, and is in the NATS stream once.
"""

from __future__ import annotations

import asyncio
import itertools
import signal
import threading
import time
from datetime import UTC, datetime, timedelta
from uuid import UUID

import nats

from store.evidence.chain import GENESIS, chain_hash, task_uuid
from store.evidence.checkpoints import parse_checkpoint
from store.evidence.key_files import create_signer_key
from store.evidence.merkle import event_leaf, hash_leaf, tree_head, verify_consistency
from store.evidence.merkle_log import MerkleLog
from store.evidence.signed_notes import open_note
from store.log.application import TaskApplication
from store.public_form.subjects import NatsNames
from tests.crash.cluster import Cluster
from tests.support.processes import wait_until
from tests.support.tasks import new_task

BACKLOG_TASKS, EVENTS_PER_TASK = 40, 50


def _commit(store: TaskApplication, tasks: int) -> None:
    now = datetime.now(UTC)
    for _ in range(tasks):
        task = new_task(now)
        task.grant_lease(worker="w", now=now, until=now + timedelta(minutes=5))
        for i in range(EVENTS_PER_TASK - 2):
            task.report_progress(epoch=task.lease_epoch, now=now, message={"parts": [{"text": f"{i}"}]})
        store.save_tasks(task)


def _keep_committing(store: TaskApplication, stop: threading.Event) -> None:
    """Small commits, one task of a few events at a time, until ``stop``."""
    while not stop.is_set():
        now = datetime.now(UTC)
        task = new_task(now)
        task.grant_lease(worker="w", now=now, until=now + timedelta(minutes=5))
        store.save_tasks(task)
        time.sleep(0.01)


def _recomputed_leaf_hashes(store: TaskApplication) -> tuple[list[int], list[bytes]]:
    """Every event's position and leaf hash, chain hashes recomputed from the stored events."""
    previous: dict[UUID, bytes] = {}
    positions, hashes = [], []
    for n in store.recorder.select_notifications(1, 10_000_000):
        task_id = task_uuid(n.originator_id)
        chain = chain_hash(task_id, n.originator_version, n.topic, n.state, previous.get(task_id, GENESIS))
        previous[task_id] = chain
        positions.append(n.id)
        hashes.append(hash_leaf(event_leaf(task_id, n.originator_version, chain)))
    return positions, hashes


async def _published_sizes(names: NatsNames) -> list[int]:
    client = await nats.connect(names.url)
    try:
        js = client.jetstream()
        info = await js.stream_info(names.checkpoint_stream)
        messages = [await js.get_msg(names.checkpoint_stream, s) for s in range(1, info.state.last_seq + 1)]
        return [int((m.headers or {})["Longhaul-Tree-Size"]) for m in messages]
    finally:
        await client.close()


def test_a_sequencer_killed_while_appends_go_on_leaves_every_event_a_leaf_once(
    cluster: Cluster, store: TaskApplication
) -> None:
    settings = cluster.settings
    assert settings.nats_url is not None
    log = store.merkle_log
    assert isinstance(log, MerkleLog)
    key_path = cluster.tmp_path / "audit-key"
    key = create_signer_key(key_path, "longhaul/crash-test")
    options = {
        "audit_key_file": str(key_path),
        "checkpoint_interval_seconds": "0.2",
        "sequencer_gather_seconds": "5",  # cut by each checkpoint: gathering all the time
    }
    _commit(store, BACKLOG_TASKS)

    stop_commits = threading.Event()
    committer = threading.Thread(target=_keep_committing, args=(store, stop_commits), daemon=True)
    committer.start()
    try:
        first = cluster.start(["sequencer"], **options)
        wait_until(lambda: len(log.checkpoints()) >= 3, 60, "the first sequencer to sign three checkpoints")
        first.signal(signal.SIGKILL)
        first.popen.wait(timeout=10)
        at_kill = len(log.checkpoints())
        second = cluster.start(["sequencer"], **options)
        wait_until(lambda: len(log.checkpoints()) >= at_kill + 3, 60, "the second to sign three more")
    finally:
        stop_commits.set()
        committer.join(10)
    end = store.recorder.max_notification_id() or 0
    wait_until(lambda: log.position() == end, 60, "every event to be sequenced")
    wait_until(
        lambda: (c := log.latest_checkpoint()) is not None and c.size == log.size(), 30, "a checkpoint of all"
    )
    assert second.stop() == 0, cluster.logs()
    assert "sequencer is the leader" in second.log()

    positions, hashes = _recomputed_leaf_hashes(store)
    leaves = list(log.leaves())
    assert [leaf.position for leaf in leaves] == positions  # every event once, in log order
    assert [leaf.index for leaf in leaves] == list(range(len(positions)))
    assert [leaf.leaf_hash for leaf in leaves] == hashes
    assert log.tree().root() == tree_head(hashes)

    stored = log.checkpoints()
    assert stored[-1].size == len(hashes)
    for checkpoint in stored:
        text, _ = open_note(checkpoint.note, [key.verifier()])
        parsed = parse_checkpoint(text)
        assert (parsed.origin, parsed.size, parsed.root_hash) == (
            key.name,
            checkpoint.size,
            checkpoint.root_hash,
        )
        assert checkpoint.root_hash == tree_head(hashes[: checkpoint.size])
    for before, after in itertools.pairwise(stored):
        proof = log.consistency_proof(before.size, after.size)
        verify_consistency(before.size, after.size, before.root_hash, after.root_hash, proof)

    names = NatsNames(settings.nats_url, settings.nats_stream, settings.nats_subject_prefix)
    published = asyncio.run(_published_sizes(names))
    assert published == sorted(set(published))  # each once, in order
    # What the killed one stored but did not publish, the second published.
    assert published == [c.size for c in stored], cluster.logs()
