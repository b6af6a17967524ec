"""How a long-running part starts over after a failure, and how it waits to lead.

Two things the relay, the sequencer and the webhook dispatcher all do, written once:

- :func:`restarting` runs a part until it returns or ``stop`` is set; after a failure (the
  database or NATS gone) it logs it and pauses by the one restart policy
  (``store.log.retry.RESTART_POLICY``: 0.25-0.5 s, doubling up to 5-10 s, never giving up).
- :func:`leading` waits on a connection of its own until it holds a session advisory lock, so
  one process at a time leads and the others wait as hot standbys. Leadership ends with the
  connection: a leader that dies or loses its database hands over within a second.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import psycopg

from store.log import RESTART_POLICY

POLL_S = 1.0
"""How often a standby tries the lock."""


async def restarting(
    what: str, part: Callable[[], Awaitable[None]], stop: asyncio.Event, logger: logging.Logger
) -> None:
    """Run ``part`` until it returns or ``stop`` is set, starting over after each failure.

    ``what`` names the part in the line ``logger`` logs for each failure (``relay failed (...);
    starting over in 0.4s``).
    """
    failures = 0
    while not stop.is_set():
        try:
            await part()
            return
        except Exception as error:  # noqa: BLE001 - database or NATS trouble: start over
            failures += 1
            pause = RESTART_POLICY.delay(failures)
            logger.warning("%s failed (%r); starting over in %.1fs", what, error, pause)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), pause)


@contextlib.asynccontextmanager
async def leading(
    database_url: str, lock_key: int, stop: asyncio.Event
) -> AsyncIterator[psycopg.AsyncConnection[Any] | None]:
    """The connection that holds the advisory lock ``lock_key``, once it does; ``None`` if stopped first.

    The connection is autocommit and stays open (holding the lock) until the block ends.
    """
    conn = await psycopg.AsyncConnection.connect(database_url, autocommit=True)
    try:
        while not stop.is_set():
            cursor = await conn.execute("SELECT pg_try_advisory_lock(%s)", (lock_key,))
            row = await cursor.fetchone()
            if row and row[0]:
                break
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), POLL_S)
        yield None if stop.is_set() else conn
    finally:
        await conn.close()
