"""The sequencer: keeps the Merkle tree over every event, in log order, and signs checkpoints of it.

It follows the notification log (``projections.log_follower``, as the relay does) from the Merkle
log's stored position (``store.evidence.merkle_log``) and appends the events as leaves in gathered
batches: once the first events of a batch arrive it keeps taking what arrives for ``gather``
seconds (``LONGHAUL_SEQUENCER_GATHER_SECONDS``, or until 500 events), then appends them all,
leaves, subtrees and the new position, in one transaction (ADR 0046: at one task at a time that
is one transaction for several commits instead of one each). The position is recorded only with
the leaves, so a sequencer stopped anywhere, mid-gather too, resumes at a consistent tree and
loses nothing. An event without a chain hash (not appended by longhaul) is passed over with a
warning and counted (``passed_over``), and the sequencer goes on.

Every ``interval`` seconds, if the tree grew, it signs a checkpoint (C2SP tlog-checkpoint in a
signed note, Ed25519), stores it, and only then publishes it on NATS JetStream
(``<prefix>.checkpoints``, a stream of its own: ADR 0029), so a publish that fails loses nothing.
The publisher reads the last checkpoint the stream holds and publishes every stored one above it,
each with ``Nats-Msg-Id`` ``checkpoint:<tree size>``: after a crash the repeats are dropped, and
what was stored but never published goes out on the next start. A batch taken is appended before
any checkpoint is signed, so a checkpoint covers every event taken before it (a gather that
starts shortly before the checkpoint is due may delay it by up to ``gather``); on a clean stop
the batch gathered so far is appended, then signed and published.

Only one sequencer is active at a time (a PostgreSQL advisory lock); others wait as hot standbys.
Every failure starts it over with the restart pause of ``store.log.retry``, re-reading the tree. It
needs a store on PostgreSQL: over an in-memory store it refuses to start.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
from collections.abc import Sequence
from datetime import timedelta
from typing import Any

import nats
from eventsourcing.persistence import Notification
from nats.js.errors import NotFoundError

from domain.clock import Clock
from projections.log_follower import LogFollower
from projections.shared_log import SharedLog
from store.evidence import MerkleLog, MerkleTree, SignerKey, StoredCheckpoint, task_uuid
from store.log import RESTART_POLICY, StoreConfig, TaskApplication, advisory_key, leading
from store.public_form import NatsNames
from workers.leadership import restarting
from workers.relay import NATS_CONNECT_S, PUBLISH_TIMEOUT_S, StreamLimits, ensure_stream_named

log = logging.getLogger(__name__)

IDLE_WAIT_S = 1.0
"""The longest the sequencer waits for the next event before looking at the clock again."""
GATHER_S = 0.5
"""How long, by default, a batch gathers events after its first (``LONGHAUL_SEQUENCER_GATHER_SECONDS``)."""
SIZE_HEADER = "Longhaul-Tree-Size"
ORIGIN_HEADER = "Longhaul-Origin"
ROOT_HEADER = "Longhaul-Root"


class SequencerUnavailableError(RuntimeError):
    """The store is not on PostgreSQL: there is no log to follow nor a Merkle log to keep."""


def checkpoint_headers(checkpoint: StoredCheckpoint, origin: str) -> dict[str, str]:
    """The headers of a checkpoint's NATS message (``docs/events.md``, Checkpoint messages)."""
    return {
        "Nats-Msg-Id": f"checkpoint:{checkpoint.size}",
        SIZE_HEADER: str(checkpoint.size),
        ORIGIN_HEADER: origin,
        ROOT_HEADER: checkpoint.root_hash.hex(),
    }


class Sequencer:
    """Sequences the log into the Merkle log, signs checkpoints and publishes them."""

    def __init__(
        self,
        *,
        store: TaskApplication,
        names: NatsNames,
        signer: SignerKey,
        clock: Clock,
        interval: float = 10.0,
        gather: float = GATHER_S,
        limits: StreamLimits | None = None,
        shared_log: SharedLog | None = None,
    ) -> None:
        merkle_log = store.merkle_log
        if not isinstance(store.config, StoreConfig) or merkle_log is None:
            raise SequencerUnavailableError(
                "the sequencer needs the store on PostgreSQL (LONGHAUL_STORE=postgres): an in-memory "
                "store lives inside one process, with no Merkle log, position or leader lock to share"
            )
        self.store = store
        self.log: MerkleLog = merkle_log
        self.names = names
        self.signer = signer
        self.clock = clock
        self.interval = timedelta(seconds=interval)
        self.gather = gather
        self.shared_log = shared_log
        """The shared subscription to follow the log on (``up``'s), or ``None`` for one of its own."""
        # The stream keeps every checkpoint (no max_age): a witness that starts late reads them all.
        self.limits = StreamLimits(max_age=timedelta(0), replicas=(limits or StreamLimits()).replicas)
        self._database_url = store.config.database_url
        self._lock_key = advisory_key(f"sequencer:{store.config.schema}")
        self.sequenced = 0
        """Events this process appended as leaves (passed-over ones not counted)."""
        self.passed_over = 0
        """Events this process passed over (not appended by longhaul: no chain hash, or a leaf already)."""
        self.appends = 0
        """Transactions this process appended leaves in (one per gathered batch)."""
        self.signed = 0
        """Checkpoints this process signed (and stored)."""
        self.last_signed: StoredCheckpoint | None = None
        self.published = 0
        """Checkpoint messages this process had acknowledged by JetStream (repeats included)."""
        self.leading = False

    async def run(self, stop: asyncio.Event) -> None:
        """Sequence until ``stop`` is set: wait to lead, sequence, and start over after any failure."""
        await restarting("sequencer", lambda: self._lead_and_sequence(stop), stop, log)

    async def _lead_and_sequence(self, stop: asyncio.Event) -> None:
        async with leading(self._database_url, self._lock_key, stop) as leader:
            if leader is None:
                return
            log.info("sequencer is the leader (checkpoints signed by %s)", self.signer.name)
            self.leading = True
            try:
                await self._lead(stop)
            finally:
                self.leading = False

    async def _lead(self, stop: asyncio.Event) -> None:
        """Sequence and sign beside a publisher; when sequencing ends, the publisher publishes the rest."""
        wake, finished = asyncio.Event(), asyncio.Event()
        publishing = asyncio.ensure_future(self._publish_all(wake, finished))
        try:
            await self._sequence(stop, wake)
        finally:
            finished.set()
            await publishing

    async def _sequence(self, stop: asyncio.Event, wake: asyncio.Event) -> None:
        tree = await asyncio.to_thread(self.log.tree)
        position = await asyncio.to_thread(self.log.position)
        async with LogFollower(self.store, after=position, shared_log=self.shared_log) as follower:
            due = self.clock() + self.interval
            while not stop.is_set():
                left = max(0.0, (due - self.clock()).total_seconds())
                batch = await follower.next_notifications(
                    min(IDLE_WAIT_S, left), stop, gather_s=min(self.gather, left)
                )
                if batch:
                    tree = await self._append(tree, batch)
                if self.clock() >= due:
                    await self._sign(tree, wake)
                    due = self.clock() + self.interval
            await self._sign(tree, wake)  # a clean stop: what was taken is appended, and signed

    async def _append(self, tree: MerkleTree, batch: Sequence[Notification]) -> MerkleTree:
        """The leaves of ``batch``: position, task and version are the stored event's own, not decoded."""
        events = [(n.id, task_uuid(n.originator_id), n.originator_version) for n in batch]
        grown, passed = await asyncio.to_thread(self.log.append, tree, events)
        for skipped in passed:
            log.warning(
                "log position %d (task %s version %d): %s: passed over, not in the Merkle tree"
                " (not appended by longhaul; `longhaul verify` reports it)",
                skipped.position,
                skipped.task_id,
                skipped.version,
                skipped.reason,
            )
        self.sequenced += grown.size - tree.size
        self.passed_over += len(passed)
        self.appends += 1
        return grown

    async def _sign(self, tree: MerkleTree, wake: asyncio.Event) -> None:
        signed = await asyncio.to_thread(self.log.sign, tree, self.signer, self.clock())
        if signed is None:
            return
        self.signed += 1
        self.last_signed = signed
        log.info("checkpoint signed: tree size %d, root %s…", signed.size, signed.root_hash.hex()[:16])
        wake.set()

    # ------------------------------------------------------------------ publishing

    async def _publish_all(self, wake: asyncio.Event, finished: asyncio.Event) -> None:
        """Publish every stored checkpoint the stream lacks, whenever one is signed, until ``finished``.

        A failure (NATS down) is retried with the restart pause, beside the sequencing, which goes
        on: checkpoints are stored first. Once ``finished``, one last round publishes what is left;
        if that fails too, the next sequencer to lead publishes it.
        """
        failures = 0
        while True:
            try:
                await self._publish_while(wake, finished)
                return
            except Exception as error:  # noqa: BLE001 - NATS trouble: the checkpoints are stored
                if finished.is_set():
                    log.warning(
                        "checkpoints not published (%r): the next sequencer to lead publishes them", error
                    )
                    return
                failures += 1
                pause = RESTART_POLICY.delay(failures, random.random)
                log.warning("checkpoint publishing failed (%r); again in %.1fs", error, pause)
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(finished.wait(), pause)

    async def _publish_while(self, wake: asyncio.Event, finished: asyncio.Event) -> None:
        # With unlimited reconnects nats-py retries the first connect forever: bound it here.
        nc = await asyncio.wait_for(nats.connect(self.names.urls, max_reconnect_attempts=-1), NATS_CONNECT_S)
        try:
            js = nc.jetstream()
            await ensure_stream_named(
                js, self.names.checkpoint_stream, self.names.checkpoint_subject, self.limits
            )
            published = await self.last_published(js)
            while True:
                wake.clear()
                published = await self._publish_after(js, published)
                if finished.is_set():
                    return
                waits = [asyncio.ensure_future(wake.wait()), asyncio.ensure_future(finished.wait())]
                _, pending = await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
                for waiting in pending:
                    waiting.cancel()
        finally:
            await nc.close()

    async def last_published(self, js: Any) -> int:
        """The tree size of the last checkpoint the stream holds (0 when it holds none)."""
        try:
            last = await js.get_last_msg(self.names.checkpoint_stream, self.names.checkpoint_subject)
        except NotFoundError:
            return 0
        return int((last.headers or {}).get(SIZE_HEADER, 0))

    async def _publish_after(self, js: Any, published: int) -> int:
        """Publish the stored checkpoints larger than ``published``, in order; the last size published."""
        for checkpoint in await asyncio.to_thread(self.log.checkpoints, published):
            await js.publish(
                self.names.checkpoint_subject,
                checkpoint.note.encode(),
                headers=checkpoint_headers(checkpoint, self.signer.name),
                stream=self.names.checkpoint_stream,
                timeout=PUBLISH_TIMEOUT_S,
            )
            self.published += 1
            published = checkpoint.size
        return published
