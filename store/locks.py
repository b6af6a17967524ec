"""PostgreSQL advisory locks: keys derived from names, one place for every lock longhaul takes."""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from contextlib import contextmanager

import psycopg


def advisory_key(name: str) -> int:
    """A stable signed 64-bit key for ``name``."""
    return int.from_bytes(hashlib.sha256(name.encode()).digest()[:8], "big", signed=True)


@contextmanager
def advisory_lock(database_url: str, name: str) -> Iterator[None]:
    """Hold the advisory lock ``name`` (waiting for it) for the duration of the block."""
    key = advisory_key(name)
    with psycopg.connect(database_url, autocommit=True) as conn:
        conn.execute("SELECT pg_advisory_lock(%s)", (key,))
        try:
            yield
        finally:
            conn.execute("SELECT pg_advisory_unlock(%s)", (key,))
