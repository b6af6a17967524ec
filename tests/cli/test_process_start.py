"""How ``longhaul <process>`` starts its process: the event loop it runs on, its startup heap frozen."""

from __future__ import annotations

import asyncio
import gc
import weakref
from collections.abc import Callable, Coroutine, Iterator
from typing import Any

import pytest
import uvloop

from longhaul import cli
from longhaul.settings import Settings

Process = Callable[[Settings], Coroutine[Any, Any, None]]


@pytest.fixture
def thawed() -> Iterator[None]:
    """What a process start froze goes back to the collector after the test (this is pytest's heap)."""
    yield
    gc.unfreeze()


def test_the_dispatcher_relay_and_up_processes_run_on_uvloop_and_the_others_on_asyncio(
    monkeypatch: pytest.MonkeyPatch, thawed: None
) -> None:
    loops: dict[str, type] = {}

    def recording(name: str) -> Process:
        async def process(_: Settings) -> None:
            loops[name] = type(asyncio.get_running_loop())

        return process

    commands = ("dispatcher", "relay", "up", "worker")
    monkeypatch.setattr(cli, "PROCESSES", {name: recording(name) for name in commands})
    for command in commands:
        cli._run_process(command, Settings())
    assert loops["dispatcher"] is uvloop.Loop
    assert loops["relay"] is uvloop.Loop
    assert loops["up"] is uvloop.Loop
    assert not issubclass(loops["worker"], uvloop.Loop)


class _Node:
    """An object the collector tracks, able to hold a cycle."""

    other: _Node | None = None


@pytest.mark.parametrize("command", ["up", "worker"])  # on uvloop, on asyncio's loop
def test_a_process_runs_with_what_was_alive_at_its_start_frozen_and_collects_what_it_makes(
    monkeypatch: pytest.MonkeyPatch, thawed: None, command: str
) -> None:
    before = _Node()  # alive when the process starts, as its imports are
    seen: dict[str, Any] = {}

    async def process(_: Settings) -> None:
        tracked = gc.get_objects()  # every generation a collection visits (not the frozen one)
        seen["before visited"] = any(o is before for o in tracked)
        seen["frozen"] = gc.get_freeze_count()
        cycle = _Node()
        cycle.other = _Node()
        cycle.other.other = cycle
        gone = weakref.ref(cycle)
        del cycle
        gc.collect()
        seen["cycle collected"] = gone() is None

    monkeypatch.setattr(cli, "PROCESSES", {command: process})
    assert any(o is before for o in gc.get_objects())
    cli._run_process(command, Settings())
    assert seen["frozen"] > 0
    assert seen["before visited"] is False
    assert seen["cycle collected"] is True
