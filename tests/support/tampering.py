"""Altering a PostgreSQL store's log behind longhaul's back, as an intruder with SQL access would.

``alter_event`` changes one byte of an event's stored state (the event still decodes, so the
pages that read it still render), ``flip_byte`` any byte (it may not decode); ``rechain`` then
rewrites the task's chain rows from that version on, so that the hash chain alone checks again
and only the Merkle log can tell.
"""

from __future__ import annotations

from uuid import UUID

from psycopg.sql import SQL, Identifier

from store.evidence.chain import GENESIS, chain_hash, check_task
from store.log.application import TaskApplication
from store.log.postgres import PostgresRunQueueRecorder


def _recorder(store: TaskApplication) -> PostgresRunQueueRecorder:
    recorder = store.recorder
    assert isinstance(recorder, PostgresRunQueueRecorder)
    return recorder


def alter_event(store: TaskApplication, task_id: UUID, version: int, text: bytes) -> None:
    """Change the first byte of ``text`` in the stored state of the event at ``version`` (to ``X``)."""
    recorder = _recorder(store)
    table = SQL("{}.{}").format(Identifier(recorder.datastore.schema), Identifier(recorder.events_table_name))
    with recorder.datastore.transaction(commit=True) as curs:
        curs.execute(
            SQL(
                "UPDATE {} SET state = set_byte(state, position(%s::bytea in state) - 1, ascii('X'))"
                " WHERE originator_id = %s AND originator_version = %s AND position(%s::bytea in state) > 0"
            ).format(table),
            (text, task_id, version, text),
        )
        assert curs.rowcount == 1, f"no {text!r} in the event at version {version} of {task_id}"


def flip_byte(store: TaskApplication, task_id: UUID, version: int, offset: int) -> None:
    """Flip the lowest bit of the byte at ``offset`` (modulo the state's length) of ``version``'s event."""
    recorder = _recorder(store)
    table = SQL("{}.{}").format(Identifier(recorder.datastore.schema), Identifier(recorder.events_table_name))
    with recorder.datastore.transaction(commit=True) as curs:
        curs.execute(
            SQL(
                "UPDATE {} SET state = set_byte(state, mod(%s, length(state)),"
                " get_byte(state, mod(%s, length(state))) # 1)"
                " WHERE originator_id = %s AND originator_version = %s"
            ).format(table),
            (offset, offset, task_id, version),
        )
        assert curs.rowcount == 1, f"no event at version {version} of {task_id}"


def set_first_byte(store: TaskApplication, task_id: UUID, version: int, value: bytes) -> None:
    """Make ``value`` the first byte of the stored state of the event at ``version`` (JSON no more)."""
    recorder = _recorder(store)
    table = SQL("{}.{}").format(Identifier(recorder.datastore.schema), Identifier(recorder.events_table_name))
    with recorder.datastore.transaction(commit=True) as curs:
        curs.execute(
            SQL(
                "UPDATE {} SET state = set_byte(state, 0, %s)"
                " WHERE originator_id = %s AND originator_version = %s"
            ).format(table),
            (value[0], task_id, version),
        )
        assert curs.rowcount == 1, f"no event at version {version} of {task_id}"


def rechain(store: TaskApplication, task_id: UUID, start: int) -> None:
    """Rewrite the chain rows of ``task_id`` from ``start`` to its last version to match its events."""
    recorder = _recorder(store)
    rows = recorder.chain_rows([task_id])[task_id]
    stored = {row.version: row for row in rows}
    previous = GENESIS if start == 1 else stored[start - 1].chain
    assert previous is not None
    table = SQL("{}.{}").format(Identifier(recorder.datastore.schema), Identifier(recorder.chain_table))
    with recorder.datastore.transaction(commit=True) as curs:
        for version in range(start, max(stored) + 1):
            row = stored[version]
            assert row.topic is not None
            assert row.state is not None
            previous = chain_hash(task_id, version, row.topic, row.state, previous)
            curs.execute(
                SQL("UPDATE {} SET hash = %s WHERE task_id = %s AND version = %s").format(table),
                (previous, task_id, version),
            )
    assert check_task(task_id, recorder.chain_rows([task_id])[task_id]) == []
