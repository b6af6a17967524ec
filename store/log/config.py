"""Where a store lives: PostgreSQL (a schema of one database) or this process's memory.

``TaskApplication`` takes either; ``LONGHAUL_STORE`` chooses (``longhaul.wiring``).
"""

from __future__ import annotations

from dataclasses import dataclass
from urllib.parse import unquote, urlparse

from eventsourcing.utils import get_topic

from store.log.memory import MemoryFactory
from store.log.postgres import PostgresRunQueueRecorder


@dataclass(frozen=True)
class StoreConfig:
    """A store on PostgreSQL (``store.log.postgres``), its schema migrated on opening (``migrations``).

    ``schema`` isolates deployments (and tests) in one database.
    """

    database_url: str
    schema: str = "public"
    pool_size: int = 5
    max_overflow: int = 10
    lock_timeout_s: int = 5
    cache_size: int = 0
    pre_ping: bool = False
    """Check each pooled connection with a round trip before lending it (``POSTGRES_PRE_PING``).

    Off for every process (ADR 0036; the relay and the dispatcher since ADR 0021): the check
    was one round trip per checkout, most of a request's. A connection whose backend died fails
    at its first statement instead, and the statement is tried again on another connection: the
    library's recorder methods retry it themselves, longhaul's own statements go through
    ``store.log.retry.retry_lost_connection``, and the pool drops the broken connection."""


@dataclass(frozen=True)
class MemoryConfig:
    """A store in this process's memory (``store.log.memory``): nothing outlives it, no other sees it."""

    cache_size: int = 0


def memory_env(config: MemoryConfig) -> dict[str, str]:
    """The ``eventsourcing`` environment for ``config``."""
    env = {"PERSISTENCE_MODULE": get_topic(MemoryFactory), "IS_SNAPSHOTTING_ENABLED": "y"}
    if config.cache_size:
        env["AGGREGATE_CACHE_MAXSIZE"] = str(config.cache_size)
        env["AGGREGATE_CACHE_FASTFORWARD"] = "y"
    return env


def postgres_env(config: StoreConfig) -> dict[str, str]:
    """The ``eventsourcing`` environment for ``config``."""
    url = urlparse(config.database_url)
    if url.scheme not in ("postgres", "postgresql"):
        raise ValueError(f"not a PostgreSQL URL: {config.database_url!r}")
    env = {
        "PERSISTENCE_MODULE": "eventsourcing.postgres",
        "APPLICATION_RECORDER_TOPIC": get_topic(PostgresRunQueueRecorder),
        "POSTGRES_DBNAME": unquote(url.path.lstrip("/")) or "postgres",
        "POSTGRES_HOST": url.hostname or "127.0.0.1",
        "POSTGRES_PORT": str(url.port or 5432),
        "POSTGRES_USER": unquote(url.username or "postgres"),
        "POSTGRES_PASSWORD": unquote(url.password or ""),
        "POSTGRES_SCHEMA": config.schema,
        "POSTGRES_POOL_SIZE": str(config.pool_size),
        "POSTGRES_MAX_OVERFLOW": str(config.max_overflow),
        "POSTGRES_LOCK_TIMEOUT": str(config.lock_timeout_s),
        "POSTGRES_CONNECT_TIMEOUT": "10",
        "POSTGRES_PRE_PING": "y" if config.pre_ping else "n",
        "IS_SNAPSHOTTING_ENABLED": "y",
    }
    if config.cache_size:
        env["AGGREGATE_CACHE_MAXSIZE"] = str(config.cache_size)
        env["AGGREGATE_CACHE_FASTFORWARD"] = "y"
    return env
