"""PostgreSQL advisory locks: keys derived from names, one place for every lock longhaul takes.

Two kinds: ``advisory_lock`` waits for a lock and holds it for a block of work (schema
migrations); ``leading`` waits on a connection of its own until it holds a session lock, so one
process at a time leads (the relay, the sequencer, the dispatcher's intake) and the others wait as
hot standbys. Leadership ends with the connection: a leader that dies or loses its database
hands over within a second.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
from collections.abc import AsyncIterator, Iterator
from contextlib import contextmanager
from typing import Any

import psycopg

POLL_S = 1.0
"""How often a standby tries the leadership lock."""


def advisory_key(name: str) -> int:
    """A stable signed 64-bit key for ``name``."""
    return int.from_bytes(hashlib.sha256(name.encode()).digest()[:8], "big", signed=True)


def ddl_lock_name(schema: str) -> str:
    """The lock held while a schema's tables are created or migrated: one process at a time."""
    return f"longhaul-ddl:{schema}"


@contextmanager
def advisory_lock(database_url: str, name: str) -> Iterator[psycopg.Connection[tuple[Any, ...]]]:
    """Hold the advisory lock ``name`` (waiting for it) for the duration of the block.

    Yields the (autocommit) connection that holds it, for work that must happen under the lock.
    """
    key = advisory_key(name)
    with psycopg.connect(database_url, autocommit=True) as conn:
        conn.execute("SELECT pg_advisory_lock(%s)", (key,))
        try:
            yield conn
        finally:
            conn.execute("SELECT pg_advisory_unlock(%s)", (key,))


class Leader:
    """The session that holds a leadership lock: the lock lasts as long as its connection.

    The store's modules that write under leadership (``store.log.relay_positions``) use its
    connection; the leader itself only checks that it is still alive.
    """

    def __init__(self, connection: psycopg.AsyncConnection[Any]) -> None:
        self.connection = connection

    async def check(self) -> None:
        """Raise if the lock's connection is gone (then the lock is gone with it)."""
        await self.connection.execute("SELECT 1")


@contextlib.asynccontextmanager
async def leading(database_url: str, lock_key: int, stop: asyncio.Event) -> AsyncIterator[Leader | None]:
    """The ``Leader`` holding the advisory lock ``lock_key``, once it does; ``None`` if stopped first.

    Its connection is autocommit and stays open (holding the lock) until the block ends.
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
        yield None if stop.is_set() else Leader(conn)
    finally:
        await conn.close()
