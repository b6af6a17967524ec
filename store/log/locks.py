"""PostgreSQL advisory locks: keys derived from names, one place for every lock longhaul takes."""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import psycopg


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
