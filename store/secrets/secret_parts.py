"""Secret parts of client messages: which parts are secret, how they are sealed, shown and read.

A part is secret when a client marks it (its ``metadata`` holds the key ``SECRET_EXTENSION``,
the URI of longhaul's secret-parts extension on the agent card; ``true`` by convention), and
every part of an answer to a task in ``TASK_STATE_AUTH_REQUIRED`` is (credentials). The gateway
seals each secret part before the event that carries it is stored: the whole part, as JSON, is
encrypted with the task's key (``store.secrets.task_keys``), and the stored part is::

    {"data": {"redacted": true},
     "metadata": {"urn:longhaul:a2a:secret:v1": {"alg": "A256GCM", "kid": "...", "version": 5,
                                                 "nonce": "...", "ciphertext": "..."}}}

Everything that shows a message outside the worker (``GetTask``, streams, webhooks, NATS,
``longhaul history``) shows ``REDACTED_PART`` instead (``redact_message``). Only the worker
opens sealed parts (``reveal_message``), for the step that runs, while the task's key exists.
"""

from __future__ import annotations

import json
from typing import Any
from uuid import UUID

from store.secrets.task_keys import SecretUnreadableError, TaskKey, seal, unseal

JSON = dict[str, Any]

SECRET_EXTENSION = "urn:longhaul:a2a:secret:v1"  # noqa: S105 - a URI, not a password
"""The part ``metadata`` key that marks a part secret, and the URI of the extension (docs/api.md)."""

REDACTED_PART: JSON = {"data": {"redacted": True}, "metadata": {SECRET_EXTENSION: {"redacted": True}}}
"""How a secret part shows wherever a message is shown."""


def _secret_member(part: Any) -> Any:
    if not isinstance(part, dict):
        return None
    metadata = part.get("metadata")
    if not isinstance(metadata, dict):
        return None
    return metadata.get(SECRET_EXTENSION)


def is_secret(part: Any) -> bool:
    """Whether ``part`` is marked secret (in clear, as a client sends it) or sealed."""
    return (
        isinstance(part, dict)
        and isinstance(part.get("metadata"), dict)
        and SECRET_EXTENSION in part["metadata"]
    )


def is_sealed(part: Any) -> bool:
    """Whether ``part`` is a sealed secret (as the log stores it)."""
    member = _secret_member(part)
    return isinstance(member, dict) and "ciphertext" in member


def _parts(message: Any) -> list[Any]:
    parts = message.get("parts") if isinstance(message, dict) else None
    return parts if isinstance(parts, list) else []


def needs_sealing(message: JSON, *, all_parts: bool = False) -> bool:
    """Whether ``message`` (as a client sent it) has a part to seal (checked on every submit and answer)."""
    parts = _parts(message)
    if all_parts:
        return bool(parts)
    for part in parts:
        metadata = part.get("metadata") if type(part) is dict else None
        if metadata is not None and type(metadata) is dict and SECRET_EXTENSION in metadata:
            return True
    return False


def seal_message(message: JSON, key: TaskKey, *, version: int, all_parts: bool = False) -> JSON:
    """``message`` with each secret part (every part, with ``all_parts``) sealed under ``key``.

    ``version`` is the version of the event that will carry the message: with the task id and
    the part's index it is the ciphertext's associated data.
    """
    sealed = dict(message)
    sealed["parts"] = [
        _sealed_part(part, key, version=version, index=index) if all_parts or is_secret(part) else part
        for index, part in enumerate(_parts(message))
    ]
    return sealed


def _sealed_part(part: Any, key: TaskKey, *, version: int, index: int) -> JSON:
    plaintext = json.dumps(part, separators=(",", ":"), ensure_ascii=False, sort_keys=True).encode()
    envelope = seal(key, plaintext, version=version, index=index)
    return {"data": {"redacted": True}, "metadata": {SECRET_EXTENSION: envelope}}


def redact_message(message: JSON, *, all_parts: bool = False) -> JSON:
    """``message`` as it is shown: each secret part (every part, with ``all_parts``) is ``REDACTED_PART``.

    Returns ``message`` itself when it has no secret part: the common case (on every message
    ``GetTask``, a stream or the relay shows) is one dictionary lookup per part, and no copy.
    """
    parts = message.get("parts")
    if type(parts) is not list or not parts:
        return message
    if not all_parts:
        for part in parts:  # inline, not a call per part: this runs for every message shown
            metadata = part.get("metadata") if type(part) is dict else None
            if metadata is not None and type(metadata) is dict and SECRET_EXTENSION in metadata:
                break
        else:
            return message
    shown = dict(message)
    shown["parts"] = [_redacted_part() if all_parts or is_secret(p) else p for p in parts]
    return shown


def _redacted_part() -> JSON:
    """A fresh ``REDACTED_PART`` (callers may change what they are given)."""
    return {"data": {"redacted": True}, "metadata": {SECRET_EXTENSION: {"redacted": True}}}


def holds_sealed(message: Any) -> bool:
    """Whether a stored message holds a sealed part (checked before every step: no call per part)."""
    parts = message.get("parts") if type(message) is dict else None
    if type(parts) is not list:
        return False
    for part in parts:
        metadata = part.get("metadata") if type(part) is dict else None
        if metadata is not None and type(metadata) is dict:
            member = metadata.get(SECRET_EXTENSION)
            if type(member) is dict and "ciphertext" in member:
                return True
    return False


def reveal_message(message: JSON, key: TaskKey | None, *, task_id: UUID) -> JSON:
    """``message`` with its sealed parts opened: the parts exactly as the client sent them.

    Raises:
        SecretUnreadableError: The task's key is gone, or a sealed part was altered.
    """
    if not holds_sealed(message):
        return message
    revealed = dict(message)
    opened = []
    for index, part in enumerate(_parts(message)):
        if is_sealed(part):
            plaintext = unseal(key, _secret_member(part), task_id=task_id, index=index)
            try:
                opened.append(json.loads(plaintext))
            except ValueError:  # pragma: no cover - AES-GCM authenticated what we sealed
                raise SecretUnreadableError(f"task {task_id}: a sealed part is not JSON") from None
        else:
            opened.append(part)
    revealed["parts"] = opened
    return revealed


def public_message(message: Any) -> Any:
    """``redact_message`` for any value that may be a message (event bodies): others unchanged."""
    return redact_message(message) if isinstance(message, dict) else message
