"""The planner's statistics of longhaul's tables, kept when PostgreSQL's autovacuum does not.

PostgreSQL plans a prepared statement (and each statement of ``longhaul_append``) once for a
connection, from the statistics it has then, and keeps that plan until the statistics of a table
it reads change. Autovacuum refreshes them (ANALYZE) whenever a table's rows changed by more than
``autovacuum_analyze_threshold`` plus ``autovacuum_analyze_scale_factor`` of its rows. With
autovacuum off, nothing does: a plan made while the tables were nearly empty (a sequential scan
of the run queue, a hash join over the whole log) stays, and every claim, load and append then
costs more as the log grows. Decided in ADR 0047: when the server's autovacuum is off, the
sweeper analyzes longhaul's tables by autovacuum's own rule (``TableStatistics.refresh``);
when it is on, it leaves them to it.
"""

from __future__ import annotations

import logging

from eventsourcing.postgres import PostgresDatastore
from psycopg import Connection
from psycopg.rows import DictRow
from psycopg.sql import SQL, Identifier

log = logging.getLogger(__name__)

REFRESH_EVERY_S = 10.0
"""How often the sweeper looks for tables whose statistics are stale (when autovacuum is off)."""

_STALE = (
    "SELECT s.relname FROM pg_stat_user_tables s JOIN pg_class c ON c.oid = s.relid"
    " WHERE s.schemaname = %s"
    " AND s.n_mod_since_analyze > current_setting('autovacuum_analyze_threshold')::float8"
    " + current_setting('autovacuum_analyze_scale_factor')::float8 * greatest(c.reltuples, 0)"
    " ORDER BY s.relname"
)


class TableStatistics:
    """The statistics of the tables in one store's schema."""

    def __init__(self, datastore: PostgresDatastore) -> None:
        self._datastore = datastore
        self._told = False

    def autovacuum_on(self) -> bool:
        """Whether the server's autovacuum runs (and so keeps the statistics)."""
        with self._datastore.get_connection() as conn:
            return _autovacuum_on(conn)

    def stale(self) -> list[str]:
        """The schema's tables whose rows changed past autovacuum's analyze threshold.

        Changed since their last analyze, by anyone: autovacuum, an operator, this class.
        """
        with self._datastore.get_connection() as conn:
            return self._stale(conn)

    def refresh(self, *, autovacuum_on: bool | None = None) -> list[str]:
        """ANALYZE every stale table, unless autovacuum is on; returns the tables analyzed.

        ``autovacuum_on`` is the server's setting, read when not given. One connection for all.
        """
        with self._datastore.get_connection() as conn:
            if autovacuum_on is None:
                autovacuum_on = _autovacuum_on(conn)
            if autovacuum_on:
                return []
            tables = self._stale(conn)
            if tables and not self._told:
                log.info(
                    "PostgreSQL's autovacuum is off: longhaul analyzes its own tables when their rows"
                    " change by autovacuum's analyze threshold (ADR 0047)"
                )
                self._told = True
            schema = Identifier(self._datastore.schema)
            for table in tables:
                conn.execute(SQL("ANALYZE {}.{}").format(schema, Identifier(table)))
                log.debug("analyzed %s.%s", self._datastore.schema, table)
        return tables

    def _stale(self, conn: Connection[DictRow]) -> list[str]:
        rows = conn.execute(_STALE, (self._datastore.schema,)).fetchall()
        return [str(row["relname"]) for row in rows]


def _autovacuum_on(conn: Connection[DictRow]) -> bool:
    row = conn.execute("SELECT current_setting('autovacuum') = 'on' AS on").fetchone()
    return bool(row and row["on"])
