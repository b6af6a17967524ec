"""Skill parameters as ProtoJSON gives them: ``3.0`` and ``"3"`` are 3, ``"yes"`` is no boolean.

The a2a-sdk sends a data part as a protobuf ``Struct``, whose numbers are doubles; ProtoJSON writes
64-bit integers as strings. ``workers.skills.parts`` reads both, and every built-in skill reads
its integers through it.
"""

from __future__ import annotations

import json
import math

from hypothesis import given
from hypothesis import strategies as st

from domain.states import TaskState
from longhaul.testing import SkillKit, message_text
from workers.skills.access_review import parse_plan, read_decision
from workers.skills.parts import as_bool, as_int, as_number
from workers.skills.research import RESEARCH

EXACT_DOUBLES = st.integers(min_value=-(2**53), max_value=2**53)
"""Integers a double holds exactly, as a Struct carries them."""

NOT_BOOLEANS = st.one_of(
    st.none(),
    st.integers(),
    st.floats(),
    st.text(),
    st.sampled_from(["yes", "no", "true", "false", "1", "0", "on"]),
    st.lists(st.booleans(), max_size=2),
)


@given(EXACT_DOUBLES)
def test_a_whole_number_double_is_the_integer(n: int) -> None:
    value = json.loads(json.dumps(float(n)))  # on the wire: 3.0
    assert isinstance(value, float)
    read = as_int(value)
    assert read == n
    assert type(read) is int


@given(st.integers(min_value=-(2**63), max_value=2**64 - 1))
def test_a_64_bit_integer_may_come_as_a_string(n: int) -> None:
    assert as_int(str(n)) == n
    assert as_int(n) == n


@given(st.floats(allow_nan=True, allow_infinity=True).filter(lambda x: not x.is_integer()))
def test_a_fraction_or_a_non_finite_double_is_no_integer(x: float) -> None:
    assert as_int(x) is None
    assert as_int(repr(x)) is None


@given(st.text().filter(lambda s: not s.lstrip("-").isdigit()))
def test_text_that_is_no_decimal_integer_is_none(text: str) -> None:
    assert as_int(text) is None


def test_spellings_protojson_does_not_write_are_refused() -> None:
    for text in ["3.0", "+3", "03", " 3", "3 ", "1e3", "-", "", "٣"]:
        assert as_int(text) is None, text


@given(st.booleans())
def test_a_boolean_is_no_number(flag: bool) -> None:
    assert as_int(flag) is None
    assert as_number(flag) is None
    assert as_bool(flag) is flag


@given(NOT_BOOLEANS)
def test_only_true_and_false_are_booleans(value: object) -> None:
    assert as_bool(value) is None


@given(st.floats(allow_nan=False, allow_infinity=False))
def test_a_finite_double_is_a_number_and_a_whole_one_is_an_int(x: float) -> None:
    read = as_number(x)
    assert read == x
    assert type(read) is (int if x.is_integer() else float)


def test_non_finite_doubles_are_no_numbers() -> None:
    assert as_number(math.inf) is None
    assert as_number(-math.inf) is None
    assert as_number(math.nan) is None


@given(
    systems=st.integers(min_value=1, max_value=10_000),
    revocations=st.integers(min_value=0, max_value=2**40),
    as_text=st.booleans(),
)
def test_access_review_takes_doubles_and_strings_and_plans_with_ints(
    systems: int, revocations: int, as_text: bool
) -> None:
    plan = parse_plan(
        {"systems": float(systems), "revocations": str(revocations) if as_text else float(revocations)}
    )
    assert isinstance(plan, dict)
    assert (plan["systems"], plan["revocations"]) == (systems, revocations)
    assert type(plan["systems"]) is int
    assert type(plan["revocations"]) is int


def test_access_review_still_refuses_what_is_no_integer() -> None:
    assert parse_plan({"systems": 3.5}) == "systems must be an integer from 1 to 10000, not 3.5"
    assert parse_plan({"systems": True}) == "systems must be an integer from 1 to 10000, not True"
    assert parse_plan({"revocations": "two"}) == "revocations must be an integer >= 0, not 'two'"
    assert parse_plan({"fail_after_revocations": 1.5}) == (
        "fail_after_revocations must be an integer >= 0 or null, not 1.5"
    )


@given(NOT_BOOLEANS)
def test_an_approval_is_true_or_false_never_yes(value: object) -> None:
    assert read_decision({"parts": [{"data": {"approve": value}}]}) is None


async def test_research_runs_with_a_double_for_its_chunk_count() -> None:
    with SkillKit(RESEARCH) as kit:
        task_id = kit.submit("research", text="q", data={"chunks": 2.0, "chunk_delay_ms": 0.0})
        task = await kit.run(task_id)
        assert task.state == TaskState.AUTH_REQUIRED
        assert task.checkpoint["chunks"] == 2
        assert type(task.checkpoint["chunks"]) is int

        refused = await kit.run(kit.submit("research", text="q", data={"chunks": 2.5}))
        assert refused.state == TaskState.REJECTED
        assert message_text(refused.status_message) == (
            "research: chunks must be an integer from 1 to 1000, not 2.5"
        )
