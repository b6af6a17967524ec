"""Wake idle workers when anything is appended, instead of polling per task.

The store's recorder says when something was appended (``RunQueue.follow_appends``): on
PostgreSQL a ``LISTEN`` on the channel every append NOTIFYs (delivered at commit), in memory a
callback of the append itself. This turns that into an asyncio event.
"""

from __future__ import annotations

import asyncio
import contextlib

from store.run_queue import RunQueue


class Wakeup:
    """An ``asyncio.Event`` set whenever the store appends."""

    def __init__(self, source: RunQueue) -> None:
        self.source = source
        self.event = asyncio.Event()
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        """Start following appends in the background."""
        self._task = asyncio.ensure_future(self.source.follow_appends(self.event))

    async def stop(self) -> None:
        """Stop following."""
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task

    async def wait(self, seconds: float) -> None:
        """Wait until an append happens or ``seconds`` pass."""
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self.event.wait(), seconds)
        self.event.clear()
