"""Reads through the library's datastore that keep the connection's prepared statements.

The library's ``PostgresDatastore.transaction(commit=False)`` ends with ROLLBACK, and psycopg
forgets every statement a connection prepared when a transaction rolls back: it sends
``DEALLOCATE ALL`` (one more round trip), and the next execution of each statement is parsed and
planned again. A transaction that only reads ends the same way for PostgreSQL with COMMIT, which
keeps them: every read of longhaul's own goes through ``read_transaction``, or, when it is one
statement, through ``read_statement``: the pool's connections are in autocommit, so one
statement is its own transaction, one round trip where ``BEGIN``, the statement and ``COMMIT``
are three.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

from eventsourcing.postgres import PostgresDatastore
from psycopg import Cursor
from psycopg.rows import DictRow


@contextmanager
def read_transaction(datastore: PostgresDatastore) -> Iterator[Cursor[DictRow]]:
    """A cursor in a transaction for reads only (one snapshot for its statements), ended by COMMIT."""
    with datastore.transaction(commit=True) as curs:
        yield curs


def read_statement(datastore: PostgresDatastore, statement: str, params: Sequence[Any] = ()) -> list[DictRow]:
    """The rows of one read ``statement``, prepared and run on a pooled connection in autocommit.

    One round trip. ``statement`` is text the caller rendered once (not a ``Composed``).
    """
    with datastore.get_connection() as conn:
        return conn.execute(statement, params, prepare=True).fetchall()
