"""The public JSON form of one stored event: used by the relay (NATS), the CLI and audits.

The schema is documented in ``docs/events.md``; changing it is a breaking change for analytics
consumers. An event's body (``event_body``: its own fields, a push config without its secrets)
is built in ``store.public_form.event_bodies``, beneath this package, so that the store's audit reads show
exactly what the relay publishes.
"""

from __future__ import annotations

import json
from datetime import datetime
from typing import Any
from uuid import UUID

from store.public_form.event_bodies import ENVELOPE_FIELDS, event_body, iso, public_push_config

__all__ = [
    "ENVELOPE_FIELDS",
    "dumps",
    "event_body",
    "event_message",
    "iso",
    "json_default",
    "public_push_config",
    "reference_message",
]


def event_message(position: int | None, tenant: str, event: Any) -> dict[str, Any]:
    """``{position, taskId, tenant, version, type, time, body}`` for one event."""
    return {**_envelope(position, tenant, event), "body": event_body(event)}


def _envelope(position: int | None, tenant: str, event: Any) -> dict[str, Any]:
    return {
        "position": position,
        "taskId": str(event.originator_id),
        "tenant": tenant,
        "version": event.originator_version,
        "type": type(event).__name__,
        "time": iso(event.timestamp),
    }


def reference_message(position: int | None, tenant: str, event: Any, *, reason: str) -> dict[str, Any]:
    """The envelope of one event without its body, for an event NATS cannot carry.

    ``body`` is ``null`` and ``bodyOmitted`` says why; the event itself is read from the log at
    ``taskId`` and ``version`` (``longhaul history TASK_ID --json``, or the store).
    """
    return {**_envelope(position, tenant, event), "body": None, "bodyOmitted": reason}


def json_default(value: Any) -> Any:
    """``json.dumps`` hook for the types events hold."""
    if isinstance(value, datetime):
        return iso(value)
    if isinstance(value, UUID):
        return str(value)
    raise TypeError(f"cannot encode {type(value).__name__}")


def dumps(value: Any, *, indent: int | None = None) -> str:
    """JSON text of ``value`` with event types encoded."""
    return json.dumps(value, default=json_default, indent=indent, sort_keys=indent is not None)
