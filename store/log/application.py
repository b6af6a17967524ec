"""The task application: the event store (``eventsourcing`` over psycopg 3) and the task use cases.

Every save is one transaction that appends the events (version-checked by the
``(originator_id, originator_version)`` primary key) and writes the run-queue rows derived from
them. A lost race surfaces as ``ConflictError``; the use cases retry it after reloading, through
the one executor of ``store.log.retry``. The domain's ``LeaseLostError`` is raised by the command
itself after a reload, and stops the caller.

The use cases, by caller: the gateway's ``submit`` (and ``submit_leased``), ``answer``, ``cancel``,
``get_visible``, ``set_push_config`` and ``remove_push_config``; the sweeper's ``end_pause`` and
``expire``; the worker's ``claim``, ``commit_step`` (a step's outcome) and ``commit_leased``.
Domain errors propagate from them; the application's own refusals are in ``store.log.errors``
(among them the two ways an answer finds a task not waiting for it, which carry the task's state
or deadline for the caller's message).

Longer than 500 lines on purpose: it is the one place every task use case is named (submit, answer,
cancel, push configs, claim, commit a step, end a pause, expire, erase), each a few lines on the one
retry executor.
"""

from __future__ import annotations

import asyncio
import copy
import functools
import json
import logging
from collections.abc import Iterator, Sequence
from datetime import datetime, timedelta
from typing import Any, ClassVar
from uuid import UUID, uuid4, uuid5

from eventsourcing.application import AggregateNotFoundError, Application
from eventsourcing.domain import DomainEventProtocol
from eventsourcing.persistence import JSONTranscoder, RecordConflictError
from typing_extensions import override

from domain.attempts import StepRules, record_failed_attempt
from domain.clock import Clock
from domain.errors import NotPausedError, PauseDeadlinePassedError
from domain.messages import agent_message
from domain.outcomes import apply_outcome
from domain.skill import Skill, StepOutcome
from domain.states import TaskState
from domain.task import AttemptCause, Task, lease_end
from store.evidence.merkle_log import MerkleLog
from store.log import migrations
from store.log.config import MemoryConfig, StoreConfig, memory_env, postgres_env
from store.log.errors import (
    AnswerTooLateError,
    ConflictError,
    ContextMismatchError,
    NoSuchVersionError,
    NotWaitingForInputError,
    RetentionNotReachedError,
    TaskExpiredError,
    TaskIdCollisionError,
    TaskNotFoundError,
    TooManyPushConfigsError,
)
from store.log.locks import advisory_lock, ddl_lock_name
from store.log.memory import MemoryRunQueueRecorder
from store.log.migrations import MigrationReport
from store.log.parameters import params_of
from store.log.postgres import PostgresRunQueueRecorder
from store.log.retention import RetentionPolicy, span
from store.log.retry import (
    AsyncSave,
    Command,
    retry_lost_connection,
    run_with_retries,
    run_with_retries_async,
)
from store.log.run_queue import RunQueue, RunQueueRow
from store.log.statistics import TableStatistics
from store.log.transcodings import register_domain_transcodings
from store.secrets.secret_parts import (
    holds_sealed,
    needs_sealing,
    redact_message,
    reveal_message,
    seal_message,
)
from store.secrets.task_keys import TaskKey, TaskKeys

log = logging.getLogger(__name__)

APP_NAME = "longhaul"
SNAPSHOT_INTERVAL = 100

JSON = dict[str, Any]

TASK_ID_NAMESPACE = UUID("6f0d5b8e-3a4c-5d7e-9b1a-2c3d4e5f6a7b")
"""Fixed namespace of task ids: ``uuid5(TASK_ID_NAMESPACE, f"{tenant}\\n{messageId}")``.

Deriving the id from the first message's id makes a resend of that message find the task it
created instead of creating a second one. Never change it: existing ids would stop matching.
"""

MAX_PUSH_CONFIGS = 20
"""The most push notification configs one task keeps (each is replayed with the task)."""

Pending = tuple[Task, Sequence[DomainEventProtocol[UUID]], RunQueueRow]
"""A task of a group append, its pending events and its run-queue row after them."""

CANCEL_REASON = "canceled by the client"
CANCEL_TEXT = "Canceled by the client."


def replayed(history: Sequence[Any]) -> Task | None:
    """The task ``history`` (its snapshot, if any, then its events) rebuilds.

    What the library's ``project_aggregate`` does, without its ``isinstance`` check against a
    runtime protocol on every event (the most costly step of a rebuild, on the path of every claim
    and every ``GetTask``): every event here comes from the task's own mapper.
    """
    task: Task | None = None
    for event in history:
        task = event.mutate(task)
    return task


class TaskApplication(Application[UUID]):
    """The Task event store with its inline run queue, and the task use cases."""

    name = APP_NAME
    snapshotting_intervals: ClassVar[dict[type[Any], int]] = {Task: SNAPSHOT_INTERVAL}

    def __init__(self, config: StoreConfig | MemoryConfig) -> None:
        self.config = config
        self.schema_migrations: MigrationReport | None = None
        """What opening the store migrated (``None`` in memory)."""
        if isinstance(config, MemoryConfig):
            super().__init__(env=memory_env(config))
            return
        # Creating and migrating tables is not safe to run twice at once (processes starting
        # together race on DDL): one process at a time, per schema. A schema that a newer release
        # migrated is refused before anything is touched.
        with advisory_lock(config.database_url, ddl_lock_name(config.schema)) as conn:
            migrations.refuse_newer(conn, config.schema)
            migrations.create_schema(conn, config.schema)
            super().__init__(env=postgres_env(config))  # the library creates its own tables
            self.schema_migrations = migrations.migrate(conn, config.schema)

    @override
    def register_transcodings(self, transcoder: JSONTranscoder) -> None:
        super().register_transcodings(transcoder)
        register_domain_transcodings(transcoder)

    @property
    def run_queue(self) -> RunQueue:
        """The run-queue view, its queries and the append wake-up."""
        recorder = self.recorder
        assert isinstance(recorder, (PostgresRunQueueRecorder, MemoryRunQueueRecorder))
        return recorder

    @property
    def task_keys(self) -> TaskKeys:
        """The tasks' secret keys, outside the log (``store.secrets.task_keys``)."""
        recorder = self.recorder
        assert isinstance(recorder, (PostgresRunQueueRecorder, MemoryRunQueueRecorder))
        return recorder.task_keys

    @functools.cached_property
    def merkle_log(self) -> MerkleLog | None:
        """The sequencer's Merkle log and checkpoints (``store.evidence.merkle_log``); none in memory."""
        recorder = self.recorder
        if not isinstance(recorder, PostgresRunQueueRecorder):
            return None
        return MerkleLog(recorder.datastore, chain_table=recorder.chain_table)

    @functools.cached_property
    def statistics(self) -> TableStatistics | None:
        """The planner's statistics of the store's tables (``store.log.statistics``); none in memory."""
        recorder = self.recorder
        if not isinstance(recorder, PostgresRunQueueRecorder):
            return None
        return TableStatistics(recorder.datastore)

    def get(self, task_id: UUID, version: int | None = None) -> Task:
        """Rebuild a task from its snapshot and events (at ``version``, if given).

        The task as it is loads with one statement (``get_many``, tried again after a lost
        connection as the library's own reads are); a past version, or any version while the
        library's aggregate cache is on, through the library's repository (a snapshot read and an
        events read).
        """
        if version is None and self.repository.cache is None:
            found = retry_lost_connection(functools.partial(self.get_many, [task_id])).get(task_id)
            if found is None:
                raise TaskNotFoundError(str(task_id))
            return found
        try:
            task: Task = self.repository.get(task_id, version=version)
        except AggregateNotFoundError as error:
            raise TaskNotFoundError(str(task_id)) from error
        assert isinstance(task, Task)
        return task

    def task_at(self, task_id: UUID, version: int) -> Task:
        """The task as it was after its event at ``version`` (from the snapshot at or before it).

        Raises:
            TaskNotFoundError: No such task.
            NoSuchVersionError: ``version`` is not between 1 and the task's last version.
        """
        if version < 1:
            raise NoSuchVersionError(task_id, version, self.get(task_id).version)
        task = self.get(task_id, version=version)  # asked past its last version, the task as it is
        if task.version != version:
            raise NoSuchVersionError(task_id, version, task.version)
        return task

    def get_many(self, task_ids: Sequence[UUID]) -> dict[UUID, Task]:
        """Rebuild several tasks with one statement in all (missing ids are left out).

        The recorder fetches their latest snapshots and the events after them: what ``get``
        does one task at a time (in memory there are no queries to save).
        """
        histories = self.run_queue.select_histories(list(dict.fromkeys(task_ids)))
        assert self.snapshots is not None
        tasks: dict[UUID, Task] = {}
        for task_id, stored in histories.items():
            history = (
                [self.snapshots.mapper.to_domain_event(stored.snapshot)]
                if stored.snapshot is not None
                else []
            )
            history += [self.mapper.to_domain_event(e) for e in stored.events]
            task = replayed(history)
            if task is not None:
                tasks[task_id] = task
        return tasks

    def save_tasks(self, *tasks: Task, new_keys: Sequence[TaskKey] = ()) -> list[int]:
        """Append every pending event of ``tasks`` in one transaction; returns log positions.

        ``new_keys`` are the keys of tasks whose first secrets these events carry, inserted in
        the same transaction; the keys of tasks that end here are destroyed in it.

        Raises ``ConflictError`` if another writer appended to any of them first (or gave one of
        them a key first); then nothing was written.
        """
        rows = [RunQueueRow.of(t) for t in tasks if t.pending_events]
        try:
            recordings = self.save(
                *tasks, run_queue=rows, task_keys=new_keys, task_keys_destroyed=_keys_to_destroy(tasks)
            )
        except RecordConflictError as error:
            raise ConflictError(str(error)) from error
        return [r.notification.id for r in recordings]

    def save_each(self, *tasks: Task) -> list[Exception | None]:
        """Append the pending events of ``tasks``, grouped in one transaction when possible.

        A task someone else appended to first is left out of the group, and the others are
        appended together (``RunQueue.insert_events_each``): a lost race costs its own task only.
        When the group fails otherwise (a race only the append itself can see, or a task whose
        events cannot be stored), each task is saved alone, so one task's trouble costs no other.
        Returns, per task, ``None`` (saved) or the error that refused it (``ConflictError`` for a
        lost race).
        """
        batch = [(t, list(t.pending_events), RunQueueRow.of(t)) for t in tasks if t.pending_events]
        try:
            lost = self._append_each(batch)
        except Exception as error:  # noqa: BLE001 - split the group up to find who failed
            log.debug("group of %d failed (%r); saving each alone", len(batch), error)
        else:
            self._snapshot_kept(batch, lost)
            return [
                ConflictError(f"task {t.id}: another writer appended to it first") if t.id in lost else None
                for t in tasks
            ]
        outcome: dict[int, Exception | None] = {}
        for task, events, row in batch:
            try:
                self.save(*events, run_queue=[row], task_keys_destroyed=_keys_to_destroy([task]))
                outcome[id(task)] = None
            except RecordConflictError as error:
                outcome[id(task)] = ConflictError(str(error))
            except Exception as error:  # noqa: BLE001 - reported to that task's caller
                outcome[id(task)] = error
        return [outcome.get(id(t)) for t in tasks]

    def _append_each(self, batch: Sequence[Pending]) -> frozenset[UUID]:
        """One group append that keeps the tasks which did not lose a race; returns those that did.

        The tasks' pending events are collected once the append returned (the split that follows
        a failure saves the copies in ``batch``).
        """
        if not batch:
            return frozenset()
        events = [event for _, pending, _ in batch for event in pending]
        appended = self.run_queue.insert_events_each(
            [self.mapper.to_stored_event(event) for event in events],
            run_queue=[row for _, _, row in batch],
            task_keys_destroyed=_keys_to_destroy([task for task, _, _ in batch]),
        )
        for task, _, _ in batch:
            task.collect_events()
        return appended.lost

    def _snapshot_kept(self, batch: Sequence[Pending], lost: frozenset[UUID]) -> None:
        """Snapshot the appended tasks that reached the interval, as ``save`` does after its append."""
        for task, pending, _ in batch:
            if task.id in lost:
                continue
            for event in pending:
                if event.originator_version % SNAPSHOT_INTERVAL == 0:
                    self.take_snapshot(task.id, version=event.originator_version)

    def reveal(self, task: Task, message: JSON) -> JSON:
        """``message`` of ``task`` with its sealed parts opened (for the running step only).

        Reads the task's key only when the message holds a sealed part.

        Raises:
            SecretUnreadableError: The task's key was destroyed, or a sealed part was altered.
        """
        if not holds_sealed(message):
            return message
        return reveal_message(message, self.task_keys.get(task.id), task_id=task.id)

    def erase_tenant(self, tenant: str) -> int:
        """Destroy the keys of every task of ``tenant`` (``longhaul erase``); returns how many.

        Their sealed parts stay in the log as ciphertext nobody can read; a live task whose
        step needs one fails (``SecretUnreadableError``, see the step runner).
        """
        erased = self.task_keys.erase_tenant(tenant)
        log.info("erased the keys of %d tasks of tenant %s", erased, tenant)
        return erased

    def history(self, task_id: UUID) -> Iterator[DomainEventProtocol[UUID]]:
        """Every event of a task, oldest first."""
        return iter(self.events.get(task_id))

    def close(self) -> None:
        """Release the connection pool."""
        super().close()

    # ------------------------------------------------------------------ the gateway's use cases

    def submit(
        self,
        *,
        tenant: str,
        message: JSON,
        skill: Skill,
        clock: Clock,
        push_config: JSON | None = None,
        key_id: str | None = None,
    ) -> Task:
        """Start a task for a client's first ``message``, or answer a resend with the task it started.

        ``submit_leased`` is the same, with the lease granted in the same commit.

        The task id derives from tenant and ``messageId`` (``task_id_for``). The task is saved
        without reading first: the append itself finds an existing task (a resend, or the same
        message sent concurrently by a caller that won), which is then loaded and checked.

        Args:
            tenant: The caller's tenant.
            message: The client's message in wire shape (``messageId``, optional ``contextId``); the
                skill's parameters are its first ``data`` part that is an object.
            skill: The skill version the task is pinned to.
            clock: The time of the submission.
            push_config: A push notification config (with its ``id``) to register in the same
                commit as ``Submitted``. A resend's config is not applied: the first send's
                commit registered it.
            key_id: The id of the API key the client called with, recorded in its events.

        Raises:
            TaskExpiredError: A resend of a task that expired.
            ContextMismatchError: A resend naming another context than its task's.
            TaskIdCollisionError: The derived id names a task another message started.
        """
        task, _ = self._submit(
            tenant=tenant, message=message, skill=skill, clock=clock, push_config=push_config, key_id=key_id
        )
        return task

    def submit_leased(
        self,
        *,
        tenant: str,
        message: JSON,
        skill: Skill,
        clock: Clock,
        worker: str,
        lease_seconds: float,
        push_config: JSON | None = None,
        key_id: str | None = None,
    ) -> tuple[Task, Task | None]:
        """``submit``, with the new task's lease granted to ``worker`` in the submission's own commit.

        A worker slot of the gateway's own process takes the task at once, with no queue hop
        (ADR 0032). The commit holds ``Submitted`` and ``LeaseGranted`` (epoch 1, until
        ``lease_seconds`` after the submission): the lease is the fence, exactly as a claim's. If
        the process dies after this commit, the lease expires and any worker takes the task over.

        Returns:
            The task as committed (for the caller's answer), and the worker's own copy of it when
            this call granted the lease; ``None`` for a resend (nothing was appended: the task the
            first send started is returned, and whoever holds it keeps it).
        """
        return self._submit(
            tenant=tenant,
            message=message,
            skill=skill,
            clock=clock,
            push_config=push_config,
            key_id=key_id,
            lease=(worker, lease_seconds),
        )

    def _submit(
        self,
        *,
        tenant: str,
        message: JSON,
        skill: Skill,
        clock: Clock,
        push_config: JSON | None,
        key_id: str | None,
        lease: tuple[str, float] | None = None,
    ) -> tuple[Task, Task | None]:
        """The one submission: the new task saved without a read first, or the resent one loaded."""
        task_id = task_id_for(tenant, message["messageId"])
        context_id = message.get("contextId") or str(uuid4())
        first = {**message, "taskId": str(task_id), "contextId": context_id}
        key = TaskKey.new(task_id, tenant) if needs_sealing(first) else None
        task = Task.submit(
            task_id=task_id,
            now=clock(),
            tenant=tenant,
            context_id=context_id,
            skill=skill.name,
            skill_version=skill.version,
            message=seal_message(first, key, version=1) if key is not None else first,
            params=params_of(message),
            key_id=key_id,
        )
        if push_config is not None:
            task.set_push_config(now=task.created_on, config=push_config, key_id=key_id)
        if lease is not None:
            worker, seconds = lease
            task.grant_lease(worker=worker, now=task.created_on, until=lease_end(task.created_on, seconds))
        try:
            if key is not None:
                self.save_tasks(task, new_keys=[key])
            else:
                self.save_tasks(task)
        except ConflictError:
            return self._resent(self.get(task_id), tenant=tenant, message=message), None
        _lifecycle(task, "submitted: skill %s v%d, tenant %s", skill.name, skill.version, tenant)
        if lease is None:
            return task, None
        _lifecycle(
            task,
            "handed to %s at epoch %d in its submission's commit",
            lease[0],
            task.lease_epoch,
            worker=lease[0],
            epoch=task.lease_epoch,
        )
        return task, copy.deepcopy(task)  # the runner's copy: its commits never touch the answer's

    def get_visible(self, task_id: UUID, *, tenant: str) -> Task:
        """The task, if it exists for ``tenant`` and has not expired.

        Raises:
            TaskNotFoundError: No such task for this tenant (another tenant's is never told apart).
            TaskExpiredError: The task expired.
        """
        try:
            task = self.get(task_id)
        except TaskNotFoundError:
            task = None
        if task is None or task.tenant != tenant:
            raise TaskNotFoundError(f"task {str(task_id)!r} not found")
        if task.expired:
            raise TaskExpiredError(task_id)
        return task

    def answer(
        self,
        task_id: UUID,
        *,
        tenant: str,
        message: JSON,
        clock: Clock,
        push_config: JSON | None = None,
        key_id: str | None = None,
    ) -> Task:
        """Append a client's answer to a paused task; it becomes runnable again.

        ``push_config`` (with its ``id``) is registered, or replaced, in the same commit.
        ``key_id`` (the client's API key id) is recorded in the events.

        A resend of an answer the task received before (the same message: ``messageId``, parts
        and all) appends nothing and returns the task as it is now, whatever its state; a resent
        ``push_config`` is not applied (the first send's commit registered it). The same
        ``messageId`` with other content is a new answer: the A2A TCK reuses one id for a
        task's first message and its answers. The first message itself is never taken for an
        answer (ADR 0019).

        Raises:
            TaskNotFoundError: See ``get_visible``.
            ContextMismatchError: ``message`` names another context than the task's.
            NotWaitingForInputError: The task is not paused.
            AnswerTooLateError: The pause's deadline passed.
            TaskTerminalError: The task ended (terminal tasks are immutable).
        """
        resent = False
        new_keys: list[TaskKey] = []

        def receive(task: Task, now: datetime) -> None:
            nonlocal resent
            new_keys.clear()
            context_id = message.get("contextId")
            if context_id is not None and context_id != task.context_id:
                raise ContextMismatchError(
                    f"contextId {context_id!r} does not match the context of task {task.id} "
                    f"({task.context_id!r})"
                )
            answer = {**message, "taskId": str(task.id), "contextId": task.context_id}
            resent = _received_before(answer, task.history[1:])  # [0] is the first message: never an answer
            if resent:
                return
            # Credentials: every part of an answer to TASK_STATE_AUTH_REQUIRED, and any part
            # the client marked secret, is stored sealed under the task's key.
            all_parts = task.state == TaskState.AUTH_REQUIRED
            if needs_sealing(answer, all_parts=all_parts):
                key = self.task_keys.get(task.id)  # read after the load: a key that won a race shows
                if key is None:
                    key = TaskKey.new(task.id, task.tenant)
                    new_keys.append(key)
                answer = seal_message(answer, key, version=task.version + 1, all_parts=all_parts)
            try:
                task.receive_input(now=now, message=answer, key_id=key_id)
            except NotPausedError:
                raise NotWaitingForInputError(task.id, task.state) from None
            except PauseDeadlinePassedError:
                raise AnswerTooLateError(task.id, task.pause_deadline) from None
            if push_config is not None:
                _set_push_config(task, now, push_config, key_id)

        task = run_with_retries(
            receive,
            load=functools.partial(self.get_visible, task_id, tenant=tenant),
            save=lambda task: self.save_tasks(task, new_keys=new_keys) if new_keys else self.save_tasks(task),
            clock=clock,
        )
        if resent:
            _lifecycle(
                task, "answer %r resent: it was received before; nothing appended", message["messageId"]
            )
        else:
            _lifecycle(task, "resumed: answer received, runnable again at step %d", task.next_step)
        return task

    def cancel(self, task_id: UUID, *, tenant: str, clock: Clock, key_id: str | None = None) -> Task:
        """Cancel a task that has not ended; the worker holding it is fenced out.

        Raises:
            TaskNotFoundError: See ``get_visible``.
            TaskTerminalError: The task already ended.
        """

        def cancel(task: Task, now: datetime) -> None:
            task.cancel(
                now=now,
                reason=CANCEL_REASON,
                message=agent_message(task, CANCEL_TEXT, message_id=str(uuid4())),
                key_id=key_id,
            )

        task = self._run(cancel, task_id, tenant=tenant, clock=clock)
        _lifecycle(task, "finished: %s (%s)", task.state, CANCEL_REASON)
        return task

    def set_push_config(
        self, task_id: UUID, *, tenant: str, config: JSON, clock: Clock, key_id: str | None = None
    ) -> Task:
        """Register or replace a push notification config (``config['id']`` is its key).

        The URL is not checked here: the caller checks it first (``store.deliveries.push_urls``), outside
        the retried command, because the check resolves the host.

        Raises:
            TaskNotFoundError: See ``get_visible``.
            TooManyPushConfigsError: A new id on a task that has ``MAX_PUSH_CONFIGS`` already.

        A terminal task takes configs too, kept without their secrets: nothing follows its end
        that a webhook would deliver (ADR 0025).
        """
        return self._run(
            lambda task, now: _set_push_config(task, now, config, key_id), task_id, tenant=tenant, clock=clock
        )

    def remove_push_config(
        self, task_id: UUID, *, tenant: str, config_id: str, clock: Clock, key_id: str | None = None
    ) -> Task:
        """Delete a push notification config; deleting an absent one appends nothing.

        Raises:
            TaskNotFoundError: See ``get_visible``.
        """
        return self._run(
            lambda task, now: task.remove_push_config(now=now, config_id=config_id, key_id=key_id),
            task_id,
            tenant=tenant,
            clock=clock,
        )

    # ------------------------------------------------------------------ the sweeper's use cases

    def end_pause(self, task_id: UUID, *, clock: Clock) -> Task:
        """Fail or cancel a pause whose deadline passed, as the pause said, with a status message.

        Raises:
            DomainError: The task is no longer paused, or its deadline has not passed.
        """

        def expire_pause(task: Task, now: datetime) -> None:
            deadline = task.pause_deadline if task.pause is not None else now
            kind = "input" if task.state == TaskState.INPUT_REQUIRED else "authorization"
            text = f"No {kind} arrived before the deadline {deadline.isoformat()}; the task stopped waiting."
            task.expire_pause(now=now, message=agent_message(task, text, message_id=str(uuid4())))

        task = run_with_retries(
            expire_pause, load=functools.partial(self.get, task_id), save=self.save_tasks, clock=clock
        )
        _lifecycle(task, "finished: %s (no answer before the pause's deadline)", task.state)
        return task

    def expire(self, task_id: UUID, *, retention: timedelta | RetentionPolicy, clock: Clock) -> Task:
        """Mark a terminal task as past its retention: from now on it answers TaskNotFound.

        ``retention`` is one period for every task, or a policy that gives each task its own
        (per tenant and skill); the task's own is checked here against the time it ended (a push
        config set on it since does not move that, ADR 0025).

        Raises:
            DomainError: The task is not terminal, or already expired.
            RetentionNotReachedError: The task's own retention has not passed yet.
        """
        policy = retention if isinstance(retention, RetentionPolicy) else RetentionPolicy(retention)

        def expire(task: Task, now: datetime) -> None:
            own = policy.of(task.tenant, task.skill)
            ended_at = task.ended_at
            if ended_at is not None and not task.expired and now - ended_at < own:
                raise RetentionNotReachedError(
                    f"task {task.id} ended at {ended_at.isoformat()}; its retention is {own}"
                )
            task.expire(now=now, reason=f"retention of {span(own)} after the task ended")

        return run_with_retries(
            expire, load=functools.partial(self.get, task_id), save=self.save_tasks, clock=clock
        )

    # ------------------------------------------------------------------ the worker's use cases

    async def claim(self, task: Task, *, worker: str, now: datetime, until: datetime, save: AsyncSave) -> int:
        """Grant ``worker`` the lease on ``task`` at the version read; returns the new epoch.

        Never retried: a lost race (``ConflictError``) or a refusal (``DomainError``) means
        another worker or a client got there first, and the worker moves on.
        """
        # A lease still recorded at a claim has expired (a valid one refuses the claim): its holder
        # neither released it nor paused nor ended the task; it was killed, say.
        previous, previous_until = task.lease_owner, task.lease_until
        epoch = task.grant_lease(worker=worker, now=now, until=until)
        await save(task)
        if previous is None:
            _lifecycle(task, "claimed by %s at epoch %d", worker, epoch, worker=worker, epoch=epoch)
        else:
            _lifecycle(
                task,
                "claimed by %s at epoch %d: take-over after an expired lease of %s (epoch %d, ended %s)",
                *(worker, epoch, previous, epoch - 1, previous_until.isoformat() if previous_until else "?"),
                worker=worker,
                epoch=epoch,
            )
        return epoch

    async def commit_leased(self, task: Task, command: Command, *, clock: Clock, save: AsyncSave) -> Task:
        """Apply a worker's fenced ``command`` to its copy ``task`` and save it with ``save``.

        After a lost race the task is reloaded and the command re-applied: its lease check
        decides whether the lease still holds. ``LeaseLostError`` propagates at once.

        Returns:
            The saved task (a reloaded copy if a race was lost).
        """
        before = task.state
        saved = await run_with_retries_async(
            command,
            task=task,
            load=functools.partial(asyncio.to_thread, self.get, task.id),
            save=save,
            clock=clock,
        )
        if saved.state != before:
            _log_step_outcome(saved)
        return saved

    async def commit_step(
        self,
        task: Task,
        *,
        epoch: int,
        step: int,
        outcome: StepOutcome,
        steps_total: int,
        max_pause: timedelta,
        lease_seconds: float,
        clock: Clock,
        save: AsyncSave,
    ) -> Task:
        """Record ``outcome`` of step ``step`` on the leased ``task`` (the worker's copy), fenced.

        The use case a step ends in: one command fenced by ``epoch`` that applies the outcome's domain
        commands (``domain.outcomes.apply_outcome``), saved with ``save`` (the worker's group
        committer) through ``commit_leased`` and so the one retry policy. A completed step
        extends the lease by ``lease_seconds`` from the commit time; an agent message the
        outcome writes gets a fresh id on each attempt.

        Raises:
            LeaseLostError: The lease no longer holds (nothing was recorded).

        Returns:
            The saved task (a reloaded copy if a race was lost).
        """

        def command(copy: Task, now: datetime) -> None:
            apply_outcome(
                copy,
                epoch=epoch,
                now=now,
                step=step,
                outcome=outcome,
                steps_total=steps_total,
                max_pause=max_pause,
                lease_until=lease_end(now, lease_seconds),
                message_id=str(uuid4()),
            )

        return await self.commit_leased(task, command, clock=clock, save=save)

    async def commit_failed_attempt(
        self,
        task: Task,
        *,
        epoch: int,
        rules: StepRules,
        cause: AttemptCause,
        detail: str,
        retried: bool,
        clock: Clock,
        save: AsyncSave,
    ) -> Task:
        """Record that an attempt at step ``rules.index`` failed (raised or timed out), fenced.

        The use case a failed attempt ends in: ``domain.attempts.record_failed_attempt`` (which
        fails the task too once the step's policy is spent) in one fenced commit through
        ``commit_leased``. A worker that died records nothing: the next claim does (``claim``).

        Raises:
            LeaseLostError: The lease no longer holds (nothing was recorded).
        """

        def command(copy: Task, now: datetime) -> None:
            record_failed_attempt(
                copy,
                epoch=epoch,
                now=now,
                rules=rules,
                cause=cause,
                detail=detail,
                retried=retried,
                message_id=str(uuid4()),
            )

        return await self.commit_leased(task, command, clock=clock, save=save)

    # ------------------------------------------------------------------ helpers

    def _run(self, command: Command, task_id: UUID, *, tenant: str, clock: Clock) -> Task:
        """``command`` on the task ``tenant`` sees, saved directly, retried after lost races."""
        return run_with_retries(
            command,
            load=functools.partial(self.get_visible, task_id, tenant=tenant),
            save=self.save_tasks,
            clock=clock,
        )

    @staticmethod
    def _resent(task: Task, *, tenant: str, message: JSON) -> Task:
        """The task an earlier send of ``message`` started (a resend is answered with it)."""
        message_id = message["messageId"]
        first_id = task.history[0].get("messageId") if task.history else None
        if task.tenant != tenant or first_id != message_id:
            raise TaskIdCollisionError(message_id)
        if task.expired:
            raise TaskExpiredError(task.id)
        context_id = message.get("contextId")
        if context_id is not None and context_id != task.context_id:
            raise ContextMismatchError(
                f"messageId {message_id!r} already started task {task.id} in context "
                f"{task.context_id!r}, not {context_id!r}"
            )
        return task


def _set_push_config(task: Task, now: datetime, config: JSON, key_id: str | None) -> None:
    """Register or replace ``config`` on ``task``, within ``MAX_PUSH_CONFIGS``."""
    if config.get("id") not in task.push_configs and len(task.push_configs) >= MAX_PUSH_CONFIGS:
        raise TooManyPushConfigsError(task.id, MAX_PUSH_CONFIGS)
    task.set_push_config(now=now, config=config, key_id=key_id)


def _received_before(answer: JSON, earlier: Sequence[JSON]) -> bool:
    """Whether ``answer`` is one of the ``earlier`` messages: the same id, and the same content.

    Secret parts are stored sealed (with a fresh nonce each time), so they are compared as they
    are shown: redacted; an answer to an auth pause had every part sealed.
    """
    message_id = answer.get("messageId")
    same_id = [m for m in earlier if m.get("messageId") == message_id]
    if not same_id:
        return False
    shown = {dumps_key(redact_message(answer, all_parts=every)) for every in (False, True)}
    return any(dumps_key(redact_message(m)) in shown for m in same_id)


def dumps_key(message: JSON) -> str:
    """A canonical text of ``message`` to compare two messages by."""
    return json.dumps(message, sort_keys=True, default=str)


def _keys_to_destroy(tasks: Sequence[Task]) -> list[UUID]:
    """The tasks that end (or expire) in this append and hold sealed secrets: their keys go with it."""
    return [
        t.id for t in tasks if t.is_terminal and t.pending_events and any(holds_sealed(m) for m in t.history)
    ]


def _lifecycle(task: Task, text: str, *args: object, **fields: object) -> None:
    """One INFO line for a step of a task's life: ``task <id> <text>``, with ``task_id`` for JSON logs."""
    log.info("task %s " + text, task.id, *args, extra={"task_id": str(task.id), **fields})


def _log_step_outcome(task: Task) -> None:
    """The line for a worker's commit that paused or ended ``task``."""
    if task.state in (TaskState.INPUT_REQUIRED, TaskState.AUTH_REQUIRED):
        deadline = task.pause_deadline.isoformat() if task.pause is not None else "?"
        _lifecycle(task, "paused: %s until %s", task.state, deadline)
    elif task.is_terminal:
        _lifecycle(task, "finished: %s", task.state)


def task_id_for(tenant: str, message_id: str) -> UUID:
    """The id of the task that the first message ``message_id`` of ``tenant`` starts."""
    return uuid5(TASK_ID_NAMESPACE, f"{tenant}\n{message_id}")
