"""Random and junk arguments: every command either succeeds with a well-formed result or raises a
``DomainError`` and records nothing. Never another exception type, never junk in the log."""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime, timedelta
from typing import Any

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from domain.errors import (
    DeadlineNotReachedError,
    DomainError,
    EffectAlreadyRecordedError,
    InvalidCommandError,
    PauseDeadlinePassedError,
)
from domain.states import TaskState
from domain.task import ON_DEADLINE_CHOICES, Task
from tests.domain import support
from tests.domain.support import LATER, MemoryStore, ask, grant, state_of, text_message

FAST = settings(max_examples=60, deadline=None)

_text = st.text(st.characters(exclude_categories=["Cs"]), max_size=8)
json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-(10**6), 10**6) | _text,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(_text, inner, max_size=3),
    max_leaves=6,
)
offsets = st.one_of(
    st.integers(-86_400 * 10, 86_400 * 10).map(lambda s: timedelta(seconds=s)),
    st.sampled_from([timedelta(0), timedelta(microseconds=1), timedelta(microseconds=-1)]),
)


def outcome(task: Task, command: Callable[[], object]) -> list[Any] | DomainError:
    """The events ``command`` recorded, or the ``DomainError`` it raised after recording nothing."""
    before, version = state_of(task), task.version
    try:
        command()
    except DomainError as error:
        assert list(task.collect_events()) == []
        assert (state_of(task), task.version) == (before, version)
        return error
    return list(task.collect_events())


def stored_copy(task: Task, events: list[Any]) -> tuple[Task, Task]:
    """The task rebuilt by an in-memory store from its events, and from a snapshot."""
    app = MemoryStore()
    app.save(*events)
    from_events: Task = app.repository.get(task.id)
    app.take_snapshot(task.id)
    from_snapshot: Task = app.repository.get(task.id)
    return from_events, from_snapshot


def comparable(task: Task) -> dict[str, Any]:
    return {k: v for k, v in vars(task).items() if k != "_pending_events"}


def working() -> Task:
    return support.given(grant())


# ------------------------------------------------------------------------- times and deadlines


@FAST
@given(offset=offsets, on_deadline=st.one_of(st.sampled_from(ON_DEADLINE_CHOICES), _text), auth=st.booleans())
def test_request_input_takes_only_future_deadlines_and_known_actions(
    offset: timedelta, on_deadline: str, auth: bool
) -> None:
    task = working()

    result = outcome(
        task, lambda: ask(0, deadline=LATER + offset, on_deadline=on_deadline, auth=auth)(task, LATER)
    )

    valid = offset > timedelta(0) and on_deadline in ON_DEADLINE_CHOICES
    assert isinstance(result, InvalidCommandError) != valid
    if valid:
        assert task.pause is not None
        assert (task.pause.deadline, task.pause.on_deadline) == (LATER + offset, on_deadline)


@FAST
@given(offset=offsets)
def test_lease_ends_must_lie_in_the_future(offset: timedelta) -> None:
    granted = support.given()
    extended = working()

    grant_result = outcome(granted, lambda: granted.grant_lease(worker="w", now=LATER, until=LATER + offset))
    extend_result = outcome(extended, lambda: extended.extend_lease(epoch=1, now=LATER, until=LATER + offset))

    for result in (grant_result, extend_result):
        assert isinstance(result, InvalidCommandError) == (offset <= timedelta(0))


@FAST
@given(answered_after=offsets)
def test_an_answer_counts_only_strictly_before_the_deadline(answered_after: timedelta) -> None:
    task = support.given(grant(), ask(0))  # asked at T0+2s
    deadline = support.at(seconds=2) + support.PAUSE
    now = deadline + answered_after
    if now < support.at(seconds=2):
        return  # time does not run backwards

    answered = outcome(task, lambda: support.answer()(task, now))

    assert isinstance(answered, PauseDeadlinePassedError) == (now >= deadline)
    assert task.state == (TaskState.INPUT_REQUIRED if now >= deadline else TaskState.WORKING)


@FAST
@given(swept_after=offsets, on_deadline=st.sampled_from(ON_DEADLINE_CHOICES))
def test_a_pause_expires_exactly_from_its_deadline(swept_after: timedelta, on_deadline: str) -> None:
    task = support.given(grant(), ask(0, on_deadline=on_deadline))
    deadline = support.at(seconds=2) + support.PAUSE

    swept = outcome(task, lambda: support.expire_pause()(task, deadline + swept_after))

    assert isinstance(swept, DeadlineNotReachedError) == (swept_after < timedelta(0))
    if not isinstance(swept, DomainError):
        assert task.state == (TaskState.FAILED if on_deadline == "fail" else TaskState.CANCELED)


_NAIVE = datetime(2026, 1, 6, 9, 0)  # naive on purpose


@pytest.mark.parametrize(
    "command",
    [
        lambda task: task.grant_lease(worker="w2", now=LATER + timedelta(hours=1), until=_NAIVE),
        lambda task: task.extend_lease(epoch=1, now=LATER, until=_NAIVE),
        lambda task: task.request_input(
            epoch=1, now=LATER, step=0, checkpoint={}, question=text_message("?"), deadline=_NAIVE
        ),
    ],
    ids=["grant_lease", "extend_lease", "request_input"],
)
def test_a_naive_time_is_an_invalid_command(command: Callable[[Task], None]) -> None:
    task = working()

    assert isinstance(outcome(task, lambda: command(task)), InvalidCommandError)


# ---------------------------------------------------------------------------------- artifacts

parts = st.lists(st.fixed_dictionaries({"text": _text}, optional={"metadata": json_values}), max_size=3)


@FAST
@given(
    chunks=st.lists(
        st.tuples(st.sampled_from(["a", "b", ""]), parts, st.booleans()),
        min_size=1,
        max_size=6,
    )
)
def test_well_typed_chunks_merge_as_a_concatenation(chunks: list[tuple[str, list[Any], bool]]) -> None:
    task = working()
    expected: dict[str, list[Any]] = {}

    for artifact_id, chunk_parts, append in chunks:
        body = {"artifactId": artifact_id, "parts": chunk_parts}

        def command(body: dict[str, Any] = body, append: bool = append) -> None:
            task.append_artifact(epoch=1, now=LATER, artifact=body, append=append)

        result = outcome(task, command)
        if not artifact_id or not chunk_parts:
            assert isinstance(result, InvalidCommandError)
            continue
        assert not isinstance(result, DomainError)
        earlier = expected.get(artifact_id, []) if append else []
        expected[artifact_id] = [*earlier, *chunk_parts]

    assert {k: v["parts"] for k, v in task.artifacts.items()} == expected


def _well_formed_artifacts(task: Task) -> None:
    for key, artifact in task.artifacts.items():
        assert isinstance(key, str)
        assert key
        assert artifact["artifactId"] == key
        assert isinstance(artifact["parts"], list)
        assert artifact["parts"]
        assert all(isinstance(part, dict) for part in artifact["parts"])


junk_artifacts = st.one_of(
    st.dictionaries(st.sampled_from(["artifactId", "parts", "name"]) | _text, json_values, max_size=4),
    st.fixed_dictionaries({"artifactId": json_values, "parts": json_values}),
)


@FAST
@given(body=junk_artifacts, append=st.booleans())
@example(body={"artifactId": "a", "parts": "abc"}, append=False)
@example(body={"artifactId": 5, "parts": [{"text": "x"}]}, append=False)
@example(body={"artifactId": ["a"], "parts": [{"text": "x"}]}, append=False)
def test_junk_artifacts_are_refused_or_well_formed(body: dict[str, Any], append: bool) -> None:
    task = support.submit()
    grant()(task, support.at(seconds=1))
    support.artifact("a", "first")(task, support.at(seconds=2))
    history = list(task.collect_events())

    result = outcome(task, lambda: task.append_artifact(epoch=1, now=LATER, artifact=body, append=append))

    if not isinstance(result, DomainError):
        from_events, from_snapshot = stored_copy(task, [*history, *result])
        assert comparable(from_events) == comparable(task)
        assert comparable(from_snapshot) == comparable(task), "a snapshot rebuilds a different task"
    _well_formed_artifacts(task)


# ------------------------------------------------------------------------------- push configs

configs = st.fixed_dictionaries(
    {},
    optional={
        "id": _text,
        "url": _text,
        "token": _text,
        "authentication": st.fixed_dictionaries({"scheme": _text, "credentials": _text}),
    },
)


@FAST
@given(config=configs)
def test_push_configs_need_a_string_id_and_url(config: dict[str, Any]) -> None:
    task = support.given()

    result = outcome(task, lambda: task.set_push_config(now=LATER, config=config))

    valid = (
        isinstance(config.get("id"), str)
        and config["id"]
        and isinstance(config.get("url"), str)
        and config["url"]
    )
    assert isinstance(result, InvalidCommandError) != bool(valid)
    if valid:
        assert task.push_configs == {config["id"]: config}


@FAST
@given(config=st.fixed_dictionaries({"id": json_values, "url": json_values}))
@example(config={"id": 5, "url": "https://hooks.example"})
@example(config={"id": ["p"], "url": "https://hooks.example"})
@example(config={"id": "0", "url": "0"})
def test_junk_push_configs_are_refused(config: dict[str, Any]) -> None:
    task = support.given()

    result = outcome(task, lambda: task.set_push_config(now=LATER, config=config))

    if not isinstance(result, DomainError):
        ((key, stored),) = task.push_configs.items()
        assert isinstance(key, str)
        assert isinstance(stored["url"], str)


# -------------------------------------------------------------------------------- effects


@FAST
@given(key=_text, result=json_values, again=json_values)
def test_any_effect_key_is_recorded_once(key: str, result: Any, again: Any) -> None:
    task = working()

    first = outcome(task, lambda: task.record_effect(epoch=1, now=LATER, key=key, result=result))
    second = outcome(task, lambda: task.record_effect(epoch=1, now=LATER, key=key, result=again))

    assert not isinstance(first, DomainError)
    assert isinstance(second, EffectAlreadyRecordedError)
    assert task.effects == {key: result}


@FAST
@given(message=st.dictionaries(_text, json_values, max_size=4), question=st.dictionaries(_text, json_values))
def test_messages_are_kept_as_given(message: dict[str, Any], question: dict[str, Any]) -> None:
    task = working()
    task.request_input(
        epoch=1, now=LATER, step=0, checkpoint={}, question=question, deadline=LATER + timedelta(hours=1)
    )
    task.receive_input(now=LATER, message=message)

    assert task.history[-2:] == [question, message]
    assert task.latest_input == message
