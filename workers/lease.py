"""A held lease on one task, and the fenced commit every worker-side write goes through.

``LeasedTask`` keeps the worker's copy of the task aggregate. Each write is a domain command
applied to that copy and saved in one transaction at the copy's version, through the
application's ``commit_leased`` (the one conflict-retry executor, saving via the worker's group
committer); a step's outcome goes through the application's named use case ``commit_step``,
which builds that command from ``domain.outcomes.apply_outcome``, and a failed attempt through
``commit_failed_attempt`` (``domain.attempts.record_failed_attempt``):

- ``ConflictError``: someone appended first (a client message, a push config, a cancel). The
  copy is reloaded and the command re-applied; the command's own lease check decides whether
  the lease still holds.
- ``LeaseLostError``: the lease was superseded. The caller stops and never writes again.
- Any other failure: the copy may hold events that were not stored, so it is reloaded.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable
from datetime import datetime, timedelta
from uuid import UUID

from domain.attempts import StepRules
from domain.clock import Clock
from domain.errors import LeaseLostError
from domain.skill import StepOutcome
from domain.task import AttemptCause, Task, lease_end
from store.log import Command, TaskApplication
from workers.committer import Committer


class LeasedTask:
    """The worker's side of one lease: the task copy, the epoch, and a commit lock."""

    def __init__(
        self,
        *,
        store: TaskApplication,
        committer: Committer,
        task: Task,
        epoch: int,
        clock: Clock,
        lease_seconds: float,
    ) -> None:
        self.store = store
        self.committer = committer
        self.task = task
        self.epoch = epoch
        self.clock = clock
        self.lease_seconds = lease_seconds
        self.lost: LeaseLostError | None = None
        self._renew_ahead = timedelta(seconds=lease_seconds * 2 / 3)
        self.last_beat: datetime = clock()
        """When the running step last committed (a checkpoint, an effect, a chunk, progress): its
        heartbeat, from which its timeout counts (renewals are no heartbeat)."""
        self._lock = asyncio.Lock()

    @property
    def task_id(self) -> UUID:
        """The leased task's id."""
        return self.task.id

    @property
    def committing(self) -> bool:
        """Whether a commit (or a reload) of this lease is under way."""
        return self._lock.locked()

    def lease_until(self, now: datetime) -> datetime:
        """The lease end a commit made at ``now`` extends to."""
        return lease_end(now, self.lease_seconds)

    @property
    def ends(self) -> datetime:
        """When the lease ends as the worker's copy holds it (it never holds a lease without an end)."""
        return self.task.lease_until or self.clock()

    def renewal_due(self) -> datetime:
        """When the lease should be renewed: once a third of it is used."""
        return self.ends - self._renew_ahead

    def beat(self) -> None:
        """The running step committed: its timeout starts again."""
        self.last_beat = self.clock()

    def give_up(self, reason: str) -> LeaseLostError:
        """Stop writing under this lease (it may be another's now); returns the error commits raise."""
        if self.lost is None:
            self.lost = LeaseLostError(self.task_id, self.epoch, reason)
        return self.lost

    async def guard(self) -> None:
        """Before a side effect: make sure the lease holds for a while yet, renewing it if it must.

        A worker whose event loop was blocked may find its lease expired, or about to: another
        worker may run the step by now. The renewal is a fenced commit, so it fails
        (``LeaseLostError``) rather than let two holders call the same downstream at once.
        """
        if self.lost is not None:
            raise self.lost
        if self.clock() >= self.renewal_due():
            await self.renew()

    async def commit(self, command: Command) -> Task:
        """Apply ``command(task, now)`` and append its events, fenced by the lease.

        Retries after a conflict with the reloaded task; raises ``LeaseLostError`` (and
        remembers it) once the lease no longer holds.
        """
        return await self._commit(
            lambda task: self.store.commit_leased(task, command, clock=self.clock, save=self.committer.save)
        )

    async def commit_step(
        self, step: int, outcome: StepOutcome, *, steps_total: int, max_pause: timedelta
    ) -> Task:
        """Record ``outcome`` of step ``step``: the application's ``commit_step`` under this lease."""
        return await self._commit(
            lambda task: self.store.commit_step(
                task,
                epoch=self.epoch,
                step=step,
                outcome=outcome,
                steps_total=steps_total,
                max_pause=max_pause,
                lease_seconds=self.lease_seconds,
                clock=self.clock,
                save=self.committer.save,
            )
        )

    async def commit_failed_attempt(
        self, rules: StepRules, cause: AttemptCause, detail: str, *, retried: bool
    ) -> Task:
        """Record a failed attempt (the application's ``commit_failed_attempt``) under this lease."""
        return await self._commit(
            lambda task: self.store.commit_failed_attempt(
                task,
                epoch=self.epoch,
                rules=rules,
                cause=cause,
                detail=detail,
                retried=retried,
                clock=self.clock,
                save=self.committer.save,
            )
        )

    async def _commit(self, write: Callable[[Task], Awaitable[Task]]) -> Task:
        """Run ``write`` on the task copy under the commit lock, and keep what it saved."""
        async with self._lock:
            if self.lost is not None:
                raise self.lost
            try:
                self.task = await write(self.task)
            except LeaseLostError as error:
                self.lost = error
                raise
            except BaseException:
                # The copy may hold events that are not stored: never reuse it.
                self.task = await asyncio.to_thread(self.store.get, self.task_id)
                raise
            return self.task

    async def renew(self) -> None:
        """Extend the lease (a fenced ``LeaseExtended`` event)."""

        def extend(task: Task, now: datetime) -> None:
            task.extend_lease(epoch=self.epoch, now=now, until=self.lease_until(now))

        await self.commit(extend)

    async def release(self, reason: str) -> None:
        """Give the lease back so another worker can resume at once; quiet if already lost."""

        def release(task: Task, now: datetime) -> None:
            task.release_lease(epoch=self.epoch, now=now, reason=reason)

        with contextlib.suppress(LeaseLostError):
            await self.commit(release)

    async def refresh(self) -> Task:
        """Reload the task (to see what others appended) without writing."""
        async with self._lock:
            self.task = await asyncio.to_thread(self.store.get, self.task_id)
            return self.task
