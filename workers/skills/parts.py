"""Small helpers for reading A2A 1.0 messages and building artifacts, shared by the built-in skills."""

from __future__ import annotations

from typing import Any, TypeGuard

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


def is_int(value: object) -> TypeGuard[int]:
    """A JSON integer (``bool`` is not one)."""
    return isinstance(value, int) and not isinstance(value, bool)


def is_number(value: object) -> TypeGuard[int | float]:
    """A JSON number (``bool`` is not one)."""
    return isinstance(value, int | float) and not isinstance(value, bool)
