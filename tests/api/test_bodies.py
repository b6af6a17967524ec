"""``parse_json`` refuses a body with a lone UTF-16 surrogate in every way JSON can carry one,
and reads it only once when the body cannot hold one (its hot path)."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from api.bodies import MAY_HOLD_A_SURROGATE, parse_json
from api.errors import JSONParseError

LONE = "invalid JSON: a string holds a lone UTF-16 surrogate (not Unicode text)"


def _reference(body: bytes) -> Any:
    """What ``parse_json`` answered before its fast path: every document re-encoded as UTF-8."""
    try:
        document = json.loads(body, parse_constant=_no_constant)
        json.dumps(document, ensure_ascii=False).encode()
    except UnicodeEncodeError:
        return LONE
    except (ValueError, RecursionError):
        return "invalid"
    return document


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def _answer(body: bytes) -> Any:
    try:
        return parse_json(body)
    except JSONParseError as error:
        return LONE if error.message == LONE else "invalid"


@pytest.mark.parametrize(
    "body",
    [
        rb'{"text": "\ud800"}',  # an escaped high surrogate
        rb'{"text": "\uDFFF"}',  # an escaped low one, upper-case hex
        b'{"text": "\xed\xa0\x80"}',  # a surrogate's UTF-8 bytes (json.loads reads them)
        '{"text": "\ud83d"}'.encode("utf-16-le", "surrogatepass"),  # UTF-16, no escape at all
        '{"text": "\udc00"}'.encode("utf-32", "surrogatepass"),
    ],
)
def test_a_lone_surrogate_is_refused_however_it_is_written(body: bytes) -> None:
    with pytest.raises(JSONParseError) as refused:
        parse_json(body)

    assert refused.value.message == LONE


@pytest.mark.parametrize(
    ("body", "text"),
    [
        (rb'{"text": "\ud83d\ude00"}', "\N{GRINNING FACE}"),  # a pair is one character
        (rb'{"text": "\\ud800"}', "\\ud800"),  # an escaped backslash: six characters of text
        ('{"text": "\N{GRINNING FACE}"}'.encode(), "\N{GRINNING FACE}"),
    ],
)
def test_text_that_only_looks_like_a_surrogate_is_read(body: bytes, text: str) -> None:
    assert parse_json(body) == {"text": text}


def test_a_plain_body_is_not_searched_twice() -> None:
    body = json.dumps({"message": {"parts": [{"text": "caf\N{LATIN SMALL LETTER E WITH ACUTE}"}]}}).encode()

    assert MAY_HOLD_A_SURROGATE.search(body) is None


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(st.characters(codec="utf-8")),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=3), inner, max_size=3),
    max_leaves=8,
)
surrogates = st.sampled_from(["\ud800", "\udbff", "\udc00", "\udfff"])
lone_or_any = st.lists(st.characters() | surrogates, max_size=6)


@given(
    value=json_values,
    text=lone_or_any.map("".join),
    ascii_escapes=st.booleans(),
    encoding=st.sampled_from(["utf-8", "utf-16-le", "utf-16", "utf-32"]),
)
def test_the_fast_path_answers_as_the_full_check(
    value: Any, text: str, ascii_escapes: bool, encoding: str
) -> None:
    document = json.dumps([value, text], ensure_ascii=ascii_escapes)
    body = document.encode(encoding, "surrogatepass")

    assert _answer(body) == _reference(body)


@given(st.binary(max_size=40))
def test_any_bytes_are_answered_as_the_full_check(body: bytes) -> None:
    assert _answer(body) == _reference(body)
