"""Group commits, the mechanism: callers that arrive while one group runs make up the next one.

Used by the worker's ``Committer`` (step events saved in one transaction) and the dispatcher's
``DeliveryRecorder.finish`` (finished attempts recorded in one transaction). Each caller awaits
its own result; when the group's run fails, every caller of that group gets the error.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from typing import Generic, TypeVar

I = TypeVar("I")  # noqa: E741 - an item of a group
R = TypeVar("R")

GroupRun = Callable[[list[I]], Awaitable[Sequence[R | BaseException]]]
"""Runs one group: a result per item, in order; an exception in the list fails that caller only."""


class GroupedCalls(Generic[I, R]):
    """``call(item)`` joins the next group; one ``run`` per group of at most ``max_group`` items."""

    def __init__(self, run: GroupRun[I, R], max_group: int) -> None:
        self._run = run
        self._max_group = max_group
        self._waiting: list[tuple[I, asyncio.Future[R]]] = []
        self._flusher: asyncio.Task[None] | None = None

    async def call(self, item: I) -> R:
        """``item``'s result, once the group it joined has run."""
        done: asyncio.Future[R] = asyncio.get_running_loop().create_future()
        self._waiting.append((item, done))
        if self._flusher is None or self._flusher.done():
            self._flusher = asyncio.ensure_future(self._flush())
        return await done

    async def _flush(self) -> None:
        while self._waiting:
            group, self._waiting = self._waiting[: self._max_group], self._waiting[self._max_group :]
            try:
                results = await self._run([item for item, _ in group])
            except BaseException as error:  # the database failed: every waiter learns it
                for _, done in group:
                    if not done.done():
                        done.set_exception(error)
                if isinstance(error, asyncio.CancelledError):
                    raise
                continue
            for (_, done), result in zip(group, results, strict=True):
                if done.done():  # the waiter was cancelled meanwhile
                    continue
                if isinstance(result, BaseException):
                    done.set_exception(result)
                else:
                    done.set_result(result)
