"""The port through which the gateway hands a task it submits to a worker slot of its own process.

``longhaul up`` runs the gateway beside a worker: when a blocking SendMessage starts a task and
that worker has a free slot, the gateway reserves it, grants the new task's lease to it in the
submission's own commit (``TaskApplication.submit_leased``) and starts the runner with the
worker's copy of the task, so a short task needs no claim and no queue hop (ADR 0032). The call
then answers with the task as that runner's last commit left it (``Slot.ran``), without a reload. A gateway
without a worker in its process (``longhaul gateway``) has no hand-off: its tasks are claimed
from the run queue.
"""

from __future__ import annotations

from typing import Literal, Protocol

from domain.task import Task

SLOT_WAIT_SECONDS = 0.5
"""How long a blocking SendMessage waits for a slot of its process before its task is queued.

Past it (every slot held by longer tasks) the task goes to the run queue, where any worker may
claim it; within it, the submission takes the next slot freed while the queue holds nothing
known to claim (``Worker.reserve_within``), so under more blocking callers than slots each task
still needs no claim, no queue hop and no reload."""


Takes = Literal["free", "idle"]
"""Which slot of this process a new task may take: ``"free"`` (a blocking SendMessage) a free one,
or the next one freed within ``SLOT_WAIT_SECONDS``; ``"idle"`` (a stream) one of an idle worker
only (ADR 0055). A send that takes none (returnImmediately) goes to the run queue."""


class Slot(Protocol):
    """One reserved worker slot; exactly one of ``start`` and ``release`` follows the submission."""

    @property
    def worker_id(self) -> str:
        """The worker the lease is granted to."""
        ...

    @property
    def lease_seconds(self) -> float:
        """The length of the lease to grant."""
        ...

    def start(self, task: Task) -> None:
        """Run ``task`` (the worker's own copy), whose lease the submission committed."""
        ...

    def release(self) -> None:
        """Give the slot back: no lease was granted."""
        ...

    async def ran(self, timeout: float) -> Task | None:  # noqa: ASYNC109 - a bound, as TaskWaiter's
        """The task as the slot's runner last committed it, once that runner is done within ``timeout``.

        None when nothing ran, the runner is still running at the timeout, or it stopped without
        its lease: the caller then learns the task's state from the log.
        """
        ...


class HandOff(Protocol):
    """The workers of this process that take submitted tasks directly."""

    def reserve_idle(self, skill: str, version: int) -> Slot | None:
        """A slot for a task of ``skill`` v``version`` if the worker is idle now, or None.

        For the task of a gateway's only stream (ADR 0055): queued unless nothing else runs,
        holds a slot or waits in the run queue.
        """
        ...

    async def reserve_within(self, skill: str, version: int, seconds: float) -> Slot | None:
        """A slot for a task of ``skill`` v``version``, free now or within ``seconds``, or None.

        None: the task is queued instead.
        """
        ...
