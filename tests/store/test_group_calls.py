"""The group-commit mechanism: callers waiting together share one run, and its failures."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

import pytest

from store.log.group_calls import GroupedCalls


async def test_callers_waiting_together_share_one_run_each_with_its_own_result() -> None:
    groups: list[list[int]] = []

    async def double(items: list[int]) -> list[int | BaseException]:
        groups.append(items)
        await asyncio.sleep(0.01)
        return [2 * item for item in items]

    calls: GroupedCalls[int, int] = GroupedCalls(double, max_group=3)
    results = await asyncio.gather(*(calls.call(n) for n in range(5)))

    assert results == [0, 2, 4, 6, 8]
    assert groups == [[0, 1, 2], [3, 4]]  # all five waited together: groups of at most three


async def test_an_exception_in_the_results_fails_only_its_caller() -> None:
    async def refuse_odd(items: list[int]) -> list[int | BaseException]:
        return [ValueError(item) if item % 2 else item for item in items]

    calls: GroupedCalls[int, int] = GroupedCalls(refuse_odd, max_group=10)
    results = await asyncio.gather(*(calls.call(n) for n in range(4)), return_exceptions=True)

    assert results[0] == 0
    assert results[2] == 2
    assert isinstance(results[1], ValueError)
    assert isinstance(results[3], ValueError)


async def test_a_failed_run_fails_every_caller_of_its_group_and_the_next_group_still_runs() -> None:
    runs = 0

    async def fail_first(items: list[int]) -> Sequence[int | BaseException]:
        nonlocal runs
        runs += 1
        await asyncio.sleep(0.01)
        if runs == 1:
            raise ConnectionError("the database went away")
        return items

    calls: GroupedCalls[int, int] = GroupedCalls(fail_first, max_group=10)
    first = asyncio.ensure_future(calls.call(1))
    await asyncio.sleep(0)
    later = [asyncio.ensure_future(calls.call(n)) for n in (2, 3)]

    with pytest.raises(ConnectionError):
        await first
    assert await asyncio.gather(*later) == [2, 3]
