"""The public form of an event's own fields: what the relay publishes, ``history`` prints and audits read.

It lives beneath the projections because the store's audit reads (``store.evidence.audit_trail``) show the
same body as the relay's NATS messages (``store.public_form.event_json``, which re-exports it), so a
field hidden from one is hidden from every reader.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any
from uuid import UUID

from domain.task import Task, public_push_config
from store.secrets.secret_parts import public_message

__all__ = ["ENVELOPE_FIELDS", "event_body", "iso", "json_ready", "public_push_config"]

ENVELOPE_FIELDS = ("originator_id", "originator_version", "timestamp", "originator_topic")
"""Fields every stored event has; a message carries them as ``taskId``, ``version`` and ``time``."""


def iso(value: datetime) -> str:
    """ISO 8601 in UTC with a ``Z``."""
    return value.isoformat().replace("+00:00", "Z")


def event_body(event: Any) -> dict[str, Any]:
    """The event's own fields (without the envelope); a push config without its secrets.

    ``PushConfigSet.config`` keeps a webhook's ``token`` and ``authentication.credentials`` in
    the log for delivery; the public form (NATS, ``longhaul history``) leaves them out. A
    client's secret parts (sealed in ``Submitted.message`` and ``InputReceived.message``) show
    as ``store.secrets.secret_parts.REDACTED_PART``.
    """
    body = {k: v for k, v in vars(event).items() if k not in ENVELOPE_FIELDS}
    if isinstance(event, Task.PushConfigSet):
        body["config"] = public_push_config(body["config"])
    elif "message" in body:
        body["message"] = public_message(body["message"])
    return body


def json_ready(value: Any) -> Any:
    """``value`` with the non-JSON types events hold (times, UUIDs, tuples) made JSON values."""
    if isinstance(value, dict):
        return {str(k): json_ready(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [json_ready(v) for v in value]
    if isinstance(value, datetime):
        return iso(value)
    if isinstance(value, UUID):
        return str(value)
    return value
