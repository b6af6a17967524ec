"""The worker: claims runnable tasks under a lease and runs them, up to a concurrency limit.

A gateway in the same process (``longhaul up``) may hand a task it submits straight to a free
slot (``Worker.reserve``, ADR 0032): the lease is granted in the submission's own commit
(``TaskApplication.submit_leased``) and the runner starts without a claim. With every slot
taken, it may wait briefly for the next one (``Worker.reserve_within``, ADR 0054).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import random
from collections import deque
from dataclasses import dataclass
from datetime import datetime
from uuid import UUID

from domain.clock import Clock
from domain.errors import DomainError, LeaseLostError
from domain.skill import SkillRegistry, StepOutcome, UnknownSkillError
from domain.states import TaskState
from domain.task import Task, lease_end
from store.log import ConflictError, TaskApplication, retry_lost_connection
from workers.committer import Committer
from workers.lease import LeasedTask
from workers.metrics import WorkerMetrics
from workers.pacing import ClockPacing, Pacing
from workers.skill_versions import check_release
from workers.step_files import StepFiles
from workers.task_runner import RunPolicy, TaskRunner
from workers.wakeup import Expectation, Wakeup

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class WorkerConfig:
    """A worker's identity and limits."""

    worker_id: str
    lease_seconds: float
    concurrency: int
    grace_seconds: float
    poll_seconds: float = 1.0
    watch_seconds: float = 0.25


class Worker:
    """Claims tasks (``LeaseGranted`` at the version read) and runs each in its own coroutine."""

    def __init__(
        self,
        *,
        store: TaskApplication,
        registry: SkillRegistry,
        clock: Clock,
        config: WorkerConfig,
        policy: RunPolicy,
        metrics: WorkerMetrics | None = None,
        pacing: Pacing | None = None,
        files: StepFiles | None = None,
    ) -> None:
        self.store = store
        self.files = files
        """Where steps keep the files they write (``emit_file``); None: steps cannot."""
        self.pacing = pacing if pacing is not None else ClockPacing(clock)
        self.abandoned: set[asyncio.Task[StepOutcome]] = set()
        """Steps that ignored their cancellation after a timeout, still running (see ``TaskRunner``)."""
        self.metrics = metrics
        self.registry = registry
        self.clock = clock
        self.config = config
        self.policy = policy
        self.draining = asyncio.Event()
        self.runners: dict[UUID, TaskRunner] = {}
        self._slot_freed = asyncio.Event()
        # The worker's own commits are announced to its wake-up: their NOTIFYs wake nobody.
        self._wakeup = Wakeup(store.run_queue)
        self.committer = Committer(store, wakeup=self._wakeup)
        # Claims race with other workers' claims; grouped apart from step commits, a lost claim
        # never splits a group of step commits.
        self.claim_committer = Committer(store, wakeup=self._wakeup)
        self._skills = [(s.name, s.version) for s in registry.all()]
        self._look = True
        """Whether the run queue's head may hold a task to claim that the last read did not take:
        set by a wake-up (another's append), the poll, and a read that left candidates behind."""
        self._next_end: datetime | None = None
        self._next_end_known = False
        """``next_lease_end`` as last read; read again after a wake-up or the poll."""
        self._running = False
        self._reserved = 0
        """Slots reserved for tasks a gateway of this process is submitting (``reserve``)."""
        self._slot_waiters: deque[asyncio.Future[Reservation | None]] = deque()
        """Submissions waiting for a slot (``reserve_within``), oldest first."""

    @property
    def running(self) -> bool:
        """Whether ``run`` passed its release check and claims tasks (until it stops)."""
        return self._running

    async def run(self, stop: asyncio.Event) -> None:
        """Claim and run tasks until ``stop`` is set, then drain (see ``_drain``)."""
        await asyncio.to_thread(check_release, self.store, self.registry)
        self._wakeup.start()
        watcher = asyncio.ensure_future(self._watch())
        log.info("worker %s started (concurrency %d)", self.config.worker_id, self.config.concurrency)
        self._running = True
        try:
            while not stop.is_set():
                claimed = await self._claim_some()
                if claimed:
                    continue
                await self._idle(stop)
        finally:
            self._running = False
            self._serve_waiters()  # not running: each is answered None, its task goes to the queue
            await self._drain()
            watcher.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await watcher
            await self._wakeup.stop()
            log.info("worker %s stopped", self.config.worker_id)

    # ------------------------------------------------------------------ claiming

    async def _claim_some(self) -> int:
        free = self.config.concurrency - len(self.runners) - self._reserved
        if free <= 0 or not self._look:  # nothing appended by others since the last read took all
            return 0
        self._look = False  # before the read: an append during it wakes the loop again
        now = self.clock()
        claimable = functools.partial(self.store.run_queue.claimable, now, free * 4, self._skills)
        found = await asyncio.to_thread(retry_lost_connection, claimable)
        candidates = [c for c in found if c not in self.runners]
        if len(found) >= free * 4 or len(candidates) > free:
            self._look = True  # more than this round takes: read again when a slot is free
        # Workers read the same queue head: pick at random among it so they rarely collide.
        chosen = random.sample(candidates, min(free, len(candidates)))
        if not chosen:  # woken by an append that left nothing to claim (a handed-off task's, say)
            return 0
        load = functools.partial(self.store.get_many, chosen)  # two queries for them all
        loaded = await asyncio.to_thread(retry_lost_connection, load)
        leases = await asyncio.gather(*(self._claim(task) for task in loaded.values()))
        if len(loaded) < len(chosen) or None in leases:
            self._look = True  # a claim lost (or a task gone): the head may hold others
        for lease in leases:
            if lease is not None:
                if self.metrics is not None:
                    self.metrics.claimed(lease.task.skill)
                self._start(lease)
        return sum(lease is not None for lease in leases)

    async def _claim(self, task: Task) -> LeasedTask | None:
        """Append ``LeaseGranted`` at the version read; ``None`` if anyone else got there first."""
        try:
            now = self.clock()
            if not self.registry.has(task.skill, task.skill_version):
                log.error(
                    "task %s needs %s v%d, not in this release", task.id, task.skill, task.skill_version
                )
                return None
            failed_before = len(task.failed_attempts)
            epoch = await self.store.claim(
                task,
                worker=self.config.worker_id,
                now=now,
                until=lease_end(now, self.config.lease_seconds),
                save=self.claim_committer.save,
            )
        except (ConflictError, DomainError):
            return None
        if len(task.failed_attempts) > failed_before:  # the claim recorded a lost worker's attempt
            log.warning(
                "task %s step %d: attempt %d failed (lease_lost): %s",
                task.id,
                task.next_step,
                len(task.failed_attempts),
                task.last_failure,
            )
            if self.metrics is not None:
                self.metrics.attempt_failed(task.skill, "lease_lost")
        return LeasedTask(
            store=self.store,
            committer=self.committer,
            task=task,
            epoch=epoch,
            clock=self.clock,
            lease_seconds=self.config.lease_seconds,
        )

    # ------------------------------------------------------------------ hand-off from the gateway

    def reserve(self, skill: str, version: int) -> Reservation | None:
        """A free slot for a task of ``skill`` v``version`` about to be submitted, if there is one.

        None while the worker is not running (or drains), when every slot is taken or reserved,
        or for a skill version it does not run. The caller grants the lease to ``worker_id`` in
        the submission's commit, then starts the runner (``Reservation.start``) or gives the slot
        back (``Reservation.release``).
        """
        if not self._takes(skill, version):
            return None
        if len(self.runners) + self._reserved >= self.config.concurrency:
            return None
        self._reserved += 1
        return Reservation(self, self._wakeup.expect())  # its commit's NOTIFY is this worker's own

    def reserve_idle(self, skill: str, version: int) -> Reservation | None:
        """``reserve``, only while this worker is idle; None while it is not.

        Idle: no runner, no slot reserved, and nothing in the run queue known to claim (so no
        submission waits for a slot either: one waits only while the slots are taken or the
        queue comes first). For a stream's new task (ADR 0055): on an idle worker it starts with
        no claim, queue read or load; on a busy one it goes to the run queue, whose claims take
        several tasks at once.
        """
        if self.runners or self._reserved or self._look:
            return None
        return self.reserve(skill, version)

    async def reserve_within(self, skill: str, version: int, seconds: float) -> Reservation | None:
        """``reserve``, waiting up to ``seconds`` for a slot when every slot is taken.

        A slot freed while nothing is known to wait in the run queue (no other's append since the
        last claim round took all) goes to the oldest waiting submission; otherwise to the claim
        loop, so queued tasks are never passed over for long: a submission that waited in vain
        goes to the queue, and its append sends the next freed slot to the claim loop. Nothing is
        committed while a submission waits, so a crash loses no task: its caller had no answer.
        """
        if not self._takes(skill, version):
            return None
        if not self._slot_waiters:
            reservation = self.reserve(skill, version)
            if reservation is not None:
                return reservation
        waiter: asyncio.Future[Reservation | None] = asyncio.get_running_loop().create_future()
        self._slot_waiters.append(waiter)
        given = None
        try:
            async with asyncio.timeout(seconds):
                given = await waiter
        except TimeoutError:
            pass
        finally:
            if given is None:  # the wait ended, or its caller went away: a slot given meanwhile goes back
                self._withdraw(waiter)
        return given

    def _takes(self, skill: str, version: int) -> bool:
        """Whether this worker runs and takes handed-off tasks of ``skill`` v``version``."""
        return self._running and not self.draining.is_set() and self.registry.has(skill, version)

    def _withdraw(self, waiter: asyncio.Future[Reservation | None]) -> None:
        if not waiter.done():
            waiter.cancel()
        with contextlib.suppress(ValueError):
            self._slot_waiters.remove(waiter)
        if not waiter.cancelled() and (given := waiter.result()) is not None:
            given.release()

    def _serve_waiters(self) -> None:
        """Give free slots to waiting submissions while the run queue holds nothing known to claim."""
        while self._slot_waiters:
            refused = not self._running or self.draining.is_set()
            if not refused and (self._look or len(self.runners) + self._reserved >= self.config.concurrency):
                return
            waiter = self._slot_waiters.popleft()
            if waiter.done():
                continue
            if refused:
                waiter.set_result(None)
                continue
            self._reserved += 1
            waiter.set_result(Reservation(self, self._wakeup.expect()))

    def _slot_free(self) -> None:
        """A slot was freed: to a waiting submission (``_serve_waiters``), else to the claim loop."""
        self._serve_waiters()
        if not self._running or len(self.runners) + self._reserved < self.config.concurrency:
            self._slot_freed.set()  # the claim loop's (or the drain's) to take

    def _unreserve(self) -> None:
        self._reserved -= 1
        self._slot_free()

    def _start_handed(self, task: Task) -> asyncio.Future[None] | None:
        """Run ``task``, whose lease this worker was granted in its submission's commit."""
        self._reserved -= 1  # the slot turns into a runner: nothing freed, no claim round to wake
        if task.lease_owner != self.config.worker_id or task.id in self.runners:  # pragma: no cover
            log.error("task %s handed over without this worker's lease; not started", task.id)
            return None
        if self.metrics is not None:
            self.metrics.claimed(task.skill)
        return self._start(
            LeasedTask(
                store=self.store,
                committer=self.committer,
                task=task,
                epoch=task.lease_epoch,
                clock=self.clock,
                lease_seconds=self.config.lease_seconds,
            )
        )

    def _start(self, lease: LeasedTask) -> asyncio.Future[None] | None:
        task: Task = lease.task
        try:
            skill = self.registry.get(task.skill, task.skill_version)
        except UnknownSkillError:  # pragma: no cover - checked in _claim
            return None
        runner = TaskRunner(
            lease,
            skill,
            self.policy,
            self.draining,
            self.metrics,
            pacing=self.pacing,
            abandoned=self.abandoned,
            files=self.files,
        )
        self.runners[lease.task_id] = runner
        future = asyncio.ensure_future(runner.run())
        future.add_done_callback(functools.partial(self._finished, lease.task_id))
        return future

    def _finished(self, task_id: UUID, future: asyncio.Future[None]) -> None:
        self.runners.pop(task_id, None)
        self._slot_free()
        if not future.cancelled() and future.exception() is not None:
            log.error("task %s: runner crashed", task_id, exc_info=future.exception())

    async def _idle(self, stop: asyncio.Event) -> None:
        """Sleep until an append, a freed slot, the next lease expiry, the poll interval or stop."""
        self._serve_waiters()  # a claim round that found nothing leaves its free slots to them
        timeout = self.config.poll_seconds
        if len(self.runners) + self._reserved < self.config.concurrency:
            if not self._next_end_known:  # own commits leave no lease to take over: no read for them
                next_lease_end = functools.partial(self.store.run_queue.next_lease_end, self._skills)
                self._next_end = await asyncio.to_thread(retry_lost_connection, next_lease_end)
                self._next_end_known = True
            if self._next_end is not None:
                until_expiry = (self._next_end - self.clock()).total_seconds() + 0.01
                timeout = max(0.01, min(timeout, until_expiry))
        waiters = [
            asyncio.ensure_future(self._wakeup.event.wait()),
            asyncio.ensure_future(self._slot_freed.wait()),
            asyncio.ensure_future(stop.wait()),
        ]
        try:
            done, _ = await asyncio.wait(waiters, timeout=timeout, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for waiter in waiters:
                waiter.cancel()
            self._slot_freed.clear()
        if self._wakeup.take() or not done:  # another's append, or the poll (or a lease end)
            self._look = True
            self._next_end_known = False

    # ------------------------------------------------------------------ watching and draining

    async def _watch(self) -> None:
        """Stop steps of tasks that were canceled, paused or re-leased by someone else."""
        while True:
            await asyncio.sleep(self.config.watch_seconds)
            if not self.runners:
                continue
            ids = list(self.runners)
            try:
                owners = await asyncio.to_thread(self.store.run_queue.owners, ids)
            except Exception as error:  # noqa: BLE001 - a missed watch round is retried
                log.warning("watch query failed: %r", error)
                continue
            for task_id in ids:
                state, owner = owners.get(task_id, ("", None))
                runner = self.runners.get(task_id)
                if runner is None:
                    continue
                if state != TaskState.WORKING or owner != self.config.worker_id:
                    if runner.lease.committing or runner.lease.task.state != TaskState.WORKING:
                        continue  # its own commit, under way or made, did it: the runner ends itself
                    if runner.lease.lost is None:
                        reason = (
                            f"the task is now {state}"
                            if state != TaskState.WORKING
                            else f"the lease is now held by {owner or 'nobody'}"
                        )
                        runner.lease.lost = LeaseLostError(task_id, runner.lease.epoch, reason)
                    runner.stop_step()

    async def _drain(self) -> None:
        """Stop claiming and hand every running task back.

        Running steps get the grace period to reach their commit; then they are cancelled.
        Every lease still held is released, so another worker resumes at once.
        """
        self.draining.set()
        if not self.runners and not self._reserved:
            return
        log.info("draining %d running tasks (grace %.1fs)", len(self.runners), self.config.grace_seconds)
        deadline = asyncio.get_running_loop().time() + self.config.grace_seconds
        while (self.runners or self._reserved) and asyncio.get_running_loop().time() < deadline:
            self._slot_freed.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._slot_freed.wait(), deadline - asyncio.get_running_loop().time())
        for runner in list(self.runners.values()):
            runner.abort()
        while self.runners:
            self._slot_freed.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._slot_freed.wait(), 1.0)


class Reservation:
    """A worker slot held for one submission (``Worker.reserve``): started or released, once."""

    def __init__(self, worker: Worker, expectation: Expectation) -> None:
        self._worker = worker
        self._expectation = expectation
        self._settled = False
        self._lease: LeasedTask | None = None
        self._run: asyncio.Future[None] | None = None
        self._started = asyncio.Event()

    @property
    def worker_id(self) -> str:
        """The worker the submission grants the lease to."""
        return self._worker.config.worker_id

    @property
    def lease_seconds(self) -> float:
        """The length of the lease the submission grants."""
        return self._worker.config.lease_seconds

    def start(self, task: Task) -> None:
        """Run ``task`` (the worker's own copy) in the reserved slot: its lease was committed."""
        if not self._settled:
            self._settled = True
            self._expectation.settle(appended=True)
            self._run = self._worker._start_handed(task)
            runner = self._worker.runners.get(task.id)
            self._lease = runner.lease if runner is not None and self._run is not None else None
            self._started.set()

    def release(self) -> None:
        """Give the slot back: the submission granted no lease (a resend, or it failed)."""
        if not self._settled:
            self._settled = True
            self._expectation.settle(appended=False)
            self._worker._unreserve()
            self._started.set()

    async def ran(self, timeout: float) -> Task | None:  # noqa: ASYNC109 - a bound, as TaskWaiter's
        """The task as its runner's last commit left it, once the runner is done within ``timeout``.

        None if the slot was released, the runner is still running at the timeout, or it stopped
        without its lease (a cancel, a lease lost): then only the log says what the task is.
        Waiting never cancels the runner.
        """
        deadline = asyncio.get_running_loop().time() + timeout
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._started.wait(), timeout)
        if self._run is None or self._lease is None:
            return None
        remaining = deadline - asyncio.get_running_loop().time()
        if remaining > 0:
            await asyncio.wait([self._run], timeout=remaining)
        if not self._run.done() or self._lease.lost is not None:
            return None
        return self._lease.task
