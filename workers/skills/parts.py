"""Small helpers for reading A2A 1.0 messages and building artifacts, shared by the built-in skills."""

from __future__ import annotations

import math
import re
from typing import Any

from domain.skill import JSON


def parts_of(message: JSON) -> list[JSON]:
    """The message's parts that are JSON objects (anything else is ignored)."""
    parts = message.get("parts")
    if not isinstance(parts, list):
        return []
    return [p for p in parts if isinstance(p, dict)]


def texts_of(message: JSON) -> list[str]:
    """The text of every text part, in order."""
    return [p["text"] for p in parts_of(message) if isinstance(p.get("text"), str)]


def data_of(message: JSON) -> list[Any]:
    """The payload of every data part, in order."""
    return [p["data"] for p in parts_of(message) if "data" in p]


def first_data(message: JSON) -> JSON | None:
    """The first data part that is a JSON object, or ``None``."""
    return next((d for d in data_of(message) if isinstance(d, dict)), None)


def text_artifact(artifact_id: str, name: str, text: str, media_type: str = "text/plain") -> JSON:
    """An artifact with one text part."""
    return {"artifactId": artifact_id, "name": name, "parts": [{"text": text, "mediaType": media_type}]}


INTEGER_TEXT = re.compile(r"-?(0|[1-9][0-9]*)")
"""A decimal integer as ProtoJSON writes a 64-bit one: a string, no sign but ``-``, no leading zeros."""


def as_int(value: object) -> int | None:
    """The integer a ProtoJSON value stands for, or ``None`` if it stands for none.

    A skill parameter comes from a ``data`` part, which the a2a-sdk sends as a protobuf ``Struct``:
    every number in it is a double, so the integer 3 arrives as ``3.0``. Accepted: an ``int``; a
    finite ``float`` with no fractional part; a string of a decimal integer (ProtoJSON writes 64-bit
    integers as strings). Refused: ``bool`` (``true`` is not 1), ``3.5``, ``"3.0"``, ``"three"``.
    """
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, float):
        return int(value) if value.is_integer() else None
    if isinstance(value, str) and INTEGER_TEXT.fullmatch(value):
        return int(value)
    return None


def as_number(value: object) -> int | float | None:
    """The number a ProtoJSON value stands for (as ``as_int``, or any finite ``float``), else ``None``.

    A whole-number double is returned as the ``int`` (``3.0`` -> ``3``).
    """
    whole = as_int(value)
    if whole is not None:
        return whole
    if isinstance(value, float) and math.isfinite(value):
        return value
    return None


def as_bool(value: object) -> bool | None:
    """A ProtoJSON boolean: ``true`` or ``false`` only (never ``"yes"``, ``1``, ``"true"``), else ``None``."""
    return value if isinstance(value, bool) else None
