"""The Task aggregate: an A2A task rebuilt purely from its events.

Command methods check the state machine, the lease fence and their arguments first, then
trigger exactly one past-tense event (a claim that finds a lost worker's lease: two, the
failed attempt and the grant). A refused command raises a ``DomainError`` and records
nothing. Event ``apply`` methods only mutate state; they run again on every replay.

Messages, parts and artifacts are kept as plain JSON objects in their A2A 1.0 wire shape, so an
event body is readable by auditors and analytics consumers without this code.

Longer than 500 lines on purpose, one module: the events are nested in the aggregate (the
``eventsourcing`` convention), and their topics (``domain.task:Task.<Event>``) are stored in the
log, so moving an event class would need a ``register_topic`` alias for every stored event. The
two shared bases (``_PauseRequested``, ``_Ended``) are never recorded themselves: only their
subclasses are, under their own names.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, ClassVar, Literal
from uuid import UUID

from eventsourcing.domain import Aggregate
from typing_extensions import override

from domain.errors import (
    DeadlineNotReachedError,
    EffectAlreadyRecordedError,
    IllegalTransitionError,
    InvalidCommandError,
    LeaseHeldError,
    LeaseLostError,
    NotPausedError,
    NotRunnableError,
    PauseDeadlinePassedError,
    StepOrderError,
    TaskTerminalError,
)
from domain.states import INTERRUPTED, RUNNABLE, TERMINAL, TaskState, can_transition

JSON = dict[str, Any]

OnDeadline = Literal["fail", "cancel"]
"""What a pause does when its deadline passes unanswered."""

ON_DEADLINE_CHOICES: tuple[OnDeadline, ...] = ("fail", "cancel")

AttemptCause = Literal["error", "timeout", "lease_lost"]
"""Why an attempt at a step ended without an outcome: the step raised, it ran past its timeout, or
its lease ended while it ran (the worker died, froze, or blocked its event loop)."""

ATTEMPT_CAUSES: tuple[AttemptCause, ...] = ("error", "timeout", "lease_lost")

CanceledBy = Literal["client", "sweeper"]
"""Who canceled a task: a client (``CancelTask``), or the sweeper at a pause's deadline."""

SWEEPER_CANCEL_REASON = "no answer before the deadline"
"""How the reason of a cancel by the sweeper starts (``expire_pause``); version-1 ``Canceled``
events are told apart by it."""


def _no_key_id(state: JSON) -> None:
    """Version 1 of a client's event did not record the caller's API key id (ADR 0027)."""
    state["key_id"] = None


@dataclass(frozen=True)
class Pause:
    """A task waiting for a person: until ``deadline``, then it fails or cancels (``on_deadline``)."""

    deadline: datetime
    on_deadline: OnDeadline


class Task(Aggregate):
    """One A2A task: its state, lease, checkpoint, effect ledger, pause, artifacts and history.

    ``class_version`` is the version of the aggregate's state as snapshots store it: version 1
    (the code up to e584b81) kept ``pause`` as a dict ``{"deadline": ..., "on_deadline": ...}``;
    version 2 had no attempt counts and no started effects.
    """

    class_version = 3

    # ------------------------------------------------------------------ events

    class Event(Aggregate.Event):
        """Base for every Task event.

        ``eventsourcing`` types ``apply``'s argument as ``Any``; narrowing it here to ``Task``
        lets every event below mutate the task with full type checking and no cast.
        """

        enters: ClassVar[TaskState | None] = None
        """The state the task is in after this event, for the events that set it; else None."""

        @override
        def apply(self, task: Task) -> None:
            """Mutate ``task``; overridden by every event that changes state."""

    class Submitted(Event, Aggregate.Created):
        """A client submitted the task with its first message.

        Its fields are the arguments of ``Task.__init__``, which sets the whole initial state.
        """

        enters = TaskState.SUBMITTED
        class_version = 2
        tenant: str
        context_id: str
        skill: str
        skill_version: int
        message: JSON
        params: JSON
        key_id: str | None
        """The id of the API key the client called with (``None``: an open gateway, or version 1)."""

        upcast_v1_v2 = staticmethod(_no_key_id)

    class LeaseGranted(Event):
        """A worker claimed the task. ``epoch`` increases on every grant: it is the fence.

        Only a submitted or working task is granted a lease, so the task is working after it.
        """

        enters = TaskState.WORKING
        class_version = 1
        worker: str
        epoch: int
        until: datetime

        @override
        def apply(self, task: Task) -> None:
            task.lease_owner, task.lease_epoch, task.lease_until = self.worker, self.epoch, self.until
            if task.state == TaskState.SUBMITTED:
                task._set_state(TaskState.WORKING, None, self.timestamp)

    class LeaseExtended(Event):
        """The holder renewed its lease during a long step."""

        class_version = 1
        epoch: int
        until: datetime

        @override
        def apply(self, task: Task) -> None:
            task.lease_until = self.until

    class LeaseReleased(Event):
        """The holder gave the lease up (shutdown, or a step it could not finish)."""

        class_version = 1
        epoch: int
        reason: str

        @override
        def apply(self, task: Task) -> None:
            task._clear_lease()

    class StepCompleted(Event):
        """A step finished: the checkpoint and next step index move on, the lease is extended."""

        class_version = 1
        epoch: int
        step: int
        checkpoint: JSON
        lease_until: datetime

        @override
        def apply(self, task: Task) -> None:
            task.next_step = self.step + 1
            task.checkpoint = dict(self.checkpoint)
            task.lease_until = self.lease_until
            task.failed_attempts = []
            task.last_failure = None

    class CheckpointSaved(Event):
        """A long step saved its checkpoint mid-step (a sub-step commit)."""

        class_version = 1
        epoch: int
        step: int
        checkpoint: JSON
        lease_until: datetime

        @override
        def apply(self, task: Task) -> None:
            task.checkpoint = dict(self.checkpoint)
            task.lease_until = self.lease_until

    class ProgressReported(Event):
        """The running step told the client what it is doing (a status message)."""

        class_version = 1
        epoch: int
        message: JSON

        @override
        def apply(self, task: Task) -> None:
            task.status_message = self.message
            task.status_timestamp = self.timestamp

    class _PauseRequested(Event):
        """Base of ``InputRequested`` and ``AuthRequested`` (never recorded itself).

        The task asked a person and released its lease until ``deadline``. ``resume_step`` is
        where the answer resumes: ``step + 1``, or ``step`` to ask again. Version 1 had no
        ``resume_step`` and always resumed at ``step + 1``.
        """

        enters: ClassVar[TaskState]
        class_version = 2
        epoch: int
        step: int
        resume_step: int
        checkpoint: JSON
        question: JSON
        deadline: datetime
        on_deadline: OnDeadline

        @staticmethod
        def upcast_v1_v2(state: JSON) -> None:
            """Version 1 always resumed at the step after the one that asked."""
            state["resume_step"] = state["step"] + 1

        @override
        def apply(self, task: Task) -> None:
            task.next_step = self.resume_step
            task.checkpoint = dict(self.checkpoint)
            task.failed_attempts = []
            task.last_failure = None
            task.pause = Pause(deadline=self.deadline, on_deadline=self.on_deadline)
            task.history.append(self.question)
            task._clear_lease()
            task._set_state(self.enters, self.question, self.timestamp)

    class StepAttemptFailed(Event):
        """An attempt at step ``step`` ended without an outcome; ``attempt`` counts them from 1.

        ``cause`` is ``error`` (the step raised; ``detail`` is the error's type and message, its
        secrets redacted) or ``timeout`` (it ran past its timeout), both recorded by the holder
        ``worker`` under its lease ``epoch``; or ``lease_lost``, recorded by the next claim (in the
        commit of its ``LeaseGranted``) when the lease of ``worker`` ended while the task was
        working: that worker died, froze or blocked its event loop. A lease given back (a drain)
        is no failed attempt. The count starts again when a step outcome is committed.
        """

        class_version = 1
        epoch: int
        worker: str
        step: int
        attempt: int
        cause: AttemptCause
        detail: str

        @override
        def apply(self, task: Task) -> None:
            task.failed_attempts = [*task.failed_attempts, self.cause]
            task.last_failure = self.detail

    class InputRequested(_PauseRequested):
        """The task asked a person for input (``TASK_STATE_INPUT_REQUIRED``)."""

        enters = TaskState.INPUT_REQUIRED

    class AuthRequested(_PauseRequested):
        """The task asked for credentials (``TASK_STATE_AUTH_REQUIRED``)."""

        enters = TaskState.AUTH_REQUIRED

    class InputReceived(Event):
        """An answer arrived for a paused task; the task is runnable again."""

        enters = TaskState.WORKING
        class_version = 2
        message: JSON
        key_id: str | None

        upcast_v1_v2 = staticmethod(_no_key_id)

        @override
        def apply(self, task: Task) -> None:
            task.history.append(self.message)
            task.latest_input = self.message
            task.pause = None
            task._set_state(TaskState.WORKING, None, self.timestamp)

    class ArtifactChunkAppended(Event):
        """A step produced an artifact, or one more chunk of it."""

        class_version = 1
        epoch: int
        artifact: JSON
        append: bool
        last_chunk: bool

        @override
        def apply(self, task: Task) -> None:
            artifact_id = self.artifact["artifactId"]
            existing = task.artifacts.get(artifact_id)
            if self.append and existing is not None:
                merged = dict(existing)
                merged["parts"] = [*existing["parts"], *self.artifact["parts"]]
                task.artifacts[artifact_id] = merged
            else:
                task.artifacts[artifact_id] = dict(self.artifact)

    class EffectStarted(Event):
        """A run-once side effect with a check (``once(key, fn, check=...)``) is about to be called.

        A run that finds it started but not recorded (the worker died between the call and the
        record) asks the check what the downstream did instead of calling again.
        """

        class_version = 1
        epoch: int
        key: str

        @override
        def apply(self, task: Task) -> None:
            task.effects_started = [*task.effects_started, self.key]

    class EffectRecorded(Event):
        """A run-once side effect succeeded; its result is kept under its key."""

        class_version = 1
        epoch: int
        key: str
        result: Any

        @override
        def apply(self, task: Task) -> None:
            task.effects[self.key] = self.result
            task.effects_started = [key for key in task.effects_started if key != self.key]

    class PushConfigSet(Event):
        """A client registered (or replaced) a push notification config."""

        class_version = 2
        config: JSON
        key_id: str | None

        upcast_v1_v2 = staticmethod(_no_key_id)

        @override
        def apply(self, task: Task) -> None:
            task.push_configs[self.config["id"]] = dict(self.config)

    class PushConfigRemoved(Event):
        """A client deleted a push notification config."""

        class_version = 2
        config_id: str
        key_id: str | None

        upcast_v1_v2 = staticmethod(_no_key_id)

        @override
        def apply(self, task: Task) -> None:
            task.push_configs.pop(self.config_id, None)

    class _Ended(Event):
        """Base of the four terminal events (never recorded itself).

        The task enters ``enters`` with ``message`` as its status message, holds no lease and no
        pause, and what a client sees of it (status, artifacts, history) never changes again:
        only push configs (``PushConfigSet``, ``PushConfigRemoved``) and one ``Expired`` may
        follow (ADR 0025).
        """

        enters: ClassVar[TaskState]
        message: JSON | None

        @override
        def apply(self, task: Task) -> None:
            task._clear_lease()
            task.pause = None
            task._set_state(self.enters, self.message, self.timestamp)

    class Completed(_Ended):
        """The last step finished."""

        enters = TaskState.COMPLETED
        class_version = 1
        epoch: int

    class Failed(_Ended):
        """The task failed: a step said so, or its pause passed the deadline.

        ``epoch`` is the failing holder's lease, or None when the sweeper failed a pause (it
        holds no lease). Version 1 recorded no epoch.
        """

        enters = TaskState.FAILED
        class_version = 2
        epoch: int | None
        reason: str

        @staticmethod
        def upcast_v1_v2(state: JSON) -> None:
            """Version 1 did not record the failing holder's epoch."""
            state["epoch"] = None

    class Canceled(_Ended):
        """A client canceled the task, or its pause passed a deadline that cancels (no lease).

        ``by`` says which; ``key_id`` is the client's API key id. Version 1 had neither: its
        upcaster tells the sweeper's cancels by their reason.
        """

        enters = TaskState.CANCELED
        class_version = 2
        reason: str
        by: CanceledBy
        key_id: str | None

        @staticmethod
        def upcast_v1_v2(state: JSON) -> None:
            """Version 1 recorded who canceled only in the reason's words."""
            state["by"] = "sweeper" if state["reason"].startswith(SWEEPER_CANCEL_REASON) else "client"
            state["key_id"] = None

    class Rejected(_Ended):
        """The skill refused the task."""

        enters = TaskState.REJECTED
        class_version = 1
        epoch: int
        reason: str

    class Expired(Event):
        """A terminal task passed its retention time; it now answers TaskNotFound."""

        class_version = 1
        reason: str

        @override
        def apply(self, task: Task) -> None:
            task.expired = True

    # ------------------------------------------------------------------ state

    tenant: str
    context_id: str
    skill: str
    skill_version: int
    params: JSON
    history: list[JSON]
    latest_input: JSON
    state: TaskState
    status_message: JSON | None
    status_timestamp: datetime
    lease_owner: str | None
    lease_epoch: int
    lease_until: datetime | None
    next_step: int
    checkpoint: JSON
    effects: dict[str, Any]
    artifacts: dict[str, JSON]
    pause: Pause | None
    push_configs: dict[str, JSON]
    expired: bool
    failed_attempts: list[AttemptCause]
    """The causes of the failed attempts at step ``next_step`` so far, oldest first."""
    last_failure: str | None
    """The ``detail`` of the last failed attempt at step ``next_step``."""
    effects_started: list[str]
    """Keys of checked effects started and not recorded (``EffectStarted``)."""

    def __init__(
        self,
        *,
        tenant: str,
        context_id: str,
        skill: str,
        skill_version: int,
        message: JSON,
        params: JSON,
        key_id: str | None = None,
    ) -> None:
        """The initial state, from the fields of ``Submitted``; use ``Task.submit`` to create a task.

        ``eventsourcing`` calls this on every replay of ``Submitted``, after setting the id,
        version and ``created_on`` (the event's timestamp). ``key_id`` (who submitted) stays in
        the event: it is evidence, not state (``store.evidence.audit_trail`` reads it).
        """
        self.tenant = tenant
        self.context_id = context_id
        self.skill = skill
        self.skill_version = skill_version
        self.params = dict(params)
        self.history = [message]
        self.latest_input = message
        self.state = TaskState.SUBMITTED
        self.status_message = None
        self.status_timestamp = self.created_on
        self.lease_owner = None
        self.lease_epoch = 0
        self.lease_until = None
        self.next_step = 0
        self.checkpoint = {}
        self.effects = {}
        self.artifacts = {}
        self.pause = None
        self.push_configs = {}
        self.expired = False
        self.failed_attempts = []
        self.last_failure = None
        self.effects_started = []

    @staticmethod
    def upcast_v1_v2(state: JSON) -> None:
        """Snapshot state of version 1 kept the pause as a dict; version 2 keeps a ``Pause``."""
        pause = state.get("pause")
        if pause is not None:
            state["pause"] = Pause(deadline=pause["deadline"], on_deadline=pause["on_deadline"])

    @staticmethod
    def upcast_v2_v3(state: JSON) -> None:
        """Snapshot state of version 2 counted no failed attempts and no started effects."""
        state["failed_attempts"] = []
        state["last_failure"] = None
        state["effects_started"] = []

    @classmethod
    def states_entered(cls) -> dict[str, TaskState]:
        """Event type name -> the state a task is in after that event, for the events that set one.

        Every other event leaves the state as it was, so a reader of the log (or of its NATS
        messages) knows from an event's type alone whether the task's state may have changed.
        """
        return {
            name: event_class.enters
            for name, event_class in vars(cls).items()
            if isinstance(event_class, type)
            and issubclass(event_class, Task.Event)
            and not name.startswith("_")
            and event_class.enters is not None
        }

    # ------------------------------------------------------------------ creation

    @classmethod
    def submit(
        cls,
        *,
        task_id: UUID,
        now: datetime,
        tenant: str,
        context_id: str,
        skill: str,
        skill_version: int,
        message: JSON,
        params: JSON,
        key_id: str | None = None,
    ) -> Task:
        """Create a task in TASK_STATE_SUBMITTED; ``key_id`` is the client's API key id."""
        if not skill:
            raise InvalidCommandError("a task needs a skill")
        if skill_version < 1:
            raise InvalidCommandError("skill versions start at 1")
        return cls._create(
            cls.Submitted,
            id=task_id,
            timestamp=now,
            tenant=tenant,
            context_id=context_id,
            skill=skill,
            skill_version=skill_version,
            message=copy.deepcopy(message),
            params=copy.deepcopy(params),
            key_id=key_id,
        )

    # ------------------------------------------------------------------ queries

    @property
    def is_terminal(self) -> bool:
        """Whether the task reached a terminal state."""
        return self.state in TERMINAL

    @property
    def ended_at(self) -> datetime | None:
        """When the task reached its terminal state (``None`` while it runs); retention counts from it.

        The terminal event set the status timestamp, and nothing after it moves that (a push
        config on a terminal task changes no status, ADR 0025).
        """
        return self.status_timestamp if self.is_terminal else None

    def lease_valid_at(self, now: datetime) -> bool:
        """Whether some worker holds a lease that has not expired at ``now``."""
        return self.lease_owner is not None and self.lease_until is not None and now < self.lease_until

    def is_claimable_at(self, now: datetime) -> bool:
        """Whether a worker may claim the task at ``now``."""
        return self.state in RUNNABLE and not self.lease_valid_at(now)

    # ------------------------------------------------------------------ worker commands

    def grant_lease(self, *, worker: str, now: datetime, until: datetime) -> int:
        """Give ``worker`` the lease until ``until``; returns the new epoch (the fence)."""
        self._check_not_terminal(TaskState.WORKING)
        if self.state not in RUNNABLE:
            raise NotRunnableError(f"task {self.id} is {self.state}, not runnable")
        _check_after(until, now, "a lease end")
        if self.lease_valid_at(now):
            raise LeaseHeldError(f"task {self.id} is leased to {self.lease_owner} until {self.lease_until}")
        if self.state == TaskState.WORKING and self.lease_owner is not None:
            # A lease that ended unreleased while the task was working: its holder died or froze
            # in the middle of the step, which counts as a failed attempt at it.
            ended = self.lease_until.isoformat() if self.lease_until is not None else "?"
            self._trigger(
                self.StepAttemptFailed,
                now,
                epoch=self.lease_epoch,
                worker=self.lease_owner,
                step=self.next_step,
                attempt=len(self.failed_attempts) + 1,
                cause="lease_lost",
                detail=f"the lease of {self.lease_owner} (epoch {self.lease_epoch}) ended at {ended}"
                " with the step unfinished",
            )
        epoch = self.lease_epoch + 1
        self._trigger(self.LeaseGranted, now, worker=worker, epoch=epoch, until=until)
        return epoch

    def extend_lease(self, *, epoch: int, now: datetime, until: datetime) -> None:
        """Renew the caller's lease during a long step."""
        _check_after(until, now, "a lease end")
        self.check_lease(epoch, now)
        self._trigger(self.LeaseExtended, now, epoch=epoch, until=until)

    def release_lease(self, *, epoch: int, now: datetime, reason: str) -> None:
        """Give the lease back so another worker resumes at once."""
        self.check_lease(epoch, now)
        self._trigger(self.LeaseReleased, now, epoch=epoch, reason=reason)

    def complete_step(
        self, *, epoch: int, now: datetime, step: int, checkpoint: JSON, lease_until: datetime
    ) -> None:
        """Commit step ``step`` (which must be the next one) with its new checkpoint."""
        _check_after(lease_until, now, "a lease end")
        self.check_lease(epoch, now)
        self._check_step(step)
        self._trigger(
            self.StepCompleted, now, epoch=epoch, step=step, checkpoint=checkpoint, lease_until=lease_until
        )

    def save_checkpoint(
        self, *, epoch: int, now: datetime, step: int, checkpoint: JSON, lease_until: datetime
    ) -> None:
        """Commit a sub-step of the running step: the checkpoint moves, the step index does not."""
        _check_after(lease_until, now, "a lease end")
        self.check_lease(epoch, now)
        self._check_step(step)
        self._trigger(
            self.CheckpointSaved, now, epoch=epoch, step=step, checkpoint=checkpoint, lease_until=lease_until
        )

    def report_progress(self, *, epoch: int, now: datetime, message: JSON) -> None:
        """Record a progress message as the task's current status message."""
        self.check_lease(epoch, now)
        self._trigger(self.ProgressReported, now, epoch=epoch, message=message)

    def request_input(
        self,
        *,
        epoch: int,
        now: datetime,
        step: int,
        checkpoint: JSON,
        question: JSON,
        deadline: datetime,
        on_deadline: str = "fail",
        auth: bool = False,
        repeat: bool = False,
    ) -> None:
        """Finish ``step`` by pausing until a person answers or ``deadline`` passes.

        Releases the lease; the answer makes the task runnable again at ``step + 1``, or at
        ``step`` itself with ``repeat`` (a step that asks again after an unusable answer).
        """
        target = TaskState.AUTH_REQUIRED if auth else TaskState.INPUT_REQUIRED
        self.check_lease(epoch, now)
        self._check_transition(target)
        self._check_step(step)
        _check_after(deadline, now, "a pause deadline")
        if on_deadline not in ON_DEADLINE_CHOICES:
            raise InvalidCommandError(f"on_deadline must be one of {ON_DEADLINE_CHOICES}")
        event_class = self.AuthRequested if auth else self.InputRequested
        self._trigger(
            event_class,
            now,
            epoch=epoch,
            step=step,
            resume_step=step if repeat else step + 1,
            checkpoint=checkpoint,
            question=question,
            deadline=deadline,
            on_deadline=on_deadline,
        )

    def append_artifact(
        self, *, epoch: int, now: datetime, artifact: JSON, append: bool = False, last_chunk: bool = True
    ) -> None:
        """Add an artifact, or append one more chunk (``append``) to an existing one."""
        self.check_lease(epoch, now)
        artifact_id, parts = artifact.get("artifactId"), artifact.get("parts")
        if not isinstance(artifact_id, str) or not artifact_id:
            raise InvalidCommandError("an artifact needs a non-empty string artifactId")
        if not isinstance(parts, list) or not parts or not all(isinstance(p, dict) for p in parts):
            raise InvalidCommandError("an artifact needs a non-empty list of parts (objects)")
        self._trigger(
            self.ArtifactChunkAppended,
            now,
            epoch=epoch,
            artifact=artifact,
            append=append,
            last_chunk=last_chunk,
        )

    def fail_attempt(self, *, epoch: int, now: datetime, step: int, cause: AttemptCause, detail: str) -> int:
        """The holder's attempt at step ``step`` raised or timed out; returns the attempt's number."""
        self.check_lease(epoch, now)
        self._check_step(step)
        if cause not in ("error", "timeout"):
            raise InvalidCommandError(f"a holder records an error or a timeout, not {cause!r}")
        attempt = len(self.failed_attempts) + 1
        self._trigger(
            self.StepAttemptFailed,
            now,
            epoch=epoch,
            worker=self.lease_owner,
            step=step,
            attempt=attempt,
            cause=cause,
            detail=detail,
        )
        return attempt

    def start_effect(self, *, epoch: int, now: datetime, key: str) -> None:
        """Say that the checked side effect ``key`` is about to be called (once per key)."""
        self.check_lease(epoch, now)
        if key in self.effects:
            raise EffectAlreadyRecordedError(f"effect {key!r} of task {self.id} is already recorded")
        if key not in self.effects_started:
            self._trigger(self.EffectStarted, now, epoch=epoch, key=key)

    def record_effect(self, *, epoch: int, now: datetime, key: str, result: Any) -> None:
        """Record the result of a run-once side effect under ``key``."""
        self.check_lease(epoch, now)
        if key in self.effects:
            raise EffectAlreadyRecordedError(f"effect {key!r} of task {self.id} is already recorded")
        self._trigger(self.EffectRecorded, now, epoch=epoch, key=key, result=result)

    def complete(self, *, epoch: int, now: datetime, message: JSON | None) -> None:
        """Finish the task successfully."""
        self.check_lease(epoch, now)
        self._check_transition(TaskState.COMPLETED)
        self._trigger(self.Completed, now, epoch=epoch, message=message)

    def fail(self, *, epoch: int, now: datetime, reason: str, message: JSON | None) -> None:
        """A step failed the task."""
        self.check_lease(epoch, now)
        self._check_transition(TaskState.FAILED)
        self._trigger(self.Failed, now, epoch=epoch, reason=reason, message=message)

    def reject(self, *, epoch: int, now: datetime, reason: str, message: JSON | None) -> None:
        """The skill refused the task."""
        self.check_lease(epoch, now)
        self._check_transition(TaskState.REJECTED)
        self._trigger(self.Rejected, now, epoch=epoch, reason=reason, message=message)

    # ------------------------------------------------------------------ client and sweeper commands

    def receive_input(self, *, now: datetime, message: JSON, key_id: str | None = None) -> None:
        """Append a person's answer to a paused task; it becomes runnable again."""
        self._check_not_terminal(TaskState.WORKING)
        if self.state not in INTERRUPTED or self.pause is None:
            raise NotPausedError(f"task {self.id} is {self.state}, not waiting for input")
        if now >= self.pause_deadline:
            raise PauseDeadlinePassedError(
                f"task {self.id} stopped waiting for input at {self.pause_deadline.isoformat()}"
            )
        self._trigger(self.InputReceived, now, message=message, key_id=key_id)

    def cancel(
        self, *, now: datetime, reason: str, message: JSON | None = None, key_id: str | None = None
    ) -> None:
        """A client cancels the task; any lease holder is fenced out by this event."""
        self._check_transition(TaskState.CANCELED)
        self._trigger(self.Canceled, now, reason=reason, message=message, by="client", key_id=key_id)

    def expire_pause(self, *, now: datetime, message: JSON) -> None:
        """Fail or cancel a pause whose deadline passed, as the pause said."""
        if self.state not in INTERRUPTED or self.pause is None:
            raise NotPausedError(f"task {self.id} is {self.state}, not paused")
        if now < self.pause_deadline:
            raise DeadlineNotReachedError(f"task {self.id} may wait until {self.pause_deadline.isoformat()}")
        reason = f"{SWEEPER_CANCEL_REASON} {self.pause_deadline.isoformat()}"
        if self.pause.on_deadline == "cancel":
            self._trigger(self.Canceled, now, reason=reason, message=message, by="sweeper", key_id=None)
        else:
            self._trigger(self.Failed, now, epoch=None, reason=reason, message=message)

    def set_push_config(self, *, now: datetime, config: JSON, key_id: str | None = None) -> None:
        """Register or replace a push notification config (``config['id']`` is its key).

        A terminal task takes configs too (ADR 0025): they change nothing an A2A client sees of
        the task, and no notification follows them (no event that a client sees comes after the
        end), so on a terminal task the config is kept without its secrets (``token``,
        ``authentication.credentials``), which nothing will ever send. An expired task takes none.
        """
        self._check_not_expired()
        config_id, url = config.get("id"), config.get("url")
        if not isinstance(config_id, str) or not config_id or not isinstance(url, str) or not url:
            raise InvalidCommandError("a push config needs a non-empty string id and url")
        self._trigger(
            self.PushConfigSet,
            now,
            config=public_push_config(config) if self.is_terminal else config,
            key_id=key_id,
        )

    def remove_push_config(self, *, now: datetime, config_id: str, key_id: str | None = None) -> None:
        """Delete a push notification config (a terminal task's too); an absent one records nothing."""
        self._check_not_expired()
        if config_id in self.push_configs:
            self._trigger(self.PushConfigRemoved, now, config_id=config_id, key_id=key_id)

    def expire(self, *, now: datetime, reason: str) -> None:
        """Mark a terminal task as past retention. Only terminal tasks expire, and only once."""
        if not self.is_terminal:
            raise InvalidCommandError(f"task {self.id} is {self.state}; only terminal tasks expire")
        if self.expired:
            raise InvalidCommandError(f"task {self.id} already expired")
        self._trigger(self.Expired, now, reason=reason)

    # ------------------------------------------------------------------ checks

    @property
    def pause_deadline(self) -> datetime:
        """The current pause's deadline; raises ``NotPausedError`` when the task is not paused."""
        if self.pause is None:
            raise NotPausedError(f"task {self.id} is {self.state}, not paused")
        return self.pause.deadline

    def check_lease(self, epoch: int, now: datetime) -> None:
        """The fence: raise ``LeaseLostError`` unless ``epoch`` holds a valid lease at ``now``."""
        if self.is_terminal:
            raise LeaseLostError(self.id, epoch, f"the task is {self.state}")
        if self.state != TaskState.WORKING:
            raise LeaseLostError(self.id, epoch, f"the task is {self.state}")
        if epoch != self.lease_epoch or self.lease_owner is None:
            raise LeaseLostError(self.id, epoch, f"the lease is now epoch {self.lease_epoch}")
        if not self.lease_valid_at(now):
            raise LeaseLostError(self.id, epoch, "the lease expired")

    def _check_step(self, step: int) -> None:
        if step != self.next_step:
            raise StepOrderError(f"task {self.id} is at step {self.next_step}, not {step}")

    def _check_not_expired(self) -> None:
        if self.expired:
            raise InvalidCommandError(f"task {self.id} expired; it takes no more events")

    def _check_not_terminal(self, target: TaskState) -> None:
        if self.is_terminal:
            raise TaskTerminalError(self.id, self.state, target)

    def _check_transition(self, target: TaskState) -> None:
        self._check_not_terminal(target)
        if not can_transition(self.state, target):
            raise IllegalTransitionError(self.id, self.state, target)

    # ------------------------------------------------------------------ mutation helpers

    def _trigger(self, event_class: type[Task.Event], now: datetime, **kwargs: Any) -> None:
        # Events own their JSON: a caller that changes its dicts later cannot change the log.
        owned = {k: copy.deepcopy(v) if isinstance(v, dict | list) else v for k, v in kwargs.items()}
        self.trigger_event(event_class, timestamp=now, **owned)

    def _set_state(self, state: TaskState, message: JSON | None, at: datetime) -> None:
        self.state = state
        self.status_message = message
        self.status_timestamp = at

    def _clear_lease(self) -> None:
        self.lease_owner = None
        self.lease_until = None


def _check_after(moment: datetime, now: datetime, what: str) -> None:
    """Refuse a naive time, or one that is not after ``now``."""
    for value, name in ((moment, what), (now, "now")):
        if not isinstance(value, datetime) or value.utcoffset() is None:
            raise InvalidCommandError(f"{name} must be a timezone-aware datetime")
    if moment <= now:
        raise InvalidCommandError(f"{what} must lie after {now.isoformat()}")


def public_push_config(config: JSON) -> JSON:
    """``config`` without ``token`` and ``authentication.credentials``: what only a delivery uses.

    The public form of ``PushConfigSet`` (``store.public_form.event_json``) and the config a terminal
    task keeps (``Task.set_push_config``).
    """
    public = {k: v for k, v in config.items() if k != "token"}
    authentication = public.get("authentication")
    if isinstance(authentication, dict):
        public["authentication"] = {k: v for k, v in authentication.items() if k != "credentials"}
    return public


def lease_end(now: datetime, seconds: float) -> datetime:
    """The end of a lease of ``seconds`` starting at ``now``."""
    return now + timedelta(seconds=seconds)
