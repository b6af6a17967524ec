"""Runs one leased task, one step at a time, each step ending in one fenced commit.

Every task ends. A step's attempt that does not reach its outcome is a ``StepAttemptFailed``
event: the step raised (``error``), ran past its timeout (``timeout``), or its worker died or
froze (``lease_lost``, recorded by the next claim). The count is in the log, so it survives any
crash; once the step's retry policy is spent (``domain.attempts``) the task fails, saying which
step, how often and why.

While a step runs, the runner watches it on the worker's clock (``workers.pacing``): it renews
the lease once a third of it is used, cancels the step at its timeout (a commit of the step
restarts that), and gives the lease up when it finds the lease already over: the event loop was
blocked past a renewal, and another worker may hold the task by now.
"""

from __future__ import annotations

import asyncio
import logging
import random
import time
from dataclasses import dataclass
from datetime import datetime, timedelta

from domain.attempts import (
    StepRules,
    attempts_spent,
    describe_error,
    rules_for,
    spent_reason,
)
from domain.errors import LeaseLostError
from domain.retry_policy import RetryPolicy
from domain.skill import JSON, Continue, Fail, Skill, StepOutcome
from domain.states import TaskState
from domain.task import AttemptCause, Task
from store.log import span
from store.secrets import SecretUnreadableError
from workers.context import DrainRequestedError, DurableStepContext, reveal_input
from workers.lease import LeasedTask
from workers.metrics import WorkerMetrics
from workers.pacing import ClockPacing, Pacing
from workers.step_files import StepFiles

log = logging.getLogger(__name__)

DEFAULT_STEP_RETRY = RetryPolicy(max_attempts=5, first_delay_s=1.0, max_delay_s=60.0)
"""The service's step retry policy unless ``LONGHAUL_STEP_MAX_ATTEMPTS`` says otherwise: five
attempts, pauses from 0.5-1 s doubling up to 30-60 s."""

DEFAULT_STEP_TIMEOUT = timedelta(hours=1)
"""A step's timeout unless ``LONGHAUL_STEP_TIMEOUT``, its skill or the step says otherwise."""


@dataclass(frozen=True)
class RunPolicy:
    """How a runner treats pauses and failing, hanging or stuck steps (the service's defaults)."""

    max_pause: timedelta
    step_retry: RetryPolicy = DEFAULT_STEP_RETRY
    step_timeout: timedelta = DEFAULT_STEP_TIMEOUT


RENEW_RETRY = timedelta(seconds=1)
"""How soon a renewal that failed (not refused: the database away) is tried again."""


class StepTimedOutError(Exception):
    """The step neither returned nor committed within its timeout (and was cancelled)."""


class TaskRunner:
    """Drives one task under one lease until it pauses, ends, is drained or loses the lease."""

    def __init__(
        self,
        lease: LeasedTask,
        skill: Skill,
        policy: RunPolicy,
        draining: asyncio.Event,
        metrics: WorkerMetrics | None = None,
        pacing: Pacing | None = None,
        abandoned: set[asyncio.Task[StepOutcome]] | None = None,
        files: StepFiles | None = None,
    ) -> None:
        self.lease = lease
        self.files = files
        self.metrics = metrics
        self.skill = skill
        self.policy = policy
        self.draining = draining
        self.pacing = pacing if pacing is not None else ClockPacing(lease.clock)
        self.step_task: asyncio.Task[StepOutcome] | None = None
        self.aborting = False
        self.abandoned = abandoned if abandoned is not None else set()
        """Steps that ignored their cancellation, still running; kept so they are not collected."""
        self._rules: dict[int, StepRules] = {}

    async def run(self) -> None:
        """Run steps until the task leaves the worker's hands."""
        try:
            await self._run_steps()
        except LeaseLostError as error:
            log.info("task %s: stopped, %s", self.lease.task_id, error.reason)
        except DrainRequestedError:
            await self.lease.release("worker shutting down")
            log.info("task %s: lease released for shutdown", self.lease.task_id)

    def rules(self, index: int) -> StepRules:
        """The retry policy and timeout of step ``index`` (worked out once per step of this run)."""
        rules = self._rules.get(index)
        if rules is None:
            rules = rules_for(
                self.skill, index, retry=self.policy.step_retry, timeout=self.policy.step_timeout
            )
            self._rules[index] = rules
        return rules

    async def _run_steps(self) -> None:
        while await self._next_step():
            pass

    async def _next_step(self) -> bool:
        """Run the task's next step (one attempt at it); True: there is more to run."""
        task = self.lease.task
        if task.state != TaskState.WORKING or task.lease_epoch != self.lease.epoch:
            return False
        if self.draining.is_set():
            raise DrainRequestedError
        index = task.next_step
        if index >= len(self.skill.steps):
            await self.lease.commit(self._finish_without_outcome)
            return False
        rules = self.rules(index)
        if attempts_spent(task, rules.retry):  # the last attempts lost their workers
            reason = spent_reason(rules, task.failed_attempts, task.last_failure)
            await self._fail_by_policy(rules, reason)
            return False
        return await self._attempt(rules)

    async def _attempt(self, rules: StepRules) -> bool:
        """One attempt at step ``rules.index``; True: there is more to run (or to try again)."""
        task = self.lease.task
        secrets: list[str] = []
        try:
            latest_input = await reveal_input(self.lease)
            secrets = _revealed(task.latest_input, latest_input)
            outcome = await self._timed(rules, latest_input)
            # A commit that fails for another reason than the lease (an outcome the store
            # cannot hold, the database gone) counts as a failed attempt of the step.
            await self._commit_step(rules.index, outcome)
        except (LeaseLostError, DrainRequestedError, asyncio.CancelledError):
            raise
        except SecretUnreadableError as error:
            # Retrying cannot bring a destroyed key back: the task fails at once, saying why.
            log.warning("task %s step %d: %s", task.id, rules.index, error)
            await self._commit_step(rules.index, Fail(f"step {rules.index} cannot run: {error}"))
            return False
        except StepTimedOutError as error:
            return await self._attempt_failed(rules, "timeout", str(error), retried=True)
        except Exception as error:  # noqa: BLE001 - a step failed: retry it from its checkpoint
            detail = describe_error(error, secrets)
            return await self._attempt_failed(rules, "error", detail, retried=rules.retry.retries(error))
        return isinstance(outcome, Continue)

    # ------------------------------------------------------------------ one attempt

    async def _timed(self, rules: StepRules, latest_input: JSON) -> StepOutcome:
        """``_run_one``, its duration observed by outcome (``error`` when the step raised)."""
        if self.metrics is None:
            return await self._run_one(rules, latest_input)
        started = time.monotonic()
        outcome_name = "error"
        try:
            outcome = await self._run_one(rules, latest_input)
            outcome_name = type(outcome).__name__
            return outcome
        except StepTimedOutError:
            outcome_name = "timeout"
            raise
        except (LeaseLostError, DrainRequestedError, asyncio.CancelledError):
            outcome_name = "interrupted"
            raise
        finally:
            self.metrics.step_ran(self.skill.name, outcome_name, time.monotonic() - started)

    async def _run_one(self, rules: StepRules, latest_input: JSON) -> StepOutcome:
        """Run step ``rules.index`` (``latest_input`` revealed) and watch it until it ends."""
        context = DurableStepContext(
            self.lease, rules.index, self.draining, latest_input=latest_input, files=self.files
        )
        self.lease.beat()
        step = asyncio.ensure_future(self.skill.steps[rules.index](context))
        self.step_task = step
        try:
            return await self._watch(step, rules)
        except asyncio.CancelledError:
            if self.lease.lost is not None:
                raise self.lease.lost from None
            if self.aborting:
                raise DrainRequestedError from None
            raise
        finally:
            if not step.done():
                step.cancel()
            self.step_task = None

    async def _watch(self, step: asyncio.Task[StepOutcome], rules: StepRules) -> StepOutcome:
        """Wait for ``step``, renewing the lease, until it ends, times out or the lease is over."""
        while True:
            deadline = self.lease.last_beat + rules.timeout
            due = self.lease.renewal_due()
            await self.pacing.wait(step, min(due, deadline))
            if step.done():
                return step.result()
            now = self.pacing.now()
            if now >= self.lease.ends:
                # The lease ran out with nobody renewing it: the event loop was blocked (a step's
                # sync code) past the renewal. Another worker may run the step by now.
                log.warning(
                    "task %s %s: the lease ended at %s before it could be renewed (the event loop"
                    " was blocked); the worker gives the task up",
                    self.lease.task_id,
                    rules.label,
                    self.lease.ends.isoformat(),
                )
                raise self.lease.give_up("the lease ended before it could be renewed")
            if now >= self.lease.last_beat + rules.timeout:
                return await self._time_out(step, rules)
            if now >= due:
                try:
                    await self.lease.renew()
                except LeaseLostError:
                    step.cancel()
                    raise
                except Exception as error:  # noqa: BLE001 - the database away: the step runs on
                    log.warning(
                        "task %s: renewing the lease failed, again in 1 s: %r", self.lease.task_id, error
                    )
                    await self.pacing.wait(step, now + RENEW_RETRY)

    async def _time_out(self, step: asyncio.Task[StepOutcome], rules: StepRules) -> StepOutcome:
        """Cancel ``step`` at its timeout; a step that ignores that loses its worker's lease."""
        step.cancel()
        grace = timedelta(seconds=self.lease.lease_seconds / 3)
        await self.pacing.wait(step, self.pacing.now() + grace)
        if step.done():
            if not step.cancelled() and step.exception() is None:
                return step.result()  # it returned just as it was cancelled
            raise StepTimedOutError(f"{rules.label} ran past its timeout of {span(rules.timeout)}")
        # The step swallowed its cancellation and runs on: it can never be stopped from here.
        # Count the attempt, give the lease back, and let every later write of the step fail.
        log.warning(
            "task %s %s ignores its cancellation after its timeout; the worker gives the task up",
            self.lease.task_id,
            rules.label,
        )
        self.abandoned.add(step)
        step.add_done_callback(self.abandoned.discard)
        detail = f"{rules.label} ran past its timeout of {span(rules.timeout)} and ignored its cancellation"
        if await self._attempt_failed(rules, "timeout", detail, retried=True, wait=False):
            await self.lease.release(f"{rules.label} ignores its cancellation")
        raise self.lease.give_up("the step ignored its cancellation")

    # ------------------------------------------------------------------ failed attempts

    async def _attempt_failed(
        self, rules: StepRules, cause: AttemptCause, detail: str, *, retried: bool, wait: bool = True
    ) -> bool:
        """Record a failed attempt (and fail the task if the policy says so); False: it ended.

        With ``wait``, the runner then holds the lease through the policy's pause before the
        next attempt.
        """
        task = await self.lease.commit_failed_attempt(rules, cause, detail, retried=retried)
        attempt, spent = len(task.failed_attempts), task.is_terminal
        log.warning(
            "task %s %s: attempt %d failed (%s): %s", self.lease.task_id, rules.label, attempt, cause, detail
        )
        if self.metrics is not None:
            self.metrics.attempt_failed(self.skill.name, cause)
            if spent:
                self.metrics.failed_by_policy(self.skill.name)
        if spent:
            return False
        if wait:
            pause = rules.retry.delay(attempt, random.random)
            await self._hold_until(self.pacing.now() + timedelta(seconds=pause))
        return True

    async def _hold_until(self, moment: datetime) -> None:
        """Keep the lease (renewing it) until ``moment``; a drain ends the wait at once."""
        drained = asyncio.ensure_future(self.draining.wait())
        try:
            while (now := self.pacing.now()) < moment:
                if self.draining.is_set():
                    raise DrainRequestedError
                if now >= self.lease.renewal_due():
                    await self.lease.renew()
                await self.pacing.sleep_until(min(moment, self.lease.renewal_due()), drained)
        finally:
            drained.cancel()

    async def _fail_by_policy(self, rules: StepRules, reason: str) -> None:
        await self._commit_step(rules.index, Fail(reason))
        log.warning("task %s failed: %s", self.lease.task_id, reason)
        if self.metrics is not None:
            self.metrics.failed_by_policy(self.skill.name)

    # ------------------------------------------------------------------ stopping

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


def _revealed(sealed: JSON, revealed: JSON) -> list[str]:
    """The text values that revealing the input opened (secrets an error message must not show)."""
    if sealed is revealed:
        return []
    before = set(_strings(sealed))
    return [value for value in _strings(revealed) if value not in before and len(value) >= 4]


def _strings(value: object) -> list[str]:
    if isinstance(value, str):
        return [value]
    if isinstance(value, dict):
        return [s for item in value.values() for s in _strings(item)]
    if isinstance(value, list):
        return [s for item in value for s in _strings(item)]
    return []
