"""Runs one leased task, one step at a time, each step ending in one fenced commit."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from dataclasses import dataclass
from datetime import datetime, timedelta

from domain.errors import LeaseLostError
from domain.skill import JSON, Continue, Fail, Skill, StepOutcome
from domain.states import TaskState
from domain.task import Task
from store.secrets import SecretUnreadableError
from workers.context import DrainRequestedError, DurableStepContext, reveal_input
from workers.lease import LeasedTask
from workers.metrics import WorkerMetrics

log = logging.getLogger(__name__)

RENEW_FRACTION = 3
"""A step that runs longer than lease/RENEW_FRACTION renews the lease."""


@dataclass(frozen=True)
class RunPolicy:
    """How a runner treats failing steps and pauses."""

    max_pause: timedelta
    max_step_attempts: int = 5
    retry_backoff_s: float = 0.2


class TaskRunner:
    """Drives one task under one lease until it pauses, ends, is drained or loses the lease."""

    def __init__(
        self,
        lease: LeasedTask,
        skill: Skill,
        policy: RunPolicy,
        draining: asyncio.Event,
        metrics: WorkerMetrics | None = None,
    ) -> None:
        self.lease = lease
        self.metrics = metrics
        self.skill = skill
        self.policy = policy
        self.draining = draining
        self.step_task: asyncio.Task[StepOutcome] | None = None
        self.aborting = False

    async def run(self) -> None:
        """Run steps until the task leaves the worker's hands."""
        try:
            await self._run_steps()
        except LeaseLostError as error:
            log.info("task %s: stopped, %s", self.lease.task_id, error.reason)
        except DrainRequestedError:
            await self.lease.release("worker shutting down")
            log.info("task %s: lease released for shutdown", self.lease.task_id)

    async def _run_steps(self) -> None:
        attempts = 0
        while True:
            task = self.lease.task
            if task.state != TaskState.WORKING or task.lease_epoch != self.lease.epoch:
                return
            if self.draining.is_set():
                raise DrainRequestedError
            index = task.next_step
            if index >= len(self.skill.steps):
                await self.lease.commit(self._finish_without_outcome)
                return
            try:
                latest_input = await reveal_input(self.lease)
                outcome = await self._timed(index, latest_input)
                # A commit that fails for another reason than the lease (an outcome the store
                # cannot hold, the database gone) counts as a failed attempt of the step.
                await self._commit_step(index, outcome)
            except (LeaseLostError, DrainRequestedError, asyncio.CancelledError):
                raise
            except SecretUnreadableError as error:
                # Retrying cannot bring a destroyed key back: the task fails at once, saying why.
                log.warning("task %s step %d: %s", task.id, index, error)
                await self._commit_step(index, Fail(f"step {index} cannot run: {error}"))
                return
            except Exception as error:  # noqa: BLE001 - a step failed: retry it from its checkpoint
                attempts += 1
                log.warning("task %s step %d attempt %d failed: %r", task.id, index, attempts, error)
                if attempts >= self.policy.max_step_attempts:
                    reason = f"step {index} failed {attempts} times; last error: {error!r}"
                    await self._commit_step(index, Fail(reason))
                    return
                await asyncio.sleep(self.policy.retry_backoff_s * attempts)
                await self.lease.refresh()
                continue
            attempts = 0
            if not isinstance(outcome, Continue):
                return

    async def _timed(self, index: int, latest_input: JSON) -> StepOutcome:
        """``_run_one``, its duration observed by outcome (``error`` when the step raised)."""
        if self.metrics is None:
            return await self._run_one(index, latest_input)
        started = time.monotonic()
        outcome_name = "error"
        try:
            outcome = await self._run_one(index, latest_input)
            outcome_name = type(outcome).__name__
            return outcome
        except (LeaseLostError, DrainRequestedError, asyncio.CancelledError):
            outcome_name = "interrupted"
            raise
        finally:
            self.metrics.step_ran(self.skill.name, outcome_name, time.monotonic() - started)

    async def _run_one(self, index: int, latest_input: JSON) -> StepOutcome:
        """Run step ``index`` (``latest_input`` revealed) with lease renewal in the background."""
        context = DurableStepContext(self.lease, index, self.draining, latest_input=latest_input)
        self.step_task = asyncio.ensure_future(self.skill.steps[index](context))
        renewer = asyncio.ensure_future(self._renew_while(self.step_task))
        try:
            return await self.step_task
        except asyncio.CancelledError:
            if self.lease.lost is not None:
                raise self.lease.lost from None
            if self.aborting:
                raise DrainRequestedError from None
            raise
        finally:
            renewer.cancel()
            with contextlib.suppress(asyncio.CancelledError, LeaseLostError):
                await renewer
            self.step_task = None

    async def _renew_while(self, step: asyncio.Task[StepOutcome]) -> None:
        interval = self.lease.lease_seconds / RENEW_FRACTION
        while not step.done():
            await asyncio.sleep(interval)
            if step.done():
                return
            try:
                await self.lease.renew()
            except LeaseLostError:
                step.cancel()
                return

    def abort(self) -> None:
        """Shutdown past the grace period: cancel the running step, then release the lease."""
        self.aborting = True
        self.stop_step()

    def stop_step(self) -> None:
        """Cancel the running step's coroutine (task canceled or lease lost)."""
        if self.step_task is not None and not self.step_task.done():
            self.step_task.cancel()

    # ------------------------------------------------------------------ outcome -> events

    async def _commit_step(self, index: int, outcome: StepOutcome) -> None:
        """Record ``outcome`` of step ``index`` in one fenced commit (``TaskApplication.commit_step``)."""
        await self.lease.commit_step(
            index, outcome, steps_total=len(self.skill.steps), max_pause=self.policy.max_pause
        )

    def _finish_without_outcome(self, task: Task, now: datetime) -> None:
        task.complete(epoch=self.lease.epoch, now=now, message=None)
