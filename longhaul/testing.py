"""The test kit for skill authors: run a skill on longhaul's real runtime, in memory.

``SkillKit`` holds the real application (``store.log.application.TaskApplication`` on the in-memory
recorder), the real worker and step runner, and a clock that only moves when the test moves it.
Nothing is faked between a step and the log: every ``ctx.commit``, ``ctx.once``, artifact chunk
and outcome is a fenced commit of ``Task`` events, exactly as in production, only without
PostgreSQL. A test can:

- ``submit`` a task, ``run`` it until it pauses or ends, ``answer`` a pause, ``cancel`` it;
- ``advance`` the clock (by days, if it likes) and ``sweep`` (pauses past their deadline end);
- crash the worker at a chosen commit (``run(..., crash_after_commit=n)`` saves the n-th commit
  and then the process dies; ``crash_before_commit=n`` dies instead of saving it) and ``run``
  again: a new worker claims the task once the dead one's lease has passed, as after a SIGKILL,
  and that counts as a failed attempt at the step;
- let time skip while a step hangs (``run(..., skip_time=True)``): the clock jumps to whatever is
  due next (a lease renewal, the step's timeout), so a step that never returns times out at once;
  a failing step's pause before its next attempt is always skipped;
- inspect the ``events``, each ``commits`` group, the recorded ``effects`` and ``step_errors``.

Example::

    kit = SkillKit(MY_SKILL)
    task_id = kit.submit("my-skill", text="hello", data={"n": 3})
    task = await kit.run(task_id)
    assert task.state == TaskState.COMPLETED

See "Testing a skill" in ``docs/skills.md``.
"""

from __future__ import annotations

import asyncio
import dataclasses
import functools
import time
from datetime import UTC, datetime, timedelta
from typing import Any, TypeVar, overload
from uuid import UUID, uuid4

from domain.messages import user_message
from domain.retry_policy import RetryPolicy
from domain.skill import JSON, BoundedStep, Skill, SkillRegistry, Step, StepContext, StepFunction, StepOutcome
from domain.states import INTERRUPTED, TERMINAL
from domain.task import Task
from store.files import FileStore
from store.log import MemoryConfig, TaskApplication
from workers.step_files import StepFiles
from workers.sweeper import Sweeper
from workers.task_runner import DEFAULT_STEP_TIMEOUT, RunPolicy
from workers.worker import Worker, WorkerConfig

__all__ = [
    "DEFAULT_START",
    "CrashNotReachedError",
    "MovableClock",
    "SimulatedCrash",
    "SkillKit",
    "artifact_text",
    "message_text",
]

DEFAULT_START = datetime(2026, 1, 5, 9, 0, tzinfo=UTC)
"""Where a kit's clock starts, unless told otherwise: a Monday morning, in UTC."""

E = TypeVar("E", bound=Task.Event)

LEASE_EVENTS = (Task.LeaseGranted, Task.LeaseExtended, Task.LeaseReleased)


class SimulatedCrash(BaseException):
    """The worker process died at a commit the test chose.

    A ``BaseException``, like the ``SIGKILL`` it stands for: a step's ``except Exception`` cannot
    catch it, and nothing the dying worker would still write reaches the log.
    """


class CrashNotReachedError(AssertionError):
    """``run`` was told to crash at a commit the task never made (it paused or ended first)."""


class MovableClock:
    """The kit's clock: it stands still until the test moves it."""

    def __init__(self, start: datetime = DEFAULT_START) -> None:
        if start.utcoffset() is None:
            raise ValueError("the clock needs a timezone-aware start")
        self.now = start

    def __call__(self) -> datetime:
        """The kit's time now."""
        return self.now

    def advance(self, delta: timedelta) -> None:
        """Move the clock forward by ``delta``."""
        if delta < timedelta(0):
            raise ValueError("time does not go back")
        self.now += delta


class KitPacing:
    """The runner's waits on the kit's clock: the clock jumps instead of the test waiting.

    A pause between attempts always jumps. A wait for a running step jumps only while
    ``skip_time`` is on, after ``idle_s`` real seconds in which the step did not end.
    """

    def __init__(self, clock: MovableClock, idle_s: float = 0.005) -> None:
        self.clock = clock
        self.skip_time = False
        self.idle_s = idle_s

    def now(self) -> datetime:
        """The kit's time."""
        return self.clock.now

    async def sleep_until(self, moment: datetime, interrupt: asyncio.Future[Any] | None = None) -> None:
        """Move the clock to ``moment`` (nothing to wait for: ``interrupt`` cannot come first)."""
        self.clock.now = max(self.clock.now, moment)
        await asyncio.sleep(0)

    async def wait(self, future: asyncio.Future[Any], until: datetime) -> None:
        """Wait for ``future``; with ``skip_time``, jump to ``until`` once it idled ``idle_s``."""
        if not self.skip_time:
            await asyncio.wait({future}, timeout=max(0.0, (until - self.clock.now).total_seconds()))
            return
        await asyncio.wait({future}, timeout=self.idle_s)
        if not future.done():
            self.clock.now = max(self.clock.now, until)


@dataclasses.dataclass
class _CrashPlan:
    after: int | None = None
    before: int | None = None
    commits: int = 0
    happened: bool = False


class _KitApplication(TaskApplication):
    """The in-memory application, recording each commit and dying where the test said."""

    def __init__(self) -> None:
        super().__init__(MemoryConfig())
        self.plan = _CrashPlan()
        self.commit_log: dict[UUID, list[list[str]]] = {}

    def save_each(self, *tasks: Task) -> list[Exception | None]:
        """The worker's commit path (its group committer): count, save, record, maybe die."""
        plan = self.plan
        if plan.happened:
            raise SimulatedCrash("the worker is dead")
        step_commits = [t for t in tasks if _is_step_commit(t)]
        crash_after = False
        for _ in step_commits:
            plan.commits += 1
            if plan.before is not None and plan.commits == plan.before:
                plan.happened = True
                raise SimulatedCrash(f"crashed before commit {plan.commits}")
            crash_after = crash_after or plan.commits == plan.after
        groups = {t.id: [type(e).__name__ for e in t.pending_events] for t in tasks}
        outcomes = super().save_each(*tasks)
        for task, outcome in zip(tasks, outcomes, strict=True):
            if outcome is None and groups[task.id]:
                self.commit_log.setdefault(task.id, []).append(groups[task.id])
        if crash_after:
            plan.happened = True
            raise SimulatedCrash(f"crashed after commit {plan.after}")
        return outcomes


def _is_step_commit(task: Task) -> bool:
    """Whether ``task``'s pending events are a step's write, not a lease's (a claim's included)."""
    return not _lease_only([type(e).__name__ for e in task.pending_events])


def _lease_only(names: list[str]) -> bool:
    """Whether a commit of events ``names`` is a lease's: a claim, a renewal or a release.

    A claim may record a lost worker's attempt with it (``StepAttemptFailed``).
    """
    return "LeaseGranted" in names or set(names) <= _LEASE_NAMES


class SkillKit:
    """Skills on the real runtime in memory, with a movable clock. See the module docstring.

    Args:
        skills: The skills (and skill versions) the kit's workers can run.
        start: Where the clock starts.
        lease_seconds: The workers' lease length (in kit time, which only ``advance`` moves).
        max_pause: The deadline of a pause that names none (``LONGHAUL_MAX_PAUSE``).
        max_step_attempts: How often a step is tried (it raised, timed out or lost its worker)
            before the task fails, for steps and skills that set no retry policy of their own.
        step_timeout: How long a step may run without a commit, for steps and skills that set
            none of their own (``LONGHAUL_STEP_TIMEOUT``).
        retention: How long an ended task is kept before ``sweep`` expires it.
        timeout_s: Real seconds one ``run`` may take before the kit gives up.
        file_inline_max_bytes: The largest file a step writes that stays inline in its event
            (``LONGHAUL_FILE_INLINE_MAX_BYTES``); larger ones go to the kit's file store, in
            memory, which ``file_bytes`` reads.
    """

    def __init__(
        self,
        *skills: Skill,
        start: datetime = DEFAULT_START,
        lease_seconds: float = 30.0,
        max_pause: timedelta = timedelta(days=7),
        max_step_attempts: int = 5,
        step_timeout: timedelta = DEFAULT_STEP_TIMEOUT,
        retention: timedelta = timedelta(days=30),
        timeout_s: float = 30.0,
        file_inline_max_bytes: int = 16384,
    ) -> None:
        if not skills:
            raise ValueError("a SkillKit needs at least one skill")
        self.clock = MovableClock(start)
        self.app = _KitApplication()
        self._errors: dict[UUID, list[Exception]] = {}
        self.registry = SkillRegistry([self._recording(skill) for skill in skills])
        self.policy = RunPolicy(
            max_pause=max_pause,
            step_retry=RetryPolicy(max_attempts=max_step_attempts, first_delay_s=1.0, max_delay_s=60.0),
            step_timeout=step_timeout,
        )
        self.pacing = KitPacing(self.clock)
        self.lease_seconds = lease_seconds
        self.retention = retention
        self.timeout_s = timeout_s
        self.files = StepFiles(FileStore.from_url("memory:///"), inline_max_bytes=file_inline_max_bytes)
        self._workers = 0

    def close(self) -> None:
        """Release the application (the kit is unusable afterwards)."""
        self.app.close()

    def __enter__(self) -> SkillKit:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()

    # ------------------------------------------------------------------ what a client does

    def submit(
        self,
        skill: str,
        *,
        text: str | None = None,
        data: JSON | None = None,
        message: JSON | None = None,
        tenant: str = "default",
        message_id: str | None = None,
        version: int | None = None,
    ) -> UUID:
        """Start a task of ``skill`` (its newest version, or ``version``) with a first message.

        The message has a text part and a data part as given; the data part is the skill's
        ``params``, as with ``SendMessage``. ``message`` gives the whole first message in A2A wire
        shape instead (several text parts, file parts, a ``contextId``), in place of ``text``,
        ``data`` and ``message_id``; a ``messageId`` is added if it has none.
        """
        chosen = self.registry.newest(skill) if version is None else self.registry.get(skill, version)
        if message is None:
            message = user_message(text, data, message_id=message_id or str(uuid4()))
        elif text is not None or data is not None or message_id is not None:
            raise ValueError("submit takes either message or text/data/message_id, not both")
        else:
            message = {"messageId": str(uuid4()), **message}
        task = self.app.submit(tenant=tenant, message=message, skill=chosen, clock=self.clock)
        return task.id

    def answer(
        self,
        task_id: UUID,
        *,
        text: str | None = None,
        data: JSON | None = None,
        message_id: str | None = None,
        tenant: str = "default",
    ) -> Task:
        """Answer a paused task (``SendMessage`` with its ``taskId``): it becomes runnable again.

        The answer has a text part and a data part as given, and ``message_id`` (else a fresh one).
        """
        message = user_message(text, data, message_id=message_id or str(uuid4()))
        return self.app.answer(task_id, tenant=tenant, message=message, clock=self.clock)

    def cancel(self, task_id: UUID, *, tenant: str = "default") -> Task:
        """Cancel the task (``CancelTask``)."""
        return self.app.cancel(task_id, tenant=tenant, clock=self.clock)

    # ------------------------------------------------------------------ time

    def advance(self, delta: timedelta | None = None, **parts: float) -> datetime:
        """Move the clock by ``delta`` or by ``days=``/``hours=``/... ; returns the new time."""
        self.clock.advance(delta if delta is not None else timedelta(**parts))
        return self.clock.now

    def sweep(self) -> tuple[int, int]:
        """What the sweeper does now: end pauses past their deadline, expire old tasks.

        Returns how many pauses it ended and how many tasks it expired.
        """
        sweeper = Sweeper(store=self.app, clock=self.clock, retention=self.retention, interval=1.0)
        return sweeper.sweep_once()

    # ------------------------------------------------------------------ running

    async def run(
        self,
        task_id: UUID,
        *,
        crash_after_commit: int | None = None,
        crash_before_commit: int | None = None,
        skip_time: bool = False,
    ) -> Task:
        """Run the task on a fresh worker until it pauses, ends or the chosen crash happens.

        A commit is one write of the running step (a checkpoint, an effect result, an artifact
        chunk, a progress message, or the step's outcome); lease grants and renewals do not count.
        With ``crash_after_commit=n`` the n-th commit is saved and the worker dies right after;
        with ``crash_before_commit=n`` it dies instead of saving it (a side effect that ran but
        whose result was not recorded). A dead worker's lease stays in the log: the next ``run``
        moves the clock past it, so a new worker claims the task (epoch + 1) and resumes it from
        its stored checkpoint. With ``skip_time``, the clock jumps while a step waits (see the
        module docstring): a hanging step reaches its timeout without the test waiting for it.

        Returns:
            The task as the log holds it when the run stopped.

        Raises:
            CrashNotReachedError: The task paused or ended before the chosen commit.
            TimeoutError: The task neither paused nor ended within ``timeout_s`` real seconds.
        """
        self._wait_out_a_dead_lease(task_id)
        self.app.plan = _CrashPlan(after=crash_after_commit, before=crash_before_commit)
        self._workers += 1
        worker = Worker(
            store=self.app,
            registry=self.registry,
            clock=self.clock,
            config=WorkerConfig(
                worker_id=f"kit-worker-{self._workers}",
                lease_seconds=self.lease_seconds,
                concurrency=4,
                grace_seconds=0.0,
                poll_seconds=0.01,
                watch_seconds=0.01,
            ),
            policy=self.policy,
            pacing=self.pacing,
            files=self.files,
        )
        self.pacing.skip_time = skip_time
        stop = asyncio.Event()
        running = asyncio.ensure_future(worker.run(stop))
        try:
            await self._until_settled(task_id, worker, running)
        finally:
            stop.set()
            await running
            self.pacing.skip_time = False
        crashed = self.app.plan.happened
        self.app.plan = _CrashPlan()
        if (crash_after_commit is not None or crash_before_commit is not None) and not crashed:
            chosen = crash_after_commit if crash_after_commit is not None else crash_before_commit
            raise CrashNotReachedError(
                f"task {task_id} made {self._commits_so_far(task_id)} commits and is "
                f"{self.task(task_id).state}: commit {chosen} never came"
            )
        return self.task(task_id)

    async def _until_settled(self, task_id: UUID, worker: Worker, running: asyncio.Future[None]) -> None:
        deadline = time.monotonic() + self.timeout_s
        while not self.app.plan.happened:
            if running.done():
                running.result()  # a worker that stopped on its own: raise what stopped it
                return
            # A task the worker is running has not settled, and rebuilding it from its log every
            # few milliseconds would slow the worker down (the log grows with every commit).
            if task_id not in worker.runners:
                task = self.task(task_id)
                if task.state in INTERRUPTED or task.state in TERMINAL:
                    return
            if time.monotonic() > deadline:
                raise TimeoutError(
                    f"task {task_id} is still {self.task(task_id).state} after {self.timeout_s} s"
                )
            await asyncio.sleep(0.002)

    def _wait_out_a_dead_lease(self, task_id: UUID) -> None:
        task = self.task(task_id)
        if task.lease_valid_at(self.clock()) and task.lease_until is not None:
            self.clock.now = task.lease_until

    def _commits_so_far(self, task_id: UUID) -> int:
        return sum(1 for group in self.app.commit_log.get(task_id, []) if not _lease_only(group))

    # ------------------------------------------------------------------ reading the log

    def task(self, task_id: UUID) -> Task:
        """The task rebuilt from its events, as ``GetTask`` would see it."""
        return self.app.get(task_id)

    @overload
    def events(self, task_id: UUID) -> list[Task.Event]: ...

    @overload
    def events(self, task_id: UUID, kind: type[E]) -> list[E]: ...

    def events(self, task_id: UUID, kind: type[Any] = Task.Event) -> list[Any]:
        """The task's events, oldest first; only those of ``kind`` (e.g. ``Task.Failed``) when given."""
        return [e for e in self.app.history(task_id) if isinstance(e, kind)]

    def commits(self, task_id: UUID, *, with_leases: bool = False) -> list[list[str]]:
        """Each commit of the task's workers, as the event type names it saved together.

        Lease-only commits (claims, renewals, releases) are left out unless ``with_leases``.
        """
        groups = self.app.commit_log.get(task_id, [])
        return [list(g) for g in groups if with_leases or not _lease_only(g)]

    async def file_bytes(self, task_id: UUID, artifact_id: str) -> bytes:
        """The bytes of one of the task's artifacts: its file parts (stored or inline), in order."""
        content = bytearray()
        for part in self.task(task_id).artifacts[artifact_id]["parts"]:
            async for chunk in self.files.open(part):
                content += chunk
        return bytes(content)

    def effects(self, task_id: UUID) -> dict[str, Any]:
        """Every recorded run-once side effect of the task: key -> result."""
        return dict(self.task(task_id).effects)

    def step_errors(self, task_id: UUID) -> list[Exception]:
        """What the task's steps raised, in order (each one made the runtime retry the step)."""
        return list(self._errors.get(task_id, []))

    # ------------------------------------------------------------------ helpers

    def _recording(self, skill: Skill) -> Skill:
        """``skill`` with each step noting what it raised before the runtime sees it."""
        return dataclasses.replace(skill, steps=[self._record_errors(step) for step in skill.steps])

    def _record_errors(self, step: Step) -> Step:
        if isinstance(step, BoundedStep):  # keep the step's own policy and timeout
            return dataclasses.replace(step, fn=self._record_errors(step.fn))
        function: StepFunction = step

        @functools.wraps(function)
        async def recorded(context: StepContext) -> StepOutcome:
            try:
                return await function(context)
            except Exception as error:
                self._errors.setdefault(UUID(context.task_id), []).append(error)
                raise

        return recorded


_LEASE_NAMES = frozenset(cls.__name__ for cls in LEASE_EVENTS)


def message_text(message: JSON | None) -> str | None:
    """The text parts of a message joined (``task.status_message``, a question), or ``None``."""
    if message is None:
        return None
    return "".join(str(p["text"]) for p in message.get("parts", ()) if "text" in p)


def artifact_text(task: Task, artifact_id: str) -> str:
    """The text parts of one of the task's artifacts, joined in order."""
    return "".join(str(p["text"]) for p in task.artifacts[artifact_id]["parts"] if "text" in p)
