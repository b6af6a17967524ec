"""``store.log.binary_arrays``: what PostgreSQL reads from each array is what psycopg's own lists give.

Every array type the hot statements use, for any values (Hypothesis: empty lists, NULLs, the
integer types' limits, any text, any bytes, any time zone), is sent once as a ``BinaryArray`` and
once as a plain list through psycopg's own dumper, cast to the same type; PostgreSQL must read
both as the same array. A time without a zone, and an integer its type cannot hold, are refused
before anything is sent.
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Iterator, Sequence
from datetime import UTC, datetime, timedelta, timezone
from typing import Any
from uuid import uuid4

import psycopg
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from store.log.binary_arrays import (
    BinaryArray,
    bools,
    byteas,
    int2s,
    int4s,
    int8s,
    texts,
    timestamptzs,
    uuids,
)

EXAMPLES = settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)

_zones = st.builds(
    lambda minutes: timezone(timedelta(minutes=minutes)), st.integers(min_value=-14 * 60, max_value=14 * 60)
)
_times = st.datetimes(
    min_value=datetime(1, 1, 2),  # hypothesis takes naive bounds; the zone comes from ``timezones``
    max_value=datetime(9999, 12, 30),
    timezones=_zones,
)
_texts = st.text(alphabet=st.characters(exclude_categories=["Cs"], exclude_characters="\x00"))

CASES: dict[str, tuple[Callable[[Any], BinaryArray], st.SearchStrategy[Any]]] = {
    "uuid": (uuids, st.lists(st.uuids(), max_size=8)),
    "bigint": (int8s, st.lists(st.integers(min_value=-(2**63), max_value=2**63 - 1), max_size=8)),
    "int": (int4s, st.lists(st.integers(min_value=-(2**31), max_value=2**31 - 1), max_size=8)),
    "smallint": (int2s, st.lists(st.integers(min_value=-(2**15), max_value=2**15 - 1), max_size=8)),
    "boolean": (bools, st.lists(st.booleans(), max_size=8)),
    "text": (texts, st.lists(st.none() | _texts, max_size=8)),
    "bytea": (byteas, st.lists(st.none() | st.binary(max_size=64), max_size=8)),
    "timestamptz": (timestamptzs, st.lists(st.none() | _times, max_size=8)),
}


@pytest.fixture(scope="module")
def conn(database_url: str) -> Iterator[psycopg.Connection[Any]]:
    with psycopg.connect(database_url, autocommit=True) as connection:
        yield connection


def _read(conn: psycopg.Connection[Any], sql_type: str, placeholder: str, value: object) -> Sequence[object]:
    row = conn.execute(f"SELECT {placeholder}::{sql_type}[]", (value,)).fetchone()
    assert row is not None
    result: Sequence[object] = row[0]
    return result


@pytest.mark.parametrize("sql_type", list(CASES))
def test_postgresql_reads_each_array_as_psycopgs_own_list(
    conn: psycopg.Connection[Any], sql_type: str
) -> None:
    encode, values = CASES[sql_type]

    @EXAMPLES
    @given(values)
    def check(items: list[Any]) -> None:
        ours = _read(conn, sql_type, "%b", encode(items))
        assert ours == _read(conn, sql_type, "%s", items)
        assert list(ours) == items  # and what was sent, as a check that psycopg's own is not wrong too

    check()


def test_a_uuid_given_as_text_is_the_same_uuid(conn: psycopg.Connection[Any]) -> None:
    ids = [uuid4(), uuid4()]
    assert _read(conn, "uuid", "%b", uuids([str(ids[0]), ids[1]])) == ids


def test_an_empty_array_and_a_null_keep_their_type(conn: psycopg.Connection[Any]) -> None:
    assert conn.execute("SELECT pg_typeof(%b)::text, cardinality(%b)", (uuids([]), uuids([]))).fetchone() == (
        "uuid[]",
        0,
    )
    assert conn.execute("SELECT pg_typeof(%b)::text", (texts([None]),)).fetchone() == ("text[]",)
    assert _read(conn, "text", "%b", texts([None, "a", None])) == [None, "a", None]


def test_a_time_without_its_zone_is_refused() -> None:
    with pytest.raises(ValueError, match="time zone"):
        timestamptzs([datetime(2026, 12, 4, 9, 0)])  # the case refused
    assert timestamptzs([datetime(2026, 12, 4, 9, 0, tzinfo=UTC)]).data  # with its zone: encoded


def test_the_integer_types_refuse_what_they_cannot_hold() -> None:
    with pytest.raises(struct.error):
        int2s([2**15])
    with pytest.raises(struct.error):
        int4s([2**31])
    with pytest.raises(struct.error):
        int8s([2**63])
