"""One-dimensional PostgreSQL arrays encoded in one pass, for the hot statements' ``%b`` arguments.

psycopg's own dumper of a Python list looks at every list for its element type, then finds a
dumper for each value and dumps the values one by one, for the dozens of arguments of every
``longhaul_append`` call, on every step commit and every submission. The
statements that run on every commit know each argument's type already, so they wrap the list in
the array type it is (``uuids``, ``int8s``, ``texts`` …), which this module encodes in
PostgreSQL's binary array format in one pass.

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
    """An array argument already in PostgreSQL's binary format; its class names the type."""

    __slots__ = ("data",)
    element_oid = 0

    def __init__(self, data: bytes) -> None:
        self.data = data


class _ArrayDumper(Dumper):
    """Sends a ``BinaryArray``'s bytes as they are, in binary, under its array type's oid."""

    format = Format.BINARY

    def dump(self, obj: Any) -> Buffer | None:
        data: bytes = obj.data
        return data


def _array_type(name: str, array_oid: int, element_oid: int) -> type[BinaryArray]:
    """A ``BinaryArray`` class of one array type, registered as a parameter of every connection."""
    array = type(name, (BinaryArray,), {"__slots__": (), "element_oid": element_oid})
    psycopg.adapters.register_dumper(array, type(f"{name}Dumper", (_ArrayDumper,), {"oid": array_oid}))
    return array


_UUIDS = _array_type("UuidArray", 2951, 2950)
_INT8S = _array_type("Int8Array", 1016, 20)
_INT4S = _array_type("Int4Array", 1007, 23)
_INT2S = _array_type("Int2Array", 1005, 21)
_TEXTS = _array_type("TextArray", 1009, 25)
_BYTEAS = _array_type("ByteaArray", 1001, 17)
_TIMESTAMPTZS = _array_type("TimestamptzArray", 1185, 1184)
_BOOLS = _array_type("BoolArray", 1000, 16)


def _array(array: type[BinaryArray], count: int, nulls: bool, body: bytes) -> BinaryArray:
    if not count:
        return array(_EMPTY.pack(0, 0, array.element_oid))
    return array(_HEAD.pack(1, int(nulls), array.element_oid, count, 1) + body)


def uuids(values: Sequence[UUID | str]) -> BinaryArray:
    """``uuid[]`` of ``values`` (no NULLs); a string is read as a UUID (the library allows both ids)."""
    encoded = [_UUID_LENGTH + (v.bytes if isinstance(v, UUID) else UUID(v).bytes) for v in values]
    return _array(_UUIDS, len(values), False, b"".join(encoded))


def int8s(values: Sequence[int]) -> BinaryArray:
    """``bigint[]`` of ``values`` (no NULLs)."""
    return _array(_INT8S, len(values), False, b"".join([_INT8.pack(8, v) for v in values]))


def int4s(values: Sequence[int]) -> BinaryArray:
    """``int[]`` of ``values`` (no NULLs)."""
    return _array(_INT4S, len(values), False, b"".join([_INT4.pack(4, v) for v in values]))


def int2s(values: Sequence[int]) -> BinaryArray:
    """``smallint[]`` of ``values`` (no NULLs)."""
    return _array(_INT2S, len(values), False, b"".join([_INT2.pack(2, v) for v in values]))


def bools(values: Sequence[bool]) -> BinaryArray:
    """``boolean[]`` of ``values`` (no NULLs)."""
    return _array(_BOOLS, len(values), False, b"".join([_TRUE if v else _FALSE for v in values]))


def texts(values: Sequence[str | None]) -> BinaryArray:
    """``text[]`` of ``values``; None is NULL."""
    return _varying(_TEXTS, [None if v is None else v.encode() for v in values])


def byteas(values: Sequence[bytes | None]) -> BinaryArray:
    """``bytea[]`` of ``values``; None is NULL."""
    return _varying(_BYTEAS, values)


def timestamptzs(values: Sequence[datetime | None]) -> BinaryArray:
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
    return _varying(_TIMESTAMPTZS, encoded)


def _varying(array: type[BinaryArray], values: Sequence[bytes | None]) -> BinaryArray:
    parts: list[bytes] = []
    nulls = False
    for value in values:
        if value is None:
            parts.append(_NULL)
            nulls = True
        else:
            parts.append(_LENGTH.pack(len(value)))
            parts.append(value)
    return _array(array, len(values), nulls, b"".join(parts))
