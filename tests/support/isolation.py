"""Remove what a test made on the shared servers: its PostgreSQL schema and its JetStream stream."""

from __future__ import annotations

import asyncio
from concurrent.futures import ThreadPoolExecutor

import nats
import psycopg
from nats.js.errors import NotFoundError
from psycopg import sql


def drop_schema(database_url: str, schema: str) -> None:
    """``DROP SCHEMA … CASCADE`` (nothing if it was never made)."""
    with psycopg.connect(database_url, autocommit=True) as conn:
        conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(schema)))


def delete_stream(nats_url: str, stream: str) -> None:
    """Delete the JetStream stream ``stream`` if it was made; callable from inside a running event loop."""

    async def delete() -> None:
        client = await nats.connect(nats_url, connect_timeout=5, max_reconnect_attempts=0)
        try:
            await client.jetstream().delete_stream(stream)
        except NotFoundError:
            pass
        finally:
            await client.close()

    with ThreadPoolExecutor(max_workers=1) as pool:
        pool.submit(lambda: asyncio.run(delete())).result()
