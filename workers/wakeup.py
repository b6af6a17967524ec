"""Wake idle workers when anything is appended, instead of polling per task.

The event store sends ``NOTIFY "<schema>.<app>_events"`` inside every append transaction (a
channel per schema); PostgreSQL delivers it at commit. One ``LISTEN`` connection per worker
turns that into an asyncio event.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging

import psycopg

log = logging.getLogger(__name__)


class Wakeup:
    """An ``asyncio.Event`` set whenever the store's notification channel fires."""

    def __init__(self, database_url: str, channel: str) -> None:
        self.database_url = database_url
        self.channel = channel
        self.event = asyncio.Event()
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        """Start listening in the background."""
        self._task = asyncio.ensure_future(self._listen_forever())

    async def stop(self) -> None:
        """Stop listening."""
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task

    async def wait(self, seconds: float) -> None:
        """Wait until a notification arrives or ``seconds`` pass."""
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self.event.wait(), seconds)
        self.event.clear()

    async def _listen_forever(self) -> None:
        backoff = 0.1
        while True:
            try:
                async with await psycopg.AsyncConnection.connect(self.database_url, autocommit=True) as conn:
                    await conn.execute(
                        psycopg.sql.SQL("LISTEN {}").format(psycopg.sql.Identifier(self.channel))
                    )
                    backoff = 0.1
                    self.event.set()  # anything may have happened while we were not listening
                    async for _ in conn.notifies():
                        self.event.set()
            except asyncio.CancelledError:
                raise
            except Exception as error:  # noqa: BLE001 - any failure: reconnect with backoff
                log.warning("LISTEN %s failed (%r); retrying in %.1fs", self.channel, error, backoff)
                self.event.set()
                await asyncio.sleep(backoff)
                backoff = min(backoff * 2, 5.0)
