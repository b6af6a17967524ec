"""Retention spans as logs and ``Expired`` reasons write them."""

from __future__ import annotations

from datetime import timedelta

import pytest
from hypothesis import given
from hypothesis import strategies as st

from store.log.retention import RetentionPolicy, span


@pytest.mark.parametrize(
    ("retention", "text"),
    [
        (timedelta(days=30), "30 days"),
        (timedelta(days=1), "1 day"),
        (timedelta(hours=12), "12 hours"),
        (timedelta(days=1, hours=6), "1 day 6 hours"),
        (timedelta(seconds=90), "1 minute 30 seconds"),
        (timedelta(seconds=1), "1 second"),
        (timedelta(0), "0 seconds"),
        (timedelta(seconds=0.6), "0.6 seconds"),
        (timedelta(minutes=1, seconds=1.25), "1 minute 1.25 seconds"),
    ],
)
def test_a_span_reads_as_people_write_it(retention: timedelta, text: str) -> None:
    assert span(retention) == text


_SIZES = {"day": 86_400, "hour": 3_600, "minute": 60, "second": 1}


@given(st.integers(min_value=0, max_value=10**8))
def test_a_span_adds_up_to_the_retention(seconds: int) -> None:
    words = span(timedelta(seconds=seconds)).split()
    pairs = zip(words[::2], words[1::2], strict=True)
    assert sum(int(count) * _SIZES[unit.rstrip("s")] for count, unit in pairs) == seconds


def test_a_policy_names_its_default_and_shortest() -> None:
    policy = RetentionPolicy.of_settings(timedelta(days=30), {"skill:echo": timedelta(hours=1)})
    assert str(policy) == "30 days, 1 override(s), shortest 1 hour"
