"""The public JSON form of one stored event: used by the relay (NATS), the CLI and audits.

The schema is documented in ``docs/events.md``; changing it is a breaking change for analytics
consumers.
"""

from __future__ import annotations

import json
from datetime import datetime
from typing import Any
from uuid import UUID

from domain.task import Task
from store.secret_parts import public_message

ENVELOPE_FIELDS = ("originator_id", "originator_version", "timestamp", "originator_topic")
"""Fields every stored event has; a message carries them as ``taskId``, ``version`` and ``time``."""


def iso(value: datetime) -> str:
    """ISO 8601 in UTC with a ``Z``."""
    return value.isoformat().replace("+00:00", "Z")


SECRET_CONFIG_MEMBERS = ("token",)
"""Members of a push config that its public form leaves out (with ``authentication.credentials``)."""


def event_body(event: Any) -> dict[str, Any]:
    """The event's own fields (without the envelope); a push config without its secrets.

    ``PushConfigSet.config`` keeps a webhook's ``token`` and ``authentication.credentials`` in
    the log for delivery; the public form (NATS, ``longhaul history``) leaves them out. A
    client's secret parts (sealed in ``Submitted.message`` and ``InputReceived.message``) show
    as ``store.secret_parts.REDACTED_PART``.
    """
    body = {k: v for k, v in vars(event).items() if k not in ENVELOPE_FIELDS}
    if isinstance(event, Task.PushConfigSet):
        body["config"] = public_push_config(body["config"])
    elif "message" in body:
        body["message"] = public_message(body["message"])
    return body


def public_push_config(config: dict[str, Any]) -> dict[str, Any]:
    """``config`` without ``token`` and ``authentication.credentials``."""
    public = {k: v for k, v in config.items() if k not in SECRET_CONFIG_MEMBERS}
    authentication = public.get("authentication")
    if isinstance(authentication, dict):
        public["authentication"] = {k: v for k, v in authentication.items() if k != "credentials"}
    return public


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
