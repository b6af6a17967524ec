"""The NATS message schema: generated from the domain's events, committed as docs/events.schema.json,
and what ``event_message`` and a real relay produce validates against it."""

from __future__ import annotations

import asyncio
import dataclasses
import json
from datetime import timedelta
from pathlib import Path
from typing import Any

import jsonschema
import nats
import pytest
from hypothesis import given as hypothesis_given
from hypothesis import strategies as st

from store.log.application import TaskApplication
from store.public_form.event_json import dumps, event_message, reference_message
from store.public_form.message_schema import (
    EVENT_MESSAGE,
    MESSAGE_MODELS,
    event_classes,
    json_schema,
    schema_text,
)
from store.public_form.subjects import NatsNames
from tests.domain.support import (
    T0,
    Command,
    answer,
    artifact,
    ask,
    cancel,
    complete,
    effect,
    expire,
    extend,
    fail,
    fail_attempt,
    grant,
    progress,
    reject,
    release,
    remove_push,
    save,
    set_push,
    start_effect,
    step,
    submit,
)
from tests.support.tasks import new_task
from workers.relay import Relay

SCHEMA_FILE = Path(__file__).resolve().parents[2] / "docs" / "events.schema.json"
VALIDATOR = jsonschema.Draft202012Validator(json_schema())


def _events(*commands: Command) -> list[Any]:
    """The events of a submitted task after ``commands`` (one second apart), ``Submitted`` first."""
    task = submit()
    for offset, command in enumerate(commands, start=1):
        command(task, T0 + timedelta(seconds=offset))
    return list(task.collect_events())


def every_event_type() -> list[Any]:
    """At least one event of every type the log may hold."""
    return [
        *_events(grant(), extend(), save(0), progress(), artifact(), effect(), set_push(), remove_push(),
                 release(), grant(), step(0, epoch=2), complete(epoch=2), expire()),
        *_events(grant(), ask(), answer(), grant(), ask(1, epoch=2, auth=True, on_deadline="cancel"),
                 cancel()),
        *_events(grant(), start_effect(), fail_attempt(), fail()),
        *_events(grant(), reject()),
    ]  # fmt: skip


def _messages() -> list[dict[str, Any]]:
    """The JSON ``event_message`` makes of every event type, as a reader decodes it."""
    return [json.loads(dumps(event_message(i, "acme", e))) for i, e in enumerate(every_event_type(), start=1)]


def test_the_committed_schema_is_the_one_the_code_generates() -> None:
    assert SCHEMA_FILE.read_text() == schema_text(), (
        "docs/events.schema.json differs from the models: "
        "uv run python -m store.public_form.message_schema > docs/events.schema.json"
    )


def test_the_schema_is_a_valid_json_schema_with_one_message_per_event_type() -> None:
    jsonschema.Draft202012Validator.check_schema(json_schema())
    assert set(MESSAGE_MODELS) == set(event_classes())
    assert len(event_classes()) == 21


def test_each_body_schema_holds_exactly_the_event_class_fields() -> None:
    definitions = json_schema()["$defs"]
    for name, cls in event_classes().items():
        own = {f.name for f in dataclasses.fields(cls)} - {
            "originator_id",
            "originator_version",
            "timestamp",
            "originator_topic",
        }
        body = definitions[f"{name}Body"]
        assert set(body["properties"]) == own, name
        assert set(body["required"]) == own, name
        assert body["additionalProperties"] is False


def test_every_event_type_message_validates() -> None:
    messages = _messages()

    assert {m["type"] for m in messages} == set(event_classes()), "a type without a sample event"
    for message in messages:
        VALIDATOR.validate(message)
        assert type(EVENT_MESSAGE.validate_python(message)).__name__ == f"{message['type']}Message"


def test_a_reference_message_validates() -> None:
    event = _events(grant())[1]
    message = json.loads(dumps(reference_message(9, "acme", event, reason="too large")))

    VALIDATOR.validate(message)
    assert message["body"] is None


def _all_errors(errors: Any) -> list[str]:
    """Every message of ``errors`` and of the errors under each (those of each ``oneOf`` branch)."""
    return [m for e in errors for m in (e.message, *_all_errors(e.context or []))]


@pytest.mark.parametrize(
    ("change", "says"),
    [
        (lambda m: m["body"].pop("epoch"), "'epoch' is a required property"),
        (lambda m: m["body"].update(epoch="one"), "'one' is not of type 'integer'"),
        (lambda m: m["body"].update(extra=1), "Additional properties are not allowed"),
        (lambda m: m.update(type="NoSuchEvent"), "'LeaseGranted' was expected"),
        (lambda m: m.update(version=0), "0 is less than the minimum of 1"),
        (lambda m: m.pop("taskId"), "'taskId' is a required property"),
    ],
)
def test_a_message_that_breaks_the_schema_is_refused(change: Any, says: str) -> None:
    message = next(m for m in _messages() if m["type"] == "LeaseGranted")
    change(message)

    errors = _all_errors(VALIDATOR.iter_errors(message))
    assert errors
    assert any(says in e for e in errors), errors


@hypothesis_given(
    tenant=st.text(max_size=20),
    text=st.text(max_size=50),
    data=st.dictionaries(st.text(max_size=8), st.integers() | st.text(max_size=8) | st.none(), max_size=4),
)
def test_untrusted_client_content_still_makes_valid_messages(
    tenant: str, text: str, data: dict[str, Any]
) -> None:
    message = {"messageId": "m", "role": "ROLE_USER", "parts": [{"text": text}, {"data": data}]}
    task = submit(tenant=tenant, message=message, params=data)
    for event in task.collect_events():
        VALIDATOR.validate(json.loads(dumps(event_message(1, tenant, event))))


async def test_what_a_real_relay_publishes_validates(
    store: TaskApplication, nats_url: str, nats_names: tuple[str, str]
) -> None:
    names = NatsNames(url=nats_url, stream=nats_names[0], subject_prefix=nats_names[1])
    task = new_task(T0)
    for offset, command in enumerate((grant(), artifact(), progress(), step(0), complete()), start=1):
        command(task, T0 + timedelta(seconds=offset))
    store.save_tasks(task)
    relay = Relay(store=store, names=names)
    stop = asyncio.Event()
    running = asyncio.ensure_future(relay.run(stop))
    for _ in range(400):
        if relay.published >= 6:
            break
        await asyncio.sleep(0.025)
    stop.set()
    await running

    client = await nats.connect(nats_url)
    try:
        js = client.jetstream()
        info = await js.stream_info(names.stream)
        bodies = [
            json.loads((await js.get_msg(names.stream, seq)).data or b"")
            for seq in range(1, info.state.last_seq + 1)
        ]
    finally:
        await client.close()
    assert [b["type"] for b in bodies] == [
        "Submitted",
        "LeaseGranted",
        "ArtifactChunkAppended",
        "ProgressReported",
        "StepCompleted",
        "Completed",
    ]
    for body in bodies:
        VALIDATOR.validate(body)
