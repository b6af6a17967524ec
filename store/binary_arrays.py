"""One-dimensional PostgreSQL arrays encoded in one pass, for the hot statements' ``%b`` arguments.

psycopg's own dumper of a Python list looks at every list for its element type, then finds a
dumper for each value and dumps the values one by one: 117 µs for the 27 arguments of one
``longhaul_append`` call (a 2-event commit), on every step commit and every submission. The
statements that run on every commit know each argument's type already, so they wrap the list in
the array type it is (``uuids``, ``int8s``, ``texts`` …), which this module encodes in
PostgreSQL's binary array format in one pass (docs/benchmarks.md §11, "Session 26").

The format (``array_send``): the number of dimensions (0 for an empty array, else 1), whether
any element is NULL, the element type's oid, then the length and lower bound (1) of the one
dimension, then each element as its byte length and bytes (length -1 and no bytes for NULL).
"""

from __future__ import annotations

import struct
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any
from uuid import UUID

import psycopg
from psycopg.abc import Buffer
from psycopg.adapt import Dumper
from psycopg.pq import Format

_HEAD = struct.Struct(">iiiii")
_EMPTY = struct.Struct(">iii")
_LENGTH = struct.Struct(">i")
_INT8 = struct.Struct(">iq")
_INT4 = struct.Struct(">ii")
_INT2 = struct.Struct(">ih")
_NULL = b"\xff\xff\xff\xff"
_UUID_LENGTH = b"\x00\x00\x00\x10"
_TRUE = b"\x00\x00\x00\x01\x01"
_FALSE = b"\x00\x00\x00\x01\x00"
_PG_EPOCH = datetime(2000, 1, 1, tzinfo=UTC)


class BinaryArray:
    """An array argument already in PostgreSQL's binary format; its subclass names the type."""

    __slots__ = ("data",)
    array_oid = 0

    def __init__(self, data: bytes) -> None:
        self.data = data


class UuidArray(BinaryArray):
    """``uuid[]``."""

    __slots__ = ()
    array_oid = 2951


class Int8Array(BinaryArray):
    """``bigint[]``."""

    __slots__ = ()
    array_oid = 1016


class Int4Array(BinaryArray):
    """``int[]``."""

    __slots__ = ()
    array_oid = 1007


class Int2Array(BinaryArray):
    """``smallint[]``."""

    __slots__ = ()
    array_oid = 1005


class TextArray(BinaryArray):
    """``text[]``."""

    __slots__ = ()
    array_oid = 1009


class ByteaArray(BinaryArray):
    """``bytea[]``."""

    __slots__ = ()
    array_oid = 1001


class TimestamptzArray(BinaryArray):
    """``timestamptz[]``."""

    __slots__ = ()
    array_oid = 1185


class BoolArray(BinaryArray):
    """``boolean[]``."""

    __slots__ = ()
    array_oid = 1000


def _array(element_oid: int, count: int, nulls: bool, body: bytes) -> bytes:
    if not count:
        return _EMPTY.pack(0, 0, element_oid)
    return _HEAD.pack(1, int(nulls), element_oid, count, 1) + body


def uuids(values: Sequence[UUID | str]) -> UuidArray:
    """``uuid[]`` of ``values`` (no NULLs); a string is read as a UUID (the library allows both ids)."""
    encoded = [_UUID_LENGTH + (v.bytes if isinstance(v, UUID) else UUID(v).bytes) for v in values]
    return UuidArray(_array(2950, len(values), False, b"".join(encoded)))


def int8s(values: Sequence[int]) -> Int8Array:
    """``bigint[]`` of ``values`` (no NULLs)."""
    return Int8Array(_array(20, len(values), False, b"".join([_INT8.pack(8, v) for v in values])))


def int4s(values: Sequence[int]) -> Int4Array:
    """``int[]`` of ``values`` (no NULLs)."""
    return Int4Array(_array(23, len(values), False, b"".join([_INT4.pack(4, v) for v in values])))


def int2s(values: Sequence[int]) -> Int2Array:
    """``smallint[]`` of ``values`` (no NULLs)."""
    return Int2Array(_array(21, len(values), False, b"".join([_INT2.pack(2, v) for v in values])))


def bools(values: Sequence[bool]) -> BoolArray:
    """``boolean[]`` of ``values`` (no NULLs)."""
    return BoolArray(_array(16, len(values), False, b"".join([_TRUE if v else _FALSE for v in values])))


def texts(values: Sequence[str | None]) -> TextArray:
    """``text[]`` of ``values``; None is NULL."""
    return TextArray(_varying(25, [None if v is None else v.encode() for v in values]))


def byteas(values: Sequence[bytes | None]) -> ByteaArray:
    """``bytea[]`` of ``values``; None is NULL."""
    return ByteaArray(_varying(17, values))


def timestamptzs(values: Sequence[datetime | None]) -> TimestamptzArray:
    """``timestamptz[]`` of ``values`` (each with its time zone); None is NULL."""
    encoded: list[bytes | None] = []
    for value in values:
        if value is None:
            encoded.append(None)
            continue
        if value.utcoffset() is None:
            raise ValueError(f"a timestamptz needs a time zone: {value!r}")
        delta = value - _PG_EPOCH
        micros = delta.microseconds + 1_000_000 * (86_400 * delta.days + delta.seconds)
        encoded.append(micros.to_bytes(8, "big", signed=True))
    return TimestamptzArray(_varying(1184, encoded))


def _varying(element_oid: int, values: Sequence[bytes | None]) -> bytes:
    parts: list[bytes] = []
    nulls = False
    for value in values:
        if value is None:
            parts.append(_NULL)
            nulls = True
        else:
            parts.append(_LENGTH.pack(len(value)))
            parts.append(value)
    return _array(element_oid, len(values), nulls, b"".join(parts))


class _ArrayDumper(Dumper):
    """Sends a ``BinaryArray``'s bytes as they are, in binary, under its array type's oid."""

    format = Format.BINARY

    def dump(self, obj: Any) -> Buffer | None:
        data: bytes = obj.data
        return data


def register() -> None:
    """Make every ``BinaryArray`` type a parameter of any psycopg connection (idempotent)."""
    for array in (
        UuidArray,
        Int8Array,
        Int4Array,
        Int2Array,
        TextArray,
        ByteaArray,
        TimestamptzArray,
        BoolArray,
    ):
        dumper = type(f"{array.__name__}Dumper", (_ArrayDumper,), {"oid": array.array_oid})
        psycopg.adapters.register_dumper(array, dumper)


register()
