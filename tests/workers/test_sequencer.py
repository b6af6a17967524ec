"""The sequencer: a Merkle tree over every event in log order, appended in gathered batches,
checkpoints signed at the interval when it grew, each published once on NATS for witnesses, by
one leader at a time."""

from __future__ import annotations

import asyncio
import itertools
import logging
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from datetime import UTC, datetime, timedelta
from functools import partial
from pathlib import Path
from typing import Any
from uuid import UUID

import nats
import psycopg
import pytest
from nats.aio.client import Client
from psycopg import sql

from store.evidence.chain import GENESIS, chain_hash, task_uuid
from store.evidence.checkpoints import Checkpoint, parse_checkpoint
from store.evidence.merkle import event_leaf, hash_leaf, tree_head, verify_consistency
from store.evidence.merkle_log import MerkleLog, catch_up
from store.evidence.signed_notes import SignerKey, open_note
from store.log.application import TaskApplication
from store.log.config import MemoryConfig, StoreConfig
from store.log.locks import advisory_key
from store.log.postgres import PostgresRunQueueRecorder
from store.public_form.subjects import NatsNames
from tests.support.processes import until
from tests.support.tasks import new_task
from workers.sequencer import GATHER_S, Sequencer, SequencerUnavailableError, checkpoint_headers

SIGNER = SignerKey.generate("longhaul/sequencer-test")
INTERVAL = 0.2


def now() -> datetime:
    return datetime.now(UTC)


@pytest.fixture
def names(nats_url: str, nats_names: tuple[str, str]) -> NatsNames:
    found = NatsNames(url=nats_url, stream=nats_names[0], subject_prefix=nats_names[1])
    assert found.checkpoint_stream == f"{nats_names[0]}_CHECKPOINTS"  # what tests/conftest.py deletes
    return found


@pytest.fixture
async def client(names: NatsNames) -> AsyncIterator[Client]:
    nc = await nats.connect(names.url)
    yield nc
    await nc.close()


def _log(store: TaskApplication) -> MerkleLog:
    found = store.merkle_log
    assert found is not None
    return found


def _sequencer(
    store: TaskApplication, names: NatsNames, interval: float = INTERVAL, gather: float = GATHER_S
) -> Sequencer:
    return Sequencer(store=store, names=names, signer=SIGNER, clock=now, interval=interval, gather=gather)


def _commit(store: TaskApplication, tasks: int = 2, progress: int = 2) -> None:
    at = now()
    for _ in range(tasks):
        task = new_task(at)
        task.grant_lease(worker="w", now=at, until=at + timedelta(minutes=5))
        for i in range(progress):
            task.report_progress(epoch=task.lease_epoch, now=at, message={"parts": [{"text": f"{i}"}]})
        store.save_tasks(task)


def _commit_each(store: TaskApplication, commits: int) -> None:
    """``commits`` commits of one task each, one after the other."""
    for _ in range(commits):
        _commit(store, tasks=1)


def _log_end(store: TaskApplication) -> int:
    return store.recorder.max_notification_id() or 0


async def _until(check: Callable[[], bool], what: str, seconds: float = 20.0) -> None:
    """``until`` with ``check`` (which reads the database) in a thread."""
    await until(lambda: asyncio.to_thread(check), seconds, what, interval=0.02)


@asynccontextmanager
async def _running(
    sequencer: Sequencer, *, lead: bool = False, stop_within: float = 30.0
) -> AsyncIterator[None]:
    """``sequencer`` running for the block (once it leads, with ``lead``); stopped cleanly at its
    end, which must take less than ``stop_within`` seconds."""
    stop = asyncio.Event()
    running = asyncio.ensure_future(sequencer.run(stop))
    try:
        if lead:
            await _until(lambda: sequencer.leading, "the sequencer to lead")
        yield
    finally:
        stop.set()
        await asyncio.wait_for(running, stop_within)


def _published(sequencer: Sequencer, count: int) -> bool:
    return sequencer.leading and sequencer.published == count


def _covered(log: MerkleLog, store: TaskApplication) -> bool:
    """Whether the latest checkpoint covers every event of the log (none passed over here)."""
    latest = log.latest_checkpoint()
    return latest is not None and latest.size == log.size() == _log_end(store)


def _recomputed_leaf_hashes(store: TaskApplication) -> list[bytes]:
    """Every event's leaf hash, its chain hash recomputed from the stored events, in log order."""
    previous: dict[UUID, bytes] = {}
    hashes = []
    for n in store.recorder.select_notifications(1, 1_000_000):
        task_id = task_uuid(n.originator_id)
        chain = chain_hash(task_id, n.originator_version, n.topic, n.state, previous.get(task_id, GENESIS))
        previous[task_id] = chain
        hashes.append(hash_leaf(event_leaf(task_id, n.originator_version, chain)))
    return hashes


class Witness:
    """A witness on NATS: keeps every checkpoint it is sent, each verified and consistent with the last."""

    def __init__(self, log: MerkleLog) -> None:
        self.log = log
        self.kept: list[Checkpoint] = []
        self.headers: list[dict[str, str]] = []

    async def take(self, msg: Any) -> None:
        text, keys = open_note(msg.data, [SIGNER.verifier()])  # raises unless signed by the key
        assert keys == [SIGNER.verifier()]
        checkpoint = parse_checkpoint(text)
        assert checkpoint.origin == SIGNER.name
        if self.kept:
            last = self.kept[-1]
            assert checkpoint.size > last.size
            proof = await asyncio.to_thread(self.log.consistency_proof, last.size, checkpoint.size)
            verify_consistency(last.size, checkpoint.size, last.root_hash, checkpoint.root_hash, proof)
        self.kept.append(checkpoint)
        self.headers.append(dict(msg.headers or {}))


async def _stream_checkpoints(client: Client, names: NatsNames) -> list[Any]:
    """What a witness that starts late reads: every message the checkpoint stream holds, in order."""
    js = client.jetstream()
    info = await js.stream_info(names.checkpoint_stream)
    return [await js.get_msg(names.checkpoint_stream, seq) for seq in range(1, info.state.last_seq + 1)]


async def test_follows_the_log_signs_at_the_interval_and_every_checkpoint_reaches_a_witness(
    store: TaskApplication, names: NatsNames, client: Client
) -> None:
    log = _log(store)
    witness = Witness(log)
    await client.subscribe(names.checkpoint_subject, cb=witness.take)
    _commit(store)  # a backlog before it starts
    sequencer = _sequencer(store, names)
    async with _running(sequencer):
        await _until(lambda: _covered(log, store), "a checkpoint of the backlog")
        for _ in range(3):  # appends while it runs, each followed by a checkpoint
            _commit(store, tasks=1)
            await _until(lambda: _covered(log, store), "a checkpoint of every event")
        quiet = sequencer.signed
        await asyncio.sleep(5 * INTERVAL)  # nothing new: nothing signed
        assert sequencer.signed == quiet
    await _until(lambda: len(witness.kept) == sequencer.signed, "the witness to get every checkpoint")

    hashes = _recomputed_leaf_hashes(store)
    assert len(hashes) == log.size() == sequencer.sequenced == 4 * 5
    assert log.tree().root() == tree_head(hashes)
    assert [(leaf.position, leaf.index) for leaf in log.leaves()] == [
        (n.id, i) for i, n in enumerate(store.recorder.select_notifications(1, 1000))
    ]
    stored = log.checkpoints()
    assert [c.size for c in stored] == [c.size for c in witness.kept]
    assert sequencer.signed == len(stored)
    assert sequencer.last_signed == stored[-1]
    assert len(stored) >= 4  # the backlog, then one per append
    for checkpoint in stored:
        assert checkpoint.root_hash == tree_head(hashes[: checkpoint.size])
    # One interval at least between two checkpoints signed while running.
    gaps = [(b.signed_at - a.signed_at).total_seconds() for a, b in itertools.pairwise(stored)]
    assert min(gaps) >= INTERVAL * 0.95, gaps
    assert witness.headers[0]["Nats-Msg-Id"] == f"checkpoint:{stored[0].size}"
    assert witness.headers[0]["Longhaul-Tree-Size"] == str(stored[0].size)
    assert witness.headers[0]["Longhaul-Origin"] == SIGNER.name
    assert witness.headers[0]["Longhaul-Root"] == stored[0].root_hash.hex()

    # A witness that starts late reads them all from the stream, once each.
    late = Witness(log)
    for msg in await _stream_checkpoints(client, names):
        await late.take(msg)
    assert [c.size for c in late.kept] == [c.size for c in stored]


async def test_a_clean_stop_signs_what_was_sequenced(store: TaskApplication, names: NatsNames) -> None:
    log = _log(store)
    _commit(store, tasks=1)
    sequencer = _sequencer(store, names, interval=3600)  # never at the interval
    async with _running(sequencer):
        await _until(lambda: log.position() == _log_end(store), "the log to be sequenced")
        assert log.latest_checkpoint() is None
    latest = log.latest_checkpoint()
    assert latest is not None
    assert latest.size == 4
    assert sequencer.published == 1


async def test_a_checkpoint_stored_but_not_published_is_published_on_the_next_start_once(
    store: TaskApplication, names: NatsNames, client: Client
) -> None:
    log = _log(store)
    _commit(store, tasks=1)
    # A sequencer that stored a checkpoint and died before publishing it: the stream lacks it.
    first = catch_up(log, store.recorder.select_notifications, SIGNER, now())
    assert first is not None
    for expected in (1, 0):  # the second start finds it published, and publishes nothing again
        sequencer = _sequencer(store, names, interval=3600)
        async with _running(sequencer):
            await _until(partial(_published, sequencer, expected), "the publisher")
            await asyncio.sleep(0.5)
        assert sequencer.published == expected
    messages = await _stream_checkpoints(client, names)
    assert [m.data.decode() for m in messages] == [first.note]
    # A re-publish after a crash (the same checkpoint again) is dropped by its Nats-Msg-Id.
    js = client.jetstream()
    stored = log.checkpoints()[0]
    ack = await js.publish(
        names.checkpoint_subject, stored.note.encode(), headers=checkpoint_headers(stored, SIGNER.name)
    )
    assert ack.duplicate
    assert len(await _stream_checkpoints(client, names)) == 1


async def test_only_one_sequencer_leads_and_a_standby_takes_over(
    store: TaskApplication, names: NatsNames
) -> None:
    log = _log(store)
    _commit(store, tasks=1)
    leader, standby = _sequencer(store, names), _sequencer(store, names)
    stop_leader, stop_standby = asyncio.Event(), asyncio.Event()
    leading = asyncio.ensure_future(leader.run(stop_leader))
    await _until(lambda: leader.leading, "the first to lead")
    waiting = asyncio.ensure_future(standby.run(stop_standby))
    await _until(lambda: log.position() == _log_end(store), "the log to be sequenced")
    _commit(store, tasks=1)
    await _until(lambda: log.position() == _log_end(store), "the new events to be sequenced")
    await asyncio.sleep(3 * INTERVAL)
    assert not standby.leading
    assert standby.sequenced == 0
    assert standby.signed == 0
    stop_leader.set()
    await leading
    _commit(store, tasks=1)
    await _until(lambda: standby.leading and log.position() == _log_end(store), "the standby to take over")
    stop_standby.set()
    await waiting
    assert leader.sequenced + standby.sequenced == log.size() == 12
    assert standby.sequenced == 4  # only what is new to the tree
    sizes = [c.size for c in log.checkpoints()]
    assert sizes == sorted(set(sizes))
    assert sizes[-1] == 12
    assert log.tree().root() == tree_head(_recomputed_leaf_hashes(store))


async def test_an_event_without_a_chain_hash_is_passed_over_with_a_warning(
    store: TaskApplication, names: NatsNames, caplog: pytest.LogCaptureFixture
) -> None:
    log = _log(store)
    _commit(store, tasks=1, progress=0)
    assert isinstance(store.config, StoreConfig)
    with psycopg.connect(store.config.database_url, autocommit=True) as conn:  # behind longhaul's back
        conn.execute(
            sql.SQL("DELETE FROM {} WHERE version = 2").format(
                sql.Identifier(store.config.schema, "longhaul_event_chain")
            )
        )
    sequencer = _sequencer(store, names)
    with caplog.at_level(logging.WARNING, logger="workers.sequencer"):
        async with _running(sequencer):
            await _until(lambda: log.position() == _log_end(store) == 2, "the log to be sequenced")
    assert log.size() == 1
    assert sequencer.passed_over == 1
    assert [leaf.version for leaf in log.leaves()] == [1]
    warned = [r.getMessage() for r in caplog.records if "no chain hash" in r.getMessage()]
    assert len(warned) == 1
    assert "log position 2" in warned[0]


async def test_an_event_longhaul_did_not_append_is_passed_over_counted_and_the_sequencer_goes_on(
    store: TaskApplication, names: NatsNames, caplog: pytest.LogCaptureFixture
) -> None:
    """A row inserted behind longhaul's back, with a topic and state no mapper can decode, between
    two tasks' commits: no leaf, one warning, counted; the events after it are leaves."""
    log = _log(store)
    sequencer = _sequencer(store, names, gather=0)
    with caplog.at_level(logging.WARNING, logger="workers.sequencer"):
        async with _running(sequencer, lead=True):
            _commit(store, tasks=1, progress=0)
            await _until(lambda: log.position() == _log_end(store) == 2, "the first task to be sequenced")
            assert isinstance(store.config, StoreConfig)
            stranger = UUID(int=7)
            with psycopg.connect(store.config.database_url, autocommit=True) as conn:
                conn.execute(
                    sql.SQL(
                        "INSERT INTO {} (originator_id, originator_version, topic, state)"
                        " VALUES (%s, 1, %s, %s)"
                    ).format(sql.Identifier(store.config.schema, "longhaul_events")),
                    (stranger, "not.a.module:NoSuchEvent", b"\xff not json"),
                )
            bad = _log_end(store)
            _commit(store, tasks=1, progress=0)
            await _until(lambda: log.position() == _log_end(store) == 5, "the second task to be sequenced")
            _commit(store, tasks=1, progress=0)
            await _until(lambda: log.position() == _log_end(store) == 7, "the third task to be sequenced")
    assert bad == 3
    assert sequencer.passed_over == 1
    assert sequencer.sequenced == log.size() == 6
    assert [leaf.position for leaf in log.leaves()] == [1, 2, 4, 5, 6, 7]
    assert stranger not in {leaf.task_id for leaf in log.leaves()}
    warned = [r.getMessage() for r in caplog.records if "passed over" in r.getMessage()]
    assert len(warned) == 1
    assert f"log position 3 (task {stranger} version 1): it has no chain hash" in warned[0]
    assert "sequencer failed" not in caplog.text
    latest = log.latest_checkpoint()
    assert latest is not None
    assert latest.size == 6


async def test_a_gather_joins_the_commits_made_within_it_into_one_append(
    store: TaskApplication, names: NatsNames
) -> None:
    log = _log(store)
    sequencer = _sequencer(store, names, interval=3600, gather=5.0)
    async with _running(sequencer, lead=True):
        # Five commits of one task each (4 events), one after the other, in one thread hop: a
        # few milliseconds each, well inside the window even on a loaded machine.
        await asyncio.to_thread(_commit_each, store, 5)
        assert log.position() == 0  # taken, gathering: nothing recorded yet
        await _until(lambda: log.position() == _log_end(store) == 20, "the gathered batch to be appended")
        assert sequencer.appends == 1
        assert log.size() == sequencer.sequenced == 20
        _commit(store, tasks=1)  # a gather starts again at the next event
        await _until(lambda: log.position() == _log_end(store) == 24, "the next batch")
        assert sequencer.appends == 2
    assert log.tree().root() == tree_head(_recomputed_leaf_hashes(store))


async def test_a_gather_ends_when_the_checkpoint_is_due_and_the_checkpoint_covers_it(
    store: TaskApplication, names: NatsNames
) -> None:
    """A gather window far longer than the interval: each checkpoint is still signed at its
    interval, after what was gathered until then is appended."""
    log = _log(store)
    sequencer = _sequencer(store, names, interval=0.5, gather=600)
    async with _running(sequencer, lead=True):
        for round_ in range(1, 4):
            _commit(store, tasks=1)
            await _until(lambda: _covered(log, store), "a checkpoint of what was gathered", seconds=10)
            assert log.size() == 4 * round_
            assert sequencer.appends == round_  # one gather each, cut short by the checkpoint
            assert sequencer.last_signed is not None
            assert sequencer.last_signed.size == 4 * round_


async def test_a_clean_stop_mid_gather_appends_and_signs_what_was_taken(
    store: TaskApplication, names: NatsNames
) -> None:
    log = _log(store)
    sequencer = _sequencer(store, names, interval=3600, gather=600)
    async with _running(sequencer, lead=True, stop_within=10):  # the gather does not hold the stop
        _commit(store, tasks=2)
        await asyncio.sleep(0.5)  # taken by now, and gathering for ten minutes
        assert log.position() == 0
    assert log.position() == _log_end(store) == 8
    latest = log.latest_checkpoint()
    assert latest is not None
    assert latest.size == log.size() == 8
    assert sequencer.appends == sequencer.signed == sequencer.published == 1


async def test_a_sequencer_that_dies_mid_gather_loses_nothing(
    store: TaskApplication, names: NatsNames
) -> None:
    """Cancelled while it gathers (no clean stop: nothing appended, nothing signed), the next
    sequencer takes the same events again from the stored position: each a leaf once."""
    log = _log(store)
    _commit(store, tasks=1)
    before = catch_up(log, store.recorder.select_notifications, SIGNER, now())  # a tree of 4 leaves
    assert before is not None
    first = _sequencer(store, names, interval=3600, gather=600)
    running = asyncio.ensure_future(first.run(asyncio.Event()))
    await _until(lambda: first.leading, "the sequencer to lead")
    _commit(store, tasks=1)
    await asyncio.sleep(0.5)  # taken by now, and gathering for ten minutes
    running.cancel()
    with pytest.raises(asyncio.CancelledError):
        await running
    assert first.appends == first.signed == 0
    assert log.position() == log.size() == 4  # what it gathered was not recorded
    assert log.latest_checkpoint() == before
    second = _sequencer(store, names, interval=3600, gather=0)
    async with _running(second):
        await _until(lambda: log.position() == _log_end(store) == 8, "the second to take over")
    assert second.sequenced == 4
    assert [leaf.position for leaf in log.leaves()] == list(range(1, 9))
    assert log.tree().root() == tree_head(_recomputed_leaf_hashes(store))


def test_a_sequencer_over_an_in_memory_store_refuses_to_start(names: NatsNames) -> None:
    store = TaskApplication(MemoryConfig())
    with pytest.raises(SequencerUnavailableError, match="LONGHAUL_STORE=postgres"):
        _sequencer(store, names)
    store.close()


async def test_the_checkpoints_have_a_stream_of_their_own_that_keeps_them_all(
    names: NatsNames, client: Client, store: TaskApplication
) -> None:
    _commit(store, tasks=1)
    sequencer = _sequencer(store, names)
    async with _running(sequencer):
        await _until(lambda: sequencer.published == 1, "the first checkpoint to be published")
    info = await client.jetstream().stream_info(names.checkpoint_stream)
    assert info.config.subjects == [names.checkpoint_subject] == [f"{names.subject_prefix}.checkpoints"]
    assert not info.config.max_age  # every checkpoint kept, whatever LONGHAUL_NATS_MAX_AGE is
    assert info.state.messages == 1


def test_the_command_refuses_an_in_memory_store(
    cli: Callable[..., tuple[int, str, str]], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("LONGHAUL_STORE", "memory")
    code, _, err = cli("sequencer")
    assert code == 1
    assert "the sequencer needs LONGHAUL_STORE=postgres" in err


def test_the_command_refuses_to_start_without_the_audit_key(
    cli: Callable[..., tuple[int, str, str]],
    monkeypatch: pytest.MonkeyPatch,
    nats_url: str,
    tmp_path: Path,
) -> None:
    monkeypatch.setenv("LONGHAUL_NATS_URL", nats_url)
    monkeypatch.setenv("LONGHAUL_DATA_DIR", str(tmp_path))
    code, _, err = cli("sequencer")
    assert code == 1
    assert str(tmp_path / "audit-key") in err
    assert "LONGHAUL_AUDIT_KEY_FILE is unset" in err
    assert not (tmp_path / "audit-key").exists()  # never made outside `up`


async def test_it_starts_over_from_the_stored_tree_when_its_database_connections_are_cut(
    store: TaskApplication, names: NatsNames, caplog: pytest.LogCaptureFixture
) -> None:
    """The leader's lock connection and the log subscription's LISTEN are killed: it leads again."""
    log = _log(store)
    _commit(store, tasks=1)
    sequencer = _sequencer(store, names)
    assert isinstance(store.config, StoreConfig)
    recorder = store.recorder
    assert isinstance(recorder, PostgresRunQueueRecorder)
    key = advisory_key(f"sequencer:{store.config.schema}")
    async with _running(sequencer):
        await _until(lambda: _covered(log, store), "the first checkpoint")
        async with await psycopg.AsyncConnection.connect(store.config.database_url, autocommit=True) as conn:
            cursor = await conn.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
                " WHERE query = %s OR pid IN (SELECT pid FROM pg_locks WHERE locktype = 'advisory'"
                " AND classid::text::bigint = %s AND objid::text::bigint = %s)",
                (f'LISTEN "{recorder.channel_name}"', (key >> 32) & 0xFFFFFFFF, key & 0xFFFFFFFF),
            )
            assert len(await cursor.fetchall()) == 2  # the leader's connection and the LISTEN
        with caplog.at_level(logging.WARNING, logger="workers.sequencer"):
            _commit(store, tasks=1)
            await _until(lambda: _covered(log, store) and log.size() == 8, "a checkpoint after the restart")
    assert "sequencer failed" in caplog.text
    assert [leaf.position for leaf in log.leaves()] == list(range(1, 9))
    assert log.tree().root() == tree_head(_recomputed_leaf_hashes(store))
