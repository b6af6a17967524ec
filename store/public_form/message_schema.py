"""The NATS message of one event as pydantic models, and its JSON Schema (``docs/events.schema.json``).

One model per event type, ``<Type>Message``: the envelope (``position``, ``taskId``, ``tenant``,
``version``, ``time``), ``type`` fixed to the event's name, and ``body``, whose model
``<Type>Body`` is generated from the event class in ``domain/task.py`` (its own fields and their
annotated types, the envelope left out). ``EventMessage`` is their union, told apart by ``type``.
A new event class, a new field or a changed type changes the schema by itself; the committed
schema file is checked against it by ``tests/projections/test_event_message.py``.

The relay builds each message as a plain dict (``store.public_form.event_json.event_message``,
whose body is the same ``event_body`` these models describe) and does not validate it: validating
would cost little beside building and encoding it, but on the relay's path a message that failed
validation would be an event it cannot publish, and no event may stall the relay. The tests validate what
``event_message`` and a real relay produce against the schema instead.

Regenerate the schema file with ``python -m store.public_form.message_schema > docs/events.schema.json``.
"""

from __future__ import annotations

import dataclasses
import json
import sys
import typing
from datetime import datetime
from typing import Annotated, Any, Literal, Union
from uuid import UUID

from eventsourcing.domain import DomainEvent
from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, create_model

from domain.task import Task
from store.public_form.event_json import ENVELOPE_FIELDS


def event_classes() -> dict[str, type[DomainEvent]]:
    """The event types the log may hold: ``Task``'s events that no other event extends.

    That leaves out the bases (``Task.Event``, ``_PauseRequested``, ``_Ended``) and the
    ``Task.Created`` that ``eventsourcing`` adds (``Submitted`` is Task's created event).
    """
    events = {
        name: cls
        for name, cls in vars(Task).items()
        if isinstance(cls, type) and issubclass(cls, DomainEvent) and cls is not Task.Created
    }
    bases = {base for cls in events.values() for base in cls.__mro__[1:]}
    return {name: cls for name, cls in events.items() if cls not in bases}


def body_fields(cls: type[DomainEvent]) -> dict[str, Any]:
    """An event's own fields and their types, in declaration order (the envelope left out)."""
    hints = typing.get_type_hints(cls)
    return {f.name: hints[f.name] for f in dataclasses.fields(cls) if f.name not in ENVELOPE_FIELDS}


class Envelope(BaseModel):
    """What every message carries besides ``type`` and ``body``."""

    model_config = ConfigDict(extra="forbid")

    position: int = Field(
        ge=1, description="The log position: global, increasing in commit order, gaps possible."
    )
    taskId: UUID = Field(description="The task id.")  # noqa: N815 - the wire name
    tenant: str = Field(description="The task's tenant.")
    version: int = Field(ge=1, description="The task version of this event (1, 2, ... per task, no gaps).")
    time: datetime = Field(description="The event time, ISO 8601 UTC with Z.")
    bodyOmitted: str | None = Field(  # noqa: N815 - the wire name
        default=None,
        description="Only with body null: why the body is not in the message (too large for NATS, "
        "or not encodable as JSON). Read the event from the log at taskId and version.",
    )


def _body_model(name: str, cls: type[DomainEvent]) -> type[BaseModel]:
    fields: dict[str, Any] = {field: (annotation, ...) for field, annotation in body_fields(cls).items()}
    config = ConfigDict(extra="forbid", title=f"{name}Body")
    return create_model(
        f"{name}Body", __config__=config, __doc__=f"The fields of one {name} event.", **fields
    )


def _message_model(name: str, cls: type[DomainEvent]) -> type[BaseModel]:
    fields: dict[str, Any] = {
        "type": (Literal[name], Field(description="The event type.")),
        "body": (
            _body_model(name, cls) | None,
            Field(description="The event's own fields; null when bodyOmitted says why."),
        ),
    }
    return create_model(
        f"{name}Message",
        __base__=Envelope,
        __doc__=f"One {name} event (class_version {getattr(cls, 'class_version', 1)}).",
        **fields,
    )


MESSAGE_MODELS: dict[str, type[BaseModel]] = {
    name: _message_model(name, cls) for name, cls in event_classes().items()
}
"""``<Type>Message`` by event type."""

_ANY_MESSAGE: Any = Union[tuple(MESSAGE_MODELS.values())]  # noqa: UP007 - a union built from a tuple
EventMessage: Any = Annotated[_ANY_MESSAGE, Field(discriminator="type")]
"""One NATS message: the ``<Type>Message`` its ``type`` names."""

EVENT_MESSAGE: TypeAdapter[Any] = TypeAdapter(EventMessage)


def json_schema() -> dict[str, Any]:
    """The JSON Schema (draft 2020-12) of one NATS message."""
    schema = EVENT_MESSAGE.json_schema()
    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "title": "longhaul event message",
        "description": "The body of one JetStream message the relay publishes: one committed event "
        "of the log. See docs/events.md.",
        **schema,
    }


def schema_text() -> str:
    """``json_schema()`` as the committed file holds it: sorted keys, two-space indent, newline."""
    return json.dumps(json_schema(), indent=2, sort_keys=True) + "\n"


if __name__ == "__main__":
    sys.stdout.write(schema_text())
