"""``longhaul projector`` and ``longhaul projections rebuild|status`` on the real PostgreSQL."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from longhaul import processes
from projections.retention_index import open_index
from projections.task_view import open_view
from store.log.application import TaskApplication
from store.log.config import StoreConfig
from tests.api.support import Advance, FakeClock, make_registry, user_message


def make_tasks(store: TaskApplication, n: int = 3) -> None:
    clock = FakeClock()
    skill = make_registry().newest("echo")
    for _ in range(n):
        task = store.submit(tenant="default", message=user_message(), skill=skill, clock=clock)
        Advance(store, clock).complete(task.id)


def log_position(store: TaskApplication) -> int:
    return store.recorder.max_notification_id() or 0


def test_status_shows_the_lag_and_rebuild_removes_it(cli: Any, postgres_store: TaskApplication) -> None:
    make_tasks(postgres_store)
    end = log_position(postgres_store)

    code, out, _ = cli("projections", "status")
    assert code == 0
    assert out.splitlines() == [
        f"current-task view: at log position 0 of {end} ({end} behind)",
        f"retention index: at log position 0 of {end} ({end} behind)",
        f"file index: at log position 0 of {end} ({end} behind)",
    ]

    code, out, _ = cli("projections", "rebuild")
    assert code == 0
    assert out.splitlines() == [
        f"current-task view: rebuilt 3 tasks up to log position {end}",
        f"retention index: rebuilt 3 tasks up to log position {end}",
        f"file index: rebuilt 0 tasks up to log position {end}",
        f"current-task view: at log position {end} of {end} (0 behind)",
        f"retention index: at log position {end} of {end} (0 behind)",
        f"file index: at log position {end} of {end} (0 behind)",
    ]


async def test_the_projector_follows_the_log_until_stopped(
    store_config: StoreConfig, postgres_store: TaskApplication
) -> None:
    view, index = open_view(postgres_store), open_index(postgres_store)
    assert view is not None
    assert index is not None
    stop = asyncio.Event()
    running = asyncio.ensure_future(processes.run_projector(store_config, stop))
    try:
        await asyncio.to_thread(make_tasks, postgres_store, 4)
        await asyncio.to_thread(view.wait, postgres_store.name, log_position(postgres_store), 20)
        await asyncio.to_thread(index.wait, postgres_store.name, log_position(postgres_store), 20)
        assert view.lag(postgres_store).behind == 0
        assert len(view.rows()) == 4
        assert index.lag(postgres_store).behind == 0
        assert [r.ended_at is not None for r in index.rows()] == [True] * 4
    finally:
        stop.set()
        await running


def test_the_projection_commands_refuse_a_memory_store(cli: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LONGHAUL_STORE", "memory")
    code, _, err = cli("projections", "rebuild")
    assert code == 1
    assert "LONGHAUL_STORE=postgres" in err
