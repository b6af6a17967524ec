"""The durable ``StepContext`` a running step sees."""

from __future__ import annotations

import asyncio
import copy
from collections.abc import AsyncIterator, Awaitable, Callable
from datetime import datetime
from typing import Any, ParamSpec, TypeVar
from uuid import uuid4

from domain.messages import agent_message
from domain.skill import JSON, FileContent
from domain.task import Task
from store.secrets import holds_sealed
from workers.lease import LeasedTask
from workers.step_files import StepFiles

P = ParamSpec("P")
R = TypeVar("R")


class NoFileStoreError(RuntimeError):
    """The worker was built without a file store: a step cannot write or read files."""


class DrainRequestedError(BaseException):
    """The worker is shutting down: the step stops at this commit and the lease is released.

    A ``BaseException`` (like ``asyncio.CancelledError``), so that a step's own
    ``except Exception`` does not swallow it.
    """


async def reveal_input(lease: LeasedTask) -> JSON:
    """The leased task's latest input with its sealed (secret) parts opened, for the next step.

    The key is read (in a thread: a query) only when the input holds a sealed part.

    Raises:
        SecretUnreadableError: The task's key was destroyed (``longhaul erase``) or a sealed
            part was altered: the step cannot be given what the client sent.
    """
    task = lease.task
    if not holds_sealed(task.latest_input):
        return task.latest_input
    return await asyncio.to_thread(lease.store.reveal, task, task.latest_input)


class DurableStepContext:
    """Implements ``domain.skill.StepContext`` on top of a held lease.

    Every write (a sub-step checkpoint, an effect result, an artifact chunk, a progress message)
    is its own fenced commit. Checkpoint commits also extend the lease; the runner's background
    renewal keeps the lease alive through long steps either way.
    """

    def __init__(
        self,
        lease: LeasedTask,
        step: int,
        draining: asyncio.Event | None = None,
        *,
        latest_input: JSON | None = None,
        files: StepFiles | None = None,
    ) -> None:
        self._lease = lease
        self._files = files
        self._step = step
        self._draining = draining or asyncio.Event()
        task = lease.task
        self._checkpoint: JSON = copy.deepcopy(task.checkpoint)
        self._params: JSON = copy.deepcopy(task.params)
        # ``latest_input``: the task's latest input with its sealed parts opened (``reveal_input``);
        # it lives in this object only and is never committed.
        self._latest_input: JSON = copy.deepcopy(
            latest_input if latest_input is not None else task.latest_input
        )

    @property
    def task_id(self) -> str:
        """The task's id."""
        return str(self._lease.task_id)

    @property
    def checkpoint(self) -> JSON:
        """The checkpoint as of the last commit (a private copy)."""
        return self._checkpoint

    @property
    def params(self) -> JSON:
        """Skill parameters from the first message's data part."""
        return self._params

    @property
    def latest_input(self) -> JSON:
        """The latest client message, its secret parts in clear (as the client sent them)."""
        return self._latest_input

    async def once(
        self,
        key: str,
        fn: Callable[[str], Awaitable[Any]],
        *,
        check: Callable[[str], Awaitable[Any]] | None = None,
    ) -> Any:
        """Run ``fn`` at most once for this task and ``key``; record and return its result.

        With ``check``, an ``EffectStarted`` commit comes before the call; a run that finds the
        effect started and not recorded asks ``check`` what the downstream did (see
        ``domain.skill.StepContext.once``). Right before ``fn`` the lease is made sure of
        (``LeasedTask.guard``), so a worker that lost it never calls beside the next holder.
        """
        recorded = self._lease.task.effects
        if key in recorded:
            return copy.deepcopy(recorded[key])
        idempotency_key = f"{self.task_id}:{key}"
        result: Any = None
        if check is not None and key in self._lease.task.effects_started:
            await self._lease.guard()
            result = await check(idempotency_key)
        if result is None:
            if check is not None:

                def start(task: Task, now: datetime) -> None:
                    if key not in task.effects:
                        task.start_effect(epoch=self._lease.epoch, now=now, key=key)

                await self._lease.commit(start)
                if key in self._lease.task.effects:  # recorded meanwhile (a reloaded copy): done
                    return copy.deepcopy(self._lease.task.effects[key])
            await self._lease.guard()
            result = await fn(idempotency_key)

        def record(task: Task, now: datetime) -> None:
            if key not in task.effects:
                task.record_effect(epoch=self._lease.epoch, now=now, key=key, result=result)

        await self._lease.commit(record)
        self._lease.beat()
        result = copy.deepcopy(self._lease.task.effects[key])
        self._stop_if_draining()
        return result

    async def run_sync(self, fn: Callable[P, R], /, *args: P.args, **kwargs: P.kwargs) -> R:
        """Run blocking code in a thread, off the event loop (``asyncio.to_thread``)."""
        return await asyncio.to_thread(fn, *args, **kwargs)

    async def commit(self, checkpoint: JSON, *, progress: str | None = None) -> None:
        """Save ``checkpoint`` mid-step; with ``progress``, a progress message in the same commit."""
        saved = copy.deepcopy(checkpoint)

        def save(task: Task, now: datetime) -> None:
            task.save_checkpoint(
                epoch=self._lease.epoch,
                now=now,
                step=self._step,
                checkpoint=saved,
                lease_until=self._lease.lease_until(now),
            )
            if progress is not None:
                self._report(task, now, progress)

        await self._lease.commit(save)
        self._lease.beat()
        self._checkpoint = copy.deepcopy(checkpoint)
        self._stop_if_draining()

    async def emit_artifact(
        self,
        artifact: JSON,
        *,
        append: bool = False,
        last_chunk: bool = True,
        checkpoint: JSON | None = None,
        progress: str | None = None,
    ) -> None:
        """Commit an artifact or one chunk of it; ``checkpoint`` and ``progress`` in the same commit."""
        chunk = copy.deepcopy(artifact)
        saved = copy.deepcopy(checkpoint) if checkpoint is not None else None

        def emit(task: Task, now: datetime) -> None:
            task.append_artifact(
                epoch=self._lease.epoch, now=now, artifact=chunk, append=append, last_chunk=last_chunk
            )
            if saved is not None:
                task.save_checkpoint(
                    epoch=self._lease.epoch,
                    now=now,
                    step=self._step,
                    checkpoint=saved,
                    lease_until=self._lease.lease_until(now),
                )
            if progress is not None:
                self._report(task, now, progress)

        await self._lease.commit(emit)
        self._lease.beat()
        if checkpoint is not None:
            self._checkpoint = copy.deepcopy(checkpoint)
        self._stop_if_draining()

    async def emit_file(
        self,
        content: FileContent,
        *,
        filename: str,
        media_type: str = "application/octet-stream",
        artifact_id: str | None = None,
        append: bool = False,
        last_chunk: bool = True,
        checkpoint: JSON | None = None,
        progress: str | None = None,
    ) -> JSON:
        """Keep the bytes in the file store, then commit the artifact that names them (see the protocol)."""
        part = await self._file_store().keep(content, media_type=media_type, filename=filename)
        self._lease.beat()  # storing a large file is work done: the step is not hanging
        artifact = {"artifactId": artifact_id or filename, "name": filename, "parts": [part]}
        await self.emit_artifact(
            artifact, append=append, last_chunk=last_chunk, checkpoint=checkpoint, progress=progress
        )
        return part

    def read_file(self, part: JSON) -> AsyncIterator[bytes]:
        """The bytes of a file part a client sent, streamed."""
        return self._file_store().open(part)

    def _file_store(self) -> StepFiles:
        if self._files is None:
            raise NoFileStoreError("this worker has no file store (LONGHAUL_FILE_STORE_URL)")
        return self._files

    async def progress(self, text: str) -> None:
        """Commit a progress status message."""

        def report(task: Task, now: datetime) -> None:
            self._report(task, now, text)

        await self._lease.commit(report)
        self._lease.beat()
        self._stop_if_draining()

    def _report(self, task: Task, now: datetime, text: str) -> None:
        task.report_progress(
            epoch=self._lease.epoch, now=now, message=agent_message(task, text, message_id=str(uuid4()))
        )

    def _stop_if_draining(self) -> None:
        """On shutdown, a commit is where a running step stops: everything before it is saved."""
        if self._draining.is_set():
            raise DrainRequestedError
