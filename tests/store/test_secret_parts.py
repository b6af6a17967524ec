"""Sealing secret parts: AES-256-GCM round trips, and every alteration of a sealed value is refused.

Pure: no store (``store.secrets.task_keys`` and ``store.secrets.secret_parts`` on values).
"""

from __future__ import annotations

import base64
import json
import uuid
from typing import Any
from uuid import UUID

import pytest
from hypothesis import given
from hypothesis import strategies as st

from store.log.parameters import params_of
from store.secrets.secret_parts import (
    REDACTED_PART,
    SECRET_EXTENSION,
    holds_sealed,
    is_sealed,
    needs_sealing,
    redact_message,
    reveal_message,
    seal_message,
)
from store.secrets.task_keys import SecretUnreadableError, TaskKey, seal, unseal

TASK = UUID("0b9e3c1c-33c5-4a0e-9d2a-6f1c7a6b2e11")
KEY = TaskKey.new(TASK, "acme")

json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**53), 2**53) | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=12,
)
parts = st.one_of(
    st.builds(lambda t: {"text": t}, st.text(max_size=40)),
    st.builds(lambda d: {"data": d}, st.dictionaries(st.text(max_size=8), json_values, max_size=4)),
)
versions = st.integers(1, 2**63 - 1)
indexes = st.integers(0, 2**32 - 1)


def secret(part: dict[str, Any]) -> dict[str, Any]:
    return {**part, "metadata": {SECRET_EXTENSION: True}}


@given(plaintext=st.binary(max_size=512), version=versions, index=indexes)
def test_a_sealed_value_opens_to_what_was_sealed(plaintext: bytes, version: int, index: int) -> None:
    envelope = seal(KEY, plaintext, version=version, index=index)

    assert unseal(KEY, envelope, task_id=TASK, index=index) == plaintext
    assert plaintext == b"" or base64.b64encode(plaintext).decode() not in json.dumps(envelope)


@given(
    plaintext=st.binary(min_size=1, max_size=128),
    version=versions,
    index=indexes,
    member=st.sampled_from(["ciphertext", "nonce"]),
    byte=st.integers(0, 10_000),
    flip=st.integers(1, 255),
)
def test_a_changed_byte_of_ciphertext_or_nonce_is_refused(
    plaintext: bytes, version: int, index: int, member: str, byte: int, flip: int
) -> None:
    envelope = seal(KEY, plaintext, version=version, index=index)
    data = bytearray(base64.b64decode(envelope[member]))
    data[byte % len(data)] ^= flip
    altered = {**envelope, member: base64.b64encode(bytes(data)).decode()}

    with pytest.raises(SecretUnreadableError, match="altered"):
        unseal(KEY, altered, task_id=TASK, index=index)


@given(
    plaintext=st.binary(max_size=64),
    version=versions,
    index=indexes,
    other_version=versions,
    other_index=indexes,
    other_task=st.uuids(),
)
def test_the_associated_data_binds_task_version_and_part(
    plaintext: bytes, version: int, index: int, other_version: int, other_index: int, other_task: UUID
) -> None:
    envelope = seal(KEY, plaintext, version=version, index=index)

    if other_version != version:
        with pytest.raises(SecretUnreadableError):
            unseal(KEY, {**envelope, "version": other_version}, task_id=TASK, index=index)
    if other_index != index:
        with pytest.raises(SecretUnreadableError):
            unseal(KEY, envelope, task_id=TASK, index=other_index)
    if other_task != TASK:
        moved = TaskKey(task_id=other_task, tenant="acme", key_id=KEY.key_id, key=KEY.key)
        with pytest.raises(SecretUnreadableError):
            unseal(moved, envelope, task_id=other_task, index=index)


def test_no_key_or_another_key_is_refused_saying_the_key_was_destroyed() -> None:
    envelope = seal(KEY, b"sk-live", version=3, index=0)

    with pytest.raises(SecretUnreadableError, match="key was destroyed"):
        unseal(None, envelope, task_id=TASK, index=0)
    with pytest.raises(SecretUnreadableError, match="key was destroyed"):
        unseal(TaskKey.new(TASK, "acme"), envelope, task_id=TASK, index=0)


@pytest.mark.parametrize(
    "change",
    [
        {"alg": "A128GCM"},
        {"nonce": "not base64!"},
        {"ciphertext": 42},
        {"version": "3"},
        {"version": True},
        {"version": 0},
    ],
)
def test_a_malformed_envelope_is_refused(change: dict[str, Any]) -> None:
    envelope = seal(KEY, b"sk-live", version=3, index=0)

    with pytest.raises(SecretUnreadableError):
        unseal(KEY, {**envelope, **change}, task_id=TASK, index=0)


@given(
    before=st.lists(parts, max_size=3),
    secrets=st.lists(parts, min_size=1, max_size=3),
    version=versions,
    every=st.booleans(),
)
def test_a_sealed_message_shows_redacted_and_reveals_as_sent(
    before: list[dict[str, Any]], secrets: list[dict[str, Any]], version: int, every: bool
) -> None:
    message = {"messageId": "m-1", "role": "ROLE_USER", "parts": [*before, *map(secret, secrets)]}
    assert needs_sealing(message, all_parts=every)

    sealed = seal_message(message, KEY, version=version, all_parts=every)

    assert holds_sealed(sealed)
    sealed_count = len(message["parts"]) if every else len(secrets)
    assert sum(is_sealed(p) for p in sealed["parts"]) == sealed_count
    shown = redact_message(sealed)
    assert shown["parts"][len(message["parts"]) - len(secrets) :] == [REDACTED_PART] * len(secrets)
    assert shown == redact_message(message, all_parts=every)
    assert reveal_message(sealed, KEY, task_id=TASK) == message
    assert SECRET_EXTENSION + '": true' not in json.dumps(sealed)  # no marked part left in clear


def test_a_message_without_secrets_is_itself_everywhere() -> None:
    message = {"messageId": "m-1", "role": "ROLE_USER", "parts": [{"text": "hello"}]}

    assert not needs_sealing(message)
    assert redact_message(message) is message
    assert reveal_message(message, None, task_id=TASK) is message


def test_a_sealed_part_without_its_key_cannot_be_revealed() -> None:
    message = {"messageId": "m", "role": "ROLE_USER", "parts": [secret({"data": {"api_key": "sk-1"}})]}
    sealed = seal_message(message, KEY, version=2)

    with pytest.raises(SecretUnreadableError, match="destroyed"):
        reveal_message(sealed, None, task_id=TASK)
    with pytest.raises(SecretUnreadableError):
        reveal_message(sealed, KEY, task_id=uuid.uuid4())


def test_a_secret_part_is_never_a_parameter() -> None:
    message = {
        "messageId": "m",
        "role": "ROLE_USER",
        "parts": [secret({"data": {"api_key": "sk-1"}}), {"data": {"chunks": 2}}],
    }

    assert params_of(message) == {"chunks": 2}
    assert params_of(seal_message(message, KEY, version=1)) == {"chunks": 2}
