"""``longhaul retrying``: the working tasks whose current step has failed attempts, from the view."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest

from store.log.application import TaskApplication
from tests.api.support import Advance, FakeClock, make_registry, user_message


def test_it_lists_the_tasks_retrying_a_step_with_the_count_and_the_last_failure(
    cli: Any, postgres_store: TaskApplication, capsys: pytest.CaptureFixture[str]
) -> None:
    store, clock = postgres_store, FakeClock()
    skill = make_registry().newest("echo")
    retrying, healthy, done = (
        store.submit(tenant="acme", message=user_message(), skill=skill, clock=clock).id for _ in range(3)
    )
    advance = Advance(store, clock)
    for task_id, attempts in ((retrying, 2), (done, 1)):
        task, epoch = advance._leased(task_id)
        for _ in range(attempts):
            clock.advance(timedelta(seconds=1))
            task.fail_attempt(epoch=epoch, now=clock(), step=0, cause="error", detail="OSError: refused")
        store.save_tasks(task)
    advance.complete(done)  # its step finally succeeded: no longer retrying
    advance.start(healthy)

    code, out, _ = cli("retrying")
    assert code == 0
    assert out.strip() == "no task is retrying a step", "nothing shows before the view is rebuilt"

    assert cli("projections", "rebuild")[0] == 0
    code, out, _ = cli("retrying")

    assert code == 0
    header, *rows = out.splitlines()
    assert header.split() == ["TASK", "TENANT", "SKILL", "FAILED", "SINCE", "LAST", "FAILURE"]
    assert len(rows) == 1, out
    assert rows[0].split()[:4] == [str(retrying), "acme", "echo", "2"]
    assert rows[0].endswith("step 0, error: OSError: refused")

    with pytest.raises(SystemExit) as refused:
        cli("retrying", "--limit", "0")
    assert refused.value.code == 2
    assert "0 is not a count" in capsys.readouterr().err
