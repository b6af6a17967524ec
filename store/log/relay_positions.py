"""The relay's positions: the last log position published to each stream (``longhaul_relay_position``).

One row per stream, created by the schema migrations. The relay reads and writes its row on the
connection that holds its leadership lock (``store.log.locks.Leader``), so only the leader moves
it; the gateway's metrics read every row through the store's pool.
"""

from __future__ import annotations

from eventsourcing.postgres import PostgresDatastore
from psycopg import sql
from psycopg.rows import DictRow

from store.log.locks import Leader
from store.log.reads import read_statement

TABLE = "longhaul_relay_position"


class RelayPosition:
    """The saved position of one stream's relay, in ``schema``."""

    def __init__(self, schema: str, stream: str) -> None:
        self.stream = stream
        table = sql.Identifier(schema, TABLE)
        self._select = sql.SQL("SELECT position FROM {} WHERE stream = %s").format(table).as_string()
        self._save = (
            sql.SQL(
                "INSERT INTO {} (stream, position) VALUES (%s, %s)"
                " ON CONFLICT (stream) DO UPDATE SET position = EXCLUDED.position"
            )
            .format(table)
            .as_string()
        )
        """Once per published batch: rendered once (psycopg renders a ``Composed`` on every execute)."""

    async def load(self, leader: Leader) -> int:
        """The last position saved for the stream (0: none yet)."""
        cursor = await leader.connection.execute(self._select, (self.stream,))
        row = await cursor.fetchone()
        return int(row[0]) if row else 0

    async def save(self, leader: Leader, position: int) -> None:
        """Save ``position`` as the stream's last published one."""
        await leader.connection.execute(self._save, (self.stream, position), prepare=True)


def read_relay_positions(datastore: PostgresDatastore) -> dict[str, int]:
    """Every stream's saved relay position, read on a pooled connection."""
    statement = sql.SQL("SELECT stream, position FROM {}.{}").format(
        sql.Identifier(datastore.schema), sql.Identifier(TABLE)
    )
    rows: list[DictRow] = read_statement(datastore, statement.as_string())
    return {str(row["stream"]): int(row["position"]) for row in rows}
