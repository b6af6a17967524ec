"""access-review through the in-memory runtime against a real fake IAM over HTTP."""

from __future__ import annotations

from collections import Counter
from datetime import timedelta
from typing import Any

import httpx
import pytest

from domain.skill import AskInput, SkillRegistry
from tests.skills.harness import (
    COMPLETED,
    FAILED,
    INPUT_REQUIRED,
    REJECTED,
    HarnessTask,
    SimulatedCrashError,
    answer,
    new_task,
    run,
    run_step,
    user_message,
)
from workers.skills import builtin_skills
from workers.skills.access_review import (
    SIMULATED_ERROR_KEY,
    SimulatedNetworkError,
    access_review_skill,
    parse_plan,
)

APPLY_STEP = 4


def start(iam_url: str | None, **params: Any) -> HarnessTask:
    first = user_message("Quarterly access review", data=params)
    return new_task(access_review_skill(iam_url), first, params)


def calls(client: httpx.Client, task: HarnessTask) -> list[dict[str, Any]]:
    result: list[dict[str, Any]] = client.get("/calls", params={"task_id": task.task_id}).json()
    return result


def everything(client: httpx.Client) -> list[dict[str, Any]]:
    result: list[dict[str, Any]] = client.get("/calls").json()
    return result


def revocations_applied(client: httpx.Client) -> list[dict[str, Any]]:
    result: list[dict[str, Any]] = client.get("/revocations").json()
    return result


def revocation_calls(client: httpx.Client, task: HarnessTask) -> list[dict[str, Any]]:
    return [c for c in calls(client, task) if c["method"] == "POST"]


def approve(value: object) -> dict[str, Any]:
    return user_message(data={"approve": value})


async def test_approved_review_applies_every_proposed_revocation_once(
    iam_url: str, iam_calls: httpx.Client
) -> None:
    task = start(iam_url)  # the seed's defaults: 40 systems, 14 revocations

    await run(task)

    assert task.state == INPUT_REQUIRED
    assert task.next_step == APPLY_STEP
    proposed = task.checkpoint["proposed"]
    assert len(proposed) == 14
    assert isinstance(task.pause, AskInput)
    assert task.pause.deadline is None  # the service's maximum pause
    assert all(p["grant_id"] in task.pause.question for p in proposed)
    assert '{"approve": true}' in task.pause.question

    answer(task, approve(True))
    await run(task)

    assert task.state == COMPLETED
    assert task.status_message == "Access review complete: 14 of 14 proposed revocations applied."
    posts = revocation_calls(iam_calls, task)
    keys = [f"{task.task_id}:revoke:{p['grant_id']}" for p in proposed]
    assert [c["idempotency_key"] for c in posts] == keys
    assert all(c["applied"] for c in posts)
    report = task.artifacts["report"]
    assert report["name"] == "access-review.md"
    assert report["parts"][0]["mediaType"] == "text/markdown"
    text = task.artifact_text("report")
    assert "40 of 40 systems reviewed; 200 grants read." in text
    assert "## Proposed revocations (14)" in text
    assert "## Applied revocations (14)" in text
    assert all(p["grant_id"] in text for p in proposed)


async def test_every_iam_request_names_the_task(iam_url: str, iam_calls: httpx.Client) -> None:
    task = start(iam_url, systems=3, revocations=2)
    await run(task)
    answer(task, approve(True))
    await run(task)

    received = everything(iam_calls)
    assert len(received) == 3 + 2
    assert {c["task_id"] for c in received} == {task.task_id}


async def test_declined_review_applies_nothing_and_says_so(iam_url: str, iam_calls: httpx.Client) -> None:
    task = start(iam_url, systems=5, revocations=3)
    await run(task)

    answer(task, approve(False))
    await run(task)

    assert task.state == COMPLETED
    assert revocation_calls(iam_calls, task) == []
    assert task.checkpoint.get("applied") is None or task.checkpoint["applied"] == []
    text = task.artifact_text("report")
    assert "declined the proposed revocations: none were applied" in text
    assert task.status_message == "Access review complete: the owners declined all 3 proposed revocations."


async def test_fetch_grants_commits_once_per_system(iam_url: str, iam_calls: httpx.Client) -> None:
    task = start(iam_url, systems=6, revocations=1)
    await run_step(task)  # plan
    task.commits.clear()

    await run_step(task)  # fetch_grants

    checkpoints = [payload for kind, payload in task.commits if kind == "checkpoint"]
    assert [c["fetched"] for c in checkpoints] == [[1], [1, 2], [1, 2, 3], [1, 2, 3, 4], [1, 2, 3, 4, 5]]
    assert task.commits[-1] == ("step", "Continue")  # system 6 travels in the step's own commit
    assert task.checkpoint["fetched"] == [1, 2, 3, 4, 5, 6]
    assert len(task.checkpoint["grants"]) == 30
    assert [c["path"] for c in calls(iam_calls, task)] == [f"/systems/{n}/grants" for n in range(1, 7)]


async def test_a_crash_mid_fetch_resumes_at_the_first_unfinished_system(
    iam_url: str, iam_calls: httpx.Client
) -> None:
    task = start(iam_url, systems=40)
    await run_step(task)  # plan
    task.crash_after_commits = 22  # dies right after committing system 22

    with pytest.raises(SimulatedCrashError):
        await run(task)
    assert task.checkpoint["fetched"] == list(range(1, 23))

    await run(task)  # another worker takes over from the checkpoint

    assert task.state == INPUT_REQUIRED
    fetched = Counter(c["path"] for c in calls(iam_calls, task))
    assert fetched == Counter(f"/systems/{n}/grants" for n in range(1, 41))  # each system exactly once


async def test_network_error_after_9_of_14_retries_only_the_other_5(
    iam_url: str, iam_calls: httpx.Client
) -> None:
    task = start(iam_url, revocations=14, fail_after_revocations=9, systems=40)
    await run(task)
    answer(task, approve(True))
    proposed = [p["grant_id"] for p in task.checkpoint["proposed"]]

    with pytest.raises(SimulatedNetworkError):
        await run_step(task)  # apply_revocations: the network error interrupts it

    first = revocation_calls(iam_calls, task)
    assert [c["idempotency_key"] for c in first] == [f"{task.task_id}:revoke:{g}" for g in proposed[:9]]
    assert task.next_step == APPLY_STEP  # the step did not finish
    assert SIMULATED_ERROR_KEY in task.effects  # the failure is on record, so it happens once

    await run(task)  # the retry: same step, from the same checkpoint

    assert task.state == COMPLETED
    assert task.errors == []  # the retry itself did not fail again
    posts = revocation_calls(iam_calls, task)
    retry = posts[9:]
    assert [c["idempotency_key"] for c in retry] == [f"{task.task_id}:revoke:{g}" for g in proposed[9:]]
    applied_per_key = Counter(c["idempotency_key"] for c in posts if c["applied"])
    assert len(applied_per_key) == 14
    assert set(applied_per_key.values()) == {1}
    assert len(posts) == 14  # the ledger answered for the first 9; nothing went downstream twice
    assert "## Applied revocations (14)" in task.artifact_text("report")


async def test_the_runtime_retry_loop_gets_past_the_simulated_error(
    iam_url: str, iam_calls: httpx.Client
) -> None:
    task = start(iam_url, systems=4, revocations=6, fail_after_revocations=2)
    await run(task)
    answer(task, approve(True))

    await run(task)

    assert task.state == COMPLETED
    assert [type(e) for e in task.errors] == [SimulatedNetworkError]
    assert len(revocation_calls(iam_calls, task)) == 6


async def test_a_crash_between_the_iam_call_and_the_ledger_write_reuses_the_key(
    iam_url: str, iam_calls: httpx.Client
) -> None:
    task = start(iam_url, systems=2, revocations=3)
    await run(task)
    answer(task, approve(True))
    task.crash_before_next_effect_record = True

    with pytest.raises(SimulatedCrashError):
        await run(task)
    await run(task)

    assert task.state == COMPLETED
    posts = revocation_calls(iam_calls, task)
    assert [c["applied"] for c in posts] == [True, False, True, True]  # the repeat applied nothing
    assert posts[0]["idempotency_key"] == posts[1]["idempotency_key"]
    assert len(revocations_applied(iam_calls)) == 3


async def test_an_unusable_answer_is_asked_again(iam_url: str, iam_calls: httpx.Client) -> None:
    task = start(iam_url, systems=2, revocations=2, approval_deadline_s=3600)
    await run(task)
    assert isinstance(task.pause, AskInput)
    assert task.pause.deadline == timedelta(hours=1)

    answer(task, user_message("sure, go ahead"))
    await run(task)

    assert task.state == INPUT_REQUIRED
    assert task.pause is not None
    assert task.pause.question.startswith("That answer was not understood")
    assert task.pause.deadline == timedelta(hours=1)
    assert revocation_calls(iam_calls, task) == []

    answer(task, approve(True))
    await run(task)

    assert task.state == COMPLETED
    assert len(revocation_calls(iam_calls, task)) == 2
    assert "## Applied revocations (2)" in task.artifact_text("report")


async def test_the_question_is_repeated_until_the_answer_is_usable(
    iam_url: str, iam_calls: httpx.Client
) -> None:
    task = start(iam_url, systems=2, revocations=2)
    await run(task)
    for unusable in (approve("yes"), user_message("still yes"), user_message("YES")):
        answer(task, unusable)
        await run(task)
        assert task.state == INPUT_REQUIRED
        assert revocation_calls(iam_calls, task) == []

    answer(task, approve(False))
    await run(task)

    assert task.state == COMPLETED
    assert revocation_calls(iam_calls, task) == []
    assert task.checkpoint.get("questions") == 4


async def test_nothing_to_revoke_needs_no_approval(iam_url: str) -> None:
    task = start(iam_url, systems=2, revocations=0)

    await run(task)

    assert task.state == COMPLETED
    assert "Nothing to revoke" in task.artifact_text("report")


@pytest.mark.parametrize(
    ("params", "complaint"),
    [
        ({"systems": 0}, "systems must be"),
        ({"systems": "40"}, "systems must be"),
        ({"revocations": -1}, "revocations must be"),
        ({"fetch_delay_ms": True}, "fetch_delay_ms must be"),
        ({"fail_after_revocations": 1.5}, "fail_after_revocations must be"),
        ({"approval_deadline_s": 0}, "approval_deadline_s must be"),
    ],
)
async def test_bad_parameters_are_rejected(params: dict[str, Any], complaint: str) -> None:
    task = start("http://iam.invalid", **params)

    await run(task)

    assert task.state == REJECTED
    assert task.status_message is not None
    assert complaint in task.status_message


async def test_without_an_iam_the_task_fails_clearly() -> None:
    task = start(None)

    await run(task)

    assert task.state == FAILED
    assert task.status_message == "access-review needs the IAM service: set LONGHAUL_IAM_URL"


def test_defaults_are_the_seeds() -> None:
    assert parse_plan({}) == {
        "systems": 40,
        "fetch_delay_ms": 0,
        "revocations": 14,
        "fail_after_revocations": None,
        "approval_deadline_s": None,
    }


def test_builtin_skills_register_together() -> None:
    registry = SkillRegistry(builtin_skills("http://iam.invalid"))

    assert [(s.name, s.version) for s in registry.all()] == [
        ("access-review", 1),
        ("conformance", 1),
        ("echo", 1),
        ("research", 1),
    ]
    steps = [step.__name__ for step in registry.get("access-review", 1).steps]
    assert steps == ["plan", "fetch_grants", "analyse", "ask_approval", "apply_revocations", "write_report"]
