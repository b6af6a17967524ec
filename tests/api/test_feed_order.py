"""The task feed's ordering: every version once, in order, gaps and references filled from the log.

``FeedOrder`` takes the log as a port, so these run without NATS or PostgreSQL: the live side
is whatever sequence Hypothesis makes up (losses, duplicates, reorderings, references).
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Sequence
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from api.task_feed import FeedOrder, is_reference, parse_message
from store.public_form.event_json import dumps

JSON = dict[str, Any]


def message(version: int, *, reference: bool = False) -> JSON:
    """A NATS message of version ``version``, or a reference to it."""
    if reference:
        return {"version": version, "type": "StepCompleted", "body": None, "bodyOmitted": "too big"}
    return {"version": version, "type": "StepCompleted", "body": {"step": version}}


class FakeLog:
    """A task's log of ``length`` events; records every read."""

    def __init__(self, length: int) -> None:
        self.length = length
        self.reads: list[tuple[int, int | None, int]] = []

    async def read(self, after: int, up_to: int | None, limit: int) -> Sequence[JSON]:
        self.reads.append((after, up_to, limit))
        top = self.length if up_to is None else min(up_to, self.length)
        return [message(v) for v in range(after + 1, top + 1)][:limit]


def run(order: FeedOrder, live: list[JSON], *, final_catch_up: bool = True) -> list[JSON]:
    async def feed() -> list[JSON]:
        out: list[JSON] = []
        for m in live:
            out += await order.accept(m)
        if final_catch_up:
            out += await order.catch_up()
        return out

    return asyncio.run(feed())


live_messages = st.lists(
    st.tuples(st.integers(1, 40), st.booleans()).map(lambda p: message(p[0], reference=p[1])), max_size=60
)


@given(
    length=st.integers(0, 40),
    after=st.integers(0, 40),
    live=live_messages,
    page=st.integers(1, 7),
)
def test_any_live_sequence_gives_each_version_once_in_order_with_its_body(
    length: int, after: int, live: list[JSON], page: int
) -> None:
    # Only committed events reach NATS: a live message never names a version the log lacks.
    live = [m for m in live if m["version"] <= length]
    log = FakeLog(length)
    order = FeedOrder(log.read, after, page=page)

    given_ = run(order, live)

    assert [m["version"] for m in given_] == list(range(after + 1, length + 1))
    assert not any(is_reference(m) for m in given_)
    assert order.last == max(after, length)


@given(length=st.integers(0, 40), live=live_messages)
def test_without_a_final_catch_up_what_was_given_is_a_gapless_prefix(length: int, live: list[JSON]) -> None:
    live = [m for m in live if m["version"] <= length]
    log = FakeLog(length)

    given_ = run(FeedOrder(log.read, 0), live, final_catch_up=False)

    highest_seen = max((m["version"] for m in live), default=0)
    assert [m["version"] for m in given_] == list(range(1, highest_seen + 1))


def test_a_live_sequence_in_order_reads_nothing_from_the_log() -> None:
    log = FakeLog(10)
    live = [message(v) for v in range(4, 11)]

    given_ = run(FeedOrder(log.read, 3), [*live, message(7), message(10)], final_catch_up=False)

    assert given_ == live  # the live messages themselves, duplicates dropped
    assert log.reads == []


def test_a_gap_reads_exactly_the_missing_versions() -> None:
    log = FakeLog(10)
    order = FeedOrder(log.read, 0)

    given_ = run(order, [message(1), message(2), message(6)], final_catch_up=False)

    assert [m["version"] for m in given_] == [1, 2, 3, 4, 5, 6]
    assert log.reads == [(2, 6, 500)]


def test_a_reference_is_replaced_by_the_event_from_the_log() -> None:
    log = FakeLog(3)

    given_ = run(
        FeedOrder(log.read, 0), [message(1), message(2, reference=True), message(3)], final_catch_up=False
    )

    assert given_ == [message(1), message(2), message(3)]
    assert log.reads == [(1, 2, 500)]


def test_a_long_catch_up_reads_page_by_page() -> None:
    log = FakeLog(12)

    given_ = run(FeedOrder(log.read, 0, page=5), [])

    assert [m["version"] for m in given_] == list(range(1, 13))
    assert log.reads == [(0, None, 5), (5, None, 5), (10, None, 5)]


def test_pages_hand_a_long_catch_up_over_one_page_at_a_time_reading_each_only_when_asked() -> None:
    log = FakeLog(12)
    order = FeedOrder(log.read, 0, page=5)

    async def first_page() -> list[JSON]:
        pages = order.pages()
        page = await anext(pages)
        await pages.aclose()
        return page

    page = asyncio.run(first_page())

    assert [m["version"] for m in page] == [1, 2, 3, 4, 5]
    assert log.reads == [(0, None, 5)]  # the next page is not read before it is wanted
    assert [m["version"] for m in run(order, [])] == list(range(6, 13))


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=5),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.sampled_from(["version", "type", "x"]), inner)
    ),
    max_leaves=6,
)


@given(data=st.binary(max_size=200) | json_values.map(lambda v: json.dumps(v).encode()))
def test_a_nats_message_is_an_event_message_or_refused_never_an_error(data: bytes) -> None:
    message = parse_message(data)

    if message is not None:
        assert isinstance(message["version"], int)
        assert not isinstance(message["version"], bool)
        assert isinstance(message["type"], str)


def test_deep_nesting_is_refused() -> None:
    assert parse_message(b"[" * 100_000) is None
    assert parse_message(dumps({"version": 3, "type": "Completed", "body": {}}).encode()) is not None
