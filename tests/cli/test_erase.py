"""``longhaul erase --tenant T``: the tenant's keys go, its secrets become unreadable, the log stays."""

from __future__ import annotations

from collections.abc import Callable
from uuid import UUID

import pytest

from store.log.application import TaskApplication
from store.secrets.task_keys import SecretUnreadableError
from tests.store.test_task_keys import answer_with_key, paused


def stored_bytes(store: TaskApplication, task_id: UUID) -> list[bytes]:
    return [e.state for e in store.recorder.select_events(task_id)]


def test_erase_destroys_the_tenants_keys_and_changes_no_stored_byte(
    cli: Callable[..., tuple[int, str, str]], store: TaskApplication
) -> None:
    acme = [answer_with_key(store, paused(store, tenant="acme")) for _ in range(2)]
    globex = answer_with_key(store, paused(store, tenant="globex"))
    before = {t.id: stored_bytes(store, t.id) for t in [*acme, globex]}

    code, out, err = cli("erase", "--tenant", "acme")

    assert (code, err) == (0, "")
    assert out == "erased the keys of 2 tasks of tenant acme: their secrets can no longer be read\n"
    for task in acme:
        assert store.task_keys.get(task.id) is None
        with pytest.raises(SecretUnreadableError, match="longhaul erase"):
            store.reveal(task, store.get(task.id).latest_input)
    assert store.reveal(globex, globex.latest_input)["parts"] == [
        {"data": {"api_key": "sk-live-key-that-must-never-show-0123"}}
    ]
    assert {t.id: stored_bytes(store, t.id) for t in [*acme, globex]} == before  # the log is as it was
    assert cli("erase", "--tenant", "acme")[1].startswith("erased the keys of 0 tasks")


def test_erase_needs_a_tenant(cli: Callable[..., tuple[int, str, str]]) -> None:
    with pytest.raises(SystemExit) as refused:
        cli("erase")

    assert refused.value.code == 2
