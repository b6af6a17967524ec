"""A request's hops from ``bench.traced_up``'s marks (``bench.request_hops.hop_table``), hand-made."""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import AsyncGenerator, Coroutine
from pathlib import Path
from typing import Any

import pytest

from bench import a2a_compare
from bench.request_hops import Mark, hop_table, read_marks
from bench.traced_up import FOLLOWERS, MARKS, WHAT_IFS, _first_written, _idle_worker, _without


def _call(start: float, *spans: tuple[str, float], thread: str = "MainThread") -> list[Mark]:
    """``send+``, then each ``(name, ms after the previous mark)``."""
    marks = [(start, "send+", thread)]
    at = start
    for name, ms in spans:
        at += ms / 1000
        marks.append((at, name, thread))
    return marks


def test_each_hop_is_the_time_from_one_mark_to_the_next_over_the_calls_of_the_common_way() -> None:
    marks: list[Mark] = []
    for i, commit_ms in enumerate([1.0, 2.0, 4.0]):
        marks += _call(i * 1.0, ("commit+", 0.5), ("commit-", commit_ms), ("send-", 0.25))
    marks += _call(5.0, ("commit+", 9.0), ("send-", 9.0))  # another way: left out of the hops
    table = hop_table(list(reversed(marks)))  # read in any order: sorted by time

    assert table["calls"] == 4
    assert table["typical"] == 3
    assert [(h["from"], h["to"]) for h in table["hops"]] == [
        ("send+", "commit+"),
        ("commit+", "commit-"),
        ("commit-", "send-"),
    ]
    assert table["hops"][1]["p50_ms"] == 2.0
    assert round(table["hops"][1]["mean_ms"], 4) == round(7 / 3, 4)
    assert table["total_p50_ms"] == 2.75
    assert table["between_p50_ms"] == round(1000 - 1.75, 4)  # a call's end to the next one's start


def test_marks_outside_a_call_and_an_unfinished_call_are_not_counted() -> None:
    marks = [(0.0, "commit+", "w"), (0.1, "commit-", "w")]  # before any call
    marks += _call(1.0, ("submit+", 1.0), ("submit-", 1.0), ("send-", 1.0))
    marks += [(2.0, "send+", "MainThread"), (2.1, "submit+", "w")]  # stopped before its end
    table = hop_table(marks)

    assert (table["calls"], table["typical"]) == (1, 1)
    assert [h["p50_ms"] for h in table["hops"]] == [1.0, 1.0, 1.0]
    assert table["between_p50_ms"] is None


def test_no_call_gives_an_empty_table() -> None:
    assert hop_table([(0.0, "commit+", "w")]) == {
        "calls": 0,
        "typical": 0,
        "hops": [],
        "total_p50_ms": None,
        "between_p50_ms": None,
    }


def test_marks_are_read_as_traced_up_writes_them(tmp_path: Path) -> None:
    path = tmp_path / "hops.txt"
    path.write_text("12.5000000 send+ MainThread\n12.5010000 submit+ asyncio_0 worker thread\n")

    assert read_marks(path) == [(12.5, "send+", "MainThread"), (12.501, "submit+", "asyncio_0 worker thread")]


def test_a_what_if_leaves_out_the_followers_it_names_and_closes_them() -> None:
    started: list[str] = []

    async def part(name: str) -> None:
        started.append(name)

    made: list[Coroutine[Any, Any, None]] = []

    def log_followers() -> list[Coroutine[Any, Any, None]]:
        made[:] = [part(name) for name in FOLLOWERS]
        return list(made)

    kept = _without(log_followers, {"no-relay", "no-sequencer"})()
    assert [made.index(coroutine) for coroutine in kept] == [1, 2]  # the projector, the dispatcher
    states = [inspect.getcoroutinestate(coroutine) for coroutine in made]
    assert states == ["CORO_CLOSED", "CORO_CREATED", "CORO_CREATED", "CORO_CLOSED"]
    for coroutine in kept:
        coroutine.close()
    assert _without(log_followers, {"no-followers"})() == []
    assert started == []


def test_a_what_if_refuses_a_list_of_other_parts() -> None:
    with pytest.raises(AssertionError, match="changed its parts"):
        _without(list, {"no-relay"})()


def test_no_worker_waits_for_the_stop_and_runs_nothing() -> None:
    async def scenario() -> bool:
        stop = asyncio.Event()
        idle = asyncio.ensure_future(_idle_worker(None, None, stop, process=None))
        await asyncio.sleep(0.01)
        running = not idle.done()
        stop.set()
        await asyncio.wait_for(idle, timeout=1.0)
        return running

    assert asyncio.run(scenario())


def test_a_what_if_of_the_compare_adds_longhaul_base_and_refuses_what_it_cannot_run() -> None:
    args = a2a_compare.parse_args(
        [
            "--servers",
            "longhaul",
            "sdk-memory",
            "--modes",
            "immediately",
            "--what-if",
            "no-worker,no-followers",
        ]
    )
    assert args.servers == ["longhaul", "sdk-memory", "longhaul-base"]
    assert args.what_if == "no-worker,no-followers"
    assert set(WHAT_IFS) >= {"no-worker", "no-followers", "no-relay"}
    with pytest.raises(SystemExit):
        a2a_compare.parse_args(["--what-if", "no-gateway"])
    with pytest.raises(SystemExit):  # nothing would end a blocking call or a stream
        a2a_compare.parse_args(["--modes", "immediately", "stream", "--what-if", "no-worker"])


def test_a_stream_is_marked_once_its_first_chunk_was_written_and_its_body_closes() -> None:
    closed: list[bool] = []

    async def body() -> AsyncGenerator[bytes, None]:
        try:
            for chunk in (b"first", b"second", b"third"):
                yield chunk
        finally:
            closed.append(True)

    async def scenario() -> list[str]:
        seen: list[str] = []
        before = len(MARKS)
        chunks = _first_written(body)()
        await anext(chunks)
        seen.append(f"after the first: {[name for _, name, _ in MARKS[before:]]}")
        await anext(chunks)  # asked for the next chunk: the first one was written
        seen.append(f"after the second: {[name for _, name, _ in MARKS[before:]]}")
        await anext(chunks)
        await chunks.aclose()
        seen.append(f"at the end: {[name for _, name, _ in MARKS[before:]]}")
        return seen

    assert asyncio.run(scenario()) == [
        "after the first: []",
        "after the second: ['stream-']",
        "at the end: ['stream-']",
    ]
    assert closed == [True]
