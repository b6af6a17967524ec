"""access-review against a real fake IAM over HTTP, on the real runtime in memory (``SkillKit``)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from datetime import datetime, timedelta
from typing import Any
from uuid import UUID

import httpx
import pytest

from domain.skill import SkillRegistry, step_name
from domain.states import TaskState
from domain.task import Pause, Task
from longhaul.testing import SkillKit, artifact_text, message_text
from workers.skills import builtin_skills
from workers.skills.access_review import (
    SIMULATED_ERROR_KEY,
    SimulatedNetworkError,
    access_review_skill,
    parse_plan,
)

APPLY_STEP = 4
STEP_DONE = ["StepCompleted"]
REPORT = ["ArtifactChunkAppended", "StepCompleted", "Completed"]
"""The last commit: ``write_report``'s artifact, its step and the task's end, together."""
REVOKED = [["EffectStarted"], ["EffectRecorded"]]
"""The two commits of one revocation (a checked effect): its start before the call, its result after."""


@pytest.fixture
def kit(iam_url: str) -> Iterator[SkillKit]:
    with SkillKit(access_review_skill(iam_url)) as kit:
        yield kit


def start(kit: SkillKit, **params: Any) -> UUID:
    return kit.submit("access-review", text="Quarterly access review", data=params)


def calls(client: httpx.Client, task_id: UUID) -> list[dict[str, Any]]:
    result: list[dict[str, Any]] = client.get("/calls", params={"task_id": str(task_id)}).json()
    return result


def everything(client: httpx.Client) -> list[dict[str, Any]]:
    result: list[dict[str, Any]] = client.get("/calls").json()
    return result


def revocations_applied(client: httpx.Client) -> list[dict[str, Any]]:
    result: list[dict[str, Any]] = client.get("/revocations").json()
    return result


def revocation_calls(client: httpx.Client, task_id: UUID) -> list[dict[str, Any]]:
    return [c for c in calls(client, task_id) if c["method"] == "POST"]


def revocation_checks(client: httpx.Client, task_id: UUID) -> list[str]:
    """The idempotency keys the task asked the IAM about (``GET /revocations/{key}``), in order."""
    return [
        c["idempotency_key"]
        for c in calls(client, task_id)
        if c["method"] == "GET" and c["path"].startswith("/revocations/")
    ]


def as_recorded(revocation: dict[str, Any]) -> dict[str, Any]:
    """What the skill records of one of the IAM's revocations (its effect's result)."""
    fields = ("system", "grant_id", "user", "revocation_id", "status")
    return {name: revocation[name] for name in fields}


def approve(kit: SkillKit, task_id: UUID, value: object) -> None:
    kit.answer(task_id, data={"approve": value})


def question(task: Task) -> str:
    """The question the paused task asks (its status message)."""
    assert task.state == TaskState.INPUT_REQUIRED
    text = message_text(task.status_message)
    assert text is not None
    return text


def asked_at(kit: SkillKit, task_id: UUID) -> datetime:
    """When the task asked its latest question (a pause's deadline counts from there)."""
    return kit.events(task_id, Task.InputRequested)[-1].timestamp


async def approved(kit: SkillKit, **params: Any) -> tuple[UUID, list[str]]:
    """A task run up to the approval question and approved: its id and the proposed grant ids."""
    task_id = start(kit, **params)
    task = await kit.run(task_id)
    assert task.state == TaskState.INPUT_REQUIRED
    approve(kit, task_id, True)
    return task_id, [p["grant_id"] for p in task.checkpoint["proposed"]]


async def test_approved_review_applies_every_proposed_revocation_once(
    kit: SkillKit, iam_calls: httpx.Client
) -> None:
    task_id = start(kit)  # the seed's defaults: 40 systems, 14 revocations

    task = await kit.run(task_id)

    assert task.state == TaskState.INPUT_REQUIRED
    assert task.next_step == APPLY_STEP
    proposed = task.checkpoint["proposed"]
    assert len(proposed) == 14
    assert isinstance(task.pause, Pause)
    assert task.pause.deadline - asked_at(kit, task_id) == kit.policy.max_pause  # none named: the maximum
    assert all(p["grant_id"] in question(task) for p in proposed)
    assert '{"approve": true}' in question(task)

    approve(kit, task_id, True)
    task = await kit.run(task_id)

    assert task.state == TaskState.COMPLETED
    assert (
        message_text(task.status_message) == "Access review complete: 14 of 14 proposed revocations applied."
    )
    posts = revocation_calls(iam_calls, task_id)
    keys = [f"{task_id}:revoke:{p['grant_id']}" for p in proposed]
    assert [c["idempotency_key"] for c in posts] == keys
    assert all(c["applied"] for c in posts)
    report = task.artifacts["report"]
    assert report["name"] == "access-review.md"
    assert report["parts"][0]["mediaType"] == "text/markdown"
    text = artifact_text(task, "report")
    assert "40 of 40 systems reviewed; 200 grants read." in text
    assert "## Proposed revocations (14)" in text
    assert "## Applied revocations (14)" in text
    assert all(p["grant_id"] in text for p in proposed)


async def test_every_iam_request_names_the_task(kit: SkillKit, iam_calls: httpx.Client) -> None:
    task_id, _ = await approved(kit, systems=3, revocations=2)
    await kit.run(task_id)

    received = everything(iam_calls)
    assert len(received) == 3 + 2
    assert {c["task_id"] for c in received} == {str(task_id)}


async def test_declined_review_applies_nothing_and_says_so(kit: SkillKit, iam_calls: httpx.Client) -> None:
    task_id = start(kit, systems=5, revocations=3)
    await kit.run(task_id)

    approve(kit, task_id, False)
    task = await kit.run(task_id)

    assert task.state == TaskState.COMPLETED
    assert revocation_calls(iam_calls, task_id) == []
    assert task.checkpoint.get("applied") is None or task.checkpoint["applied"] == []
    text = artifact_text(task, "report")
    assert "declined the proposed revocations: none were applied" in text
    assert (
        message_text(task.status_message)
        == "Access review complete: the owners declined all 3 proposed revocations."
    )


async def test_fetch_grants_commits_once_per_system(kit: SkillKit, iam_calls: httpx.Client) -> None:
    task_id = start(kit, systems=6, revocations=1)

    await kit.run(task_id)  # plan, fetch_grants, analyse, then the approval question

    # plan; one checkpoint (with its progress message) per system but the last; fetch_grants;
    # analyse; the question
    assert kit.commits(task_id) == [
        STEP_DONE,
        *[["CheckpointSaved", "ProgressReported"]] * 5,
        STEP_DONE,
        STEP_DONE,
        ["InputRequested"],
    ]
    checkpoints = [e.checkpoint for e in kit.events(task_id, Task.CheckpointSaved)]
    assert [c["fetched"] for c in checkpoints] == [[1], [1, 2], [1, 2, 3], [1, 2, 3, 4], [1, 2, 3, 4, 5]]
    progress = [message_text(e.message) for e in kit.events(task_id, Task.ProgressReported)]
    assert progress == [f"Fetched the grants of {n} of 6 systems." for n in range(1, 6)]
    fetched = kit.events(task_id, Task.StepCompleted)[1]  # system 6 travels in the step's own commit
    assert fetched.step == 1
    assert fetched.checkpoint["fetched"] == [1, 2, 3, 4, 5, 6]
    assert len(fetched.checkpoint["grants"]) == 30
    assert [c["path"] for c in calls(iam_calls, task_id)] == [f"/systems/{n}/grants" for n in range(1, 7)]


async def test_a_crash_mid_fetch_resumes_at_the_first_unfinished_system(
    kit: SkillKit, iam_calls: httpx.Client
) -> None:
    task_id = start(kit, systems=40)

    # commit 1 is plan's; commits 2 to 23 are systems 1 to 22: it dies right after system 22
    task = await kit.run(task_id, crash_after_commit=23)

    assert task.state == TaskState.WORKING
    assert task.checkpoint["fetched"] == list(range(1, 23))

    task = await kit.run(task_id)  # another worker takes over from the checkpoint

    assert task.state == TaskState.INPUT_REQUIRED
    assert [e.worker for e in kit.events(task_id, Task.LeaseGranted)] == ["kit-worker-1", "kit-worker-2"]
    fetched = Counter(c["path"] for c in calls(iam_calls, task_id))
    assert fetched == Counter(f"/systems/{n}/grants" for n in range(1, 41))  # each system exactly once


async def test_network_error_after_9_of_14_retries_only_the_other_5(
    kit: SkillKit, iam_calls: httpx.Client
) -> None:
    task_id, proposed = await approved(kit, revocations=14, fail_after_revocations=9, systems=40)
    before = len(kit.commits(task_id))

    task = await kit.run(task_id)  # apply_revocations fails once; the runtime retries it

    assert task.state == TaskState.COMPLETED
    (error,) = kit.step_errors(task_id)  # the retry itself did not fail again
    assert isinstance(error, SimulatedNetworkError)
    assert "after 9 revocations" in str(error)
    # The first attempt recorded 9 revocations and the failure (so it happens once), and did not
    # finish the step; the retry (same step, same checkpoint) got those 9 from the ledger.
    effects = [e.key for e in kit.events(task_id, Task.EffectRecorded)]
    revoke = [f"revoke:{g}" for g in proposed]
    assert effects == [*revoke[:9], SIMULATED_ERROR_KEY, *revoke[9:]]
    # The failed attempt is a commit of its own, between the first attempt's effects and the retry's.
    # Each revocation is a checked effect: its start is committed before the call, its result after.
    first_attempt = [*REVOKED * 9, ["EffectRecorded"]]  # the 9 revocations, then the simulated error
    failed = ["StepAttemptFailed"]
    assert kit.commits(task_id)[before:] == [*first_attempt, failed, *REVOKED * 5, STEP_DONE, REPORT]
    (attempt,) = kit.events(task_id, Task.StepAttemptFailed)
    assert (attempt.step, attempt.attempt, attempt.cause) == (APPLY_STEP, 1, "error")
    assert attempt.detail.startswith("SimulatedNetworkError: simulated network error after 9 revocations")
    assert [e.step for e in kit.events(task_id, Task.StepCompleted)] == [0, 1, 2, APPLY_STEP, 5]  # 3 asked
    posts = revocation_calls(iam_calls, task_id)
    keys = [f"{task_id}:{r}" for r in revoke]
    assert [c["idempotency_key"] for c in posts[:9]] == keys[:9]
    assert [c["idempotency_key"] for c in posts[9:]] == keys[9:]
    applied_per_key = Counter(c["idempotency_key"] for c in posts if c["applied"])
    assert len(applied_per_key) == 14
    assert set(applied_per_key.values()) == {1}
    assert len(posts) == 14  # the ledger answered for the first 9; nothing went downstream twice
    assert "## Applied revocations (14)" in artifact_text(task, "report")


async def test_the_runtime_retry_loop_gets_past_the_simulated_error(
    kit: SkillKit, iam_calls: httpx.Client
) -> None:
    task_id, _ = await approved(kit, systems=4, revocations=6, fail_after_revocations=2)

    task = await kit.run(task_id)

    assert task.state == TaskState.COMPLETED
    assert [type(e) for e in kit.step_errors(task_id)] == [SimulatedNetworkError]
    assert len(revocation_calls(iam_calls, task_id)) == 6


async def test_a_crash_between_the_iam_call_and_the_record_asks_the_iam_instead_of_posting_again(
    kit: SkillKit, iam_calls: httpx.Client
) -> None:
    task_id, proposed = await approved(kit, systems=2, revocations=3)
    first = f"revoke:{proposed[0]}"

    # commit 1 is the first revocation's EffectStarted; the revocation then reaches the IAM, and the
    # worker dies instead of saving commit 2, its EffectRecorded
    task = await kit.run(task_id, crash_before_commit=2)
    assert task.state == TaskState.WORKING
    assert kit.effects(task_id) == {}
    assert task.effects_started == [first]
    assert kit.commits(task_id)[-1] == ["EffectStarted"]
    assert len(revocation_calls(iam_calls, task_id)) == 1
    before = len(kit.commits(task_id))

    task = await kit.run(task_id)

    assert task.state == TaskState.COMPLETED
    assert revocation_checks(iam_calls, task_id) == [f"{task_id}:{first}"]  # that key, and only it
    posts = revocation_calls(iam_calls, task_id)
    keys = [f"{task_id}:revoke:{g}" for g in proposed]
    assert [c["idempotency_key"] for c in posts] == keys  # each revocation posted exactly once
    assert all(c["applied"] for c in posts)
    iam = revocations_applied(iam_calls)
    assert [r["idempotency_key"] for r in iam] == keys
    assert kit.effects(task_id)[first] == as_recorded(iam[0])  # recorded: what the IAM answered
    assert [kit.effects(task_id)[f"revoke:{g}"] for g in proposed] == [as_recorded(r) for r in iam]
    # the checked revocation is recorded without starting again; the other two start, then record
    assert kit.commits(task_id)[before:] == [["EffectRecorded"], *REVOKED * 2, STEP_DONE, REPORT]
    assert [e.key for e in kit.events(task_id, Task.EffectStarted)] == [f"revoke:{g}" for g in proposed]
    assert "## Applied revocations (3)" in artifact_text(task, "report")


async def test_a_crash_before_the_iam_call_finds_nothing_and_revokes_once(
    kit: SkillKit, iam_calls: httpx.Client
) -> None:
    task_id, proposed = await approved(kit, systems=2, revocations=3)
    first = f"revoke:{proposed[0]}"

    # the first revocation's EffectStarted is saved, and the worker dies before calling the IAM
    task = await kit.run(task_id, crash_after_commit=1)
    assert task.state == TaskState.WORKING
    assert task.effects_started == [first]
    assert kit.commits(task_id)[-1] == ["EffectStarted"]
    assert revocation_calls(iam_calls, task_id) == []
    assert revocation_checks(iam_calls, task_id) == []
    before = len(kit.commits(task_id))

    task = await kit.run(task_id)

    assert task.state == TaskState.COMPLETED
    key = f"{task_id}:{first}"
    assert revocation_checks(iam_calls, task_id) == [key]  # the IAM answered 404
    asked = [(c["method"], c["idempotency_key"]) for c in calls(iam_calls, task_id)]
    assert asked[asked.index(("GET", key)) + 1] == ("POST", key)  # then fn was called
    posts = revocation_calls(iam_calls, task_id)
    keys = [f"{task_id}:revoke:{g}" for g in proposed]
    assert [c["idempotency_key"] for c in posts] == keys  # fn called once for each, the first included
    assert all(c["applied"] for c in posts)
    iam = revocations_applied(iam_calls)
    assert [kit.effects(task_id)[f"revoke:{g}"] for g in proposed] == [as_recorded(r) for r in iam]
    assert kit.commits(task_id)[before:] == [["EffectRecorded"], *REVOKED * 2, STEP_DONE, REPORT]


async def test_an_unusable_answer_is_asked_again(kit: SkillKit, iam_calls: httpx.Client) -> None:
    task_id = start(kit, systems=2, revocations=2, approval_deadline_s=3600)
    task = await kit.run(task_id)
    assert isinstance(task.pause, Pause)
    assert task.pause.deadline - asked_at(kit, task_id) == timedelta(hours=1)

    kit.advance(minutes=20)
    kit.answer(task_id, text="sure, go ahead")
    task = await kit.run(task_id)

    assert task.state == TaskState.INPUT_REQUIRED
    assert task.pause is not None
    assert question(task).startswith("That answer was not understood")
    assert asked_at(kit, task_id) == kit.clock.now  # asked again now, with a new hour to answer
    assert task.pause.deadline - asked_at(kit, task_id) == timedelta(hours=1)
    assert task.next_step == APPLY_STEP  # the next answer resumes the step that asked again
    assert revocation_calls(iam_calls, task_id) == []

    approve(kit, task_id, True)
    task = await kit.run(task_id)

    assert task.state == TaskState.COMPLETED
    assert len(revocation_calls(iam_calls, task_id)) == 2
    assert "## Applied revocations (2)" in artifact_text(task, "report")


async def test_the_question_is_repeated_until_the_answer_is_usable(
    kit: SkillKit, iam_calls: httpx.Client
) -> None:
    task_id = start(kit, systems=2, revocations=2)
    await kit.run(task_id)
    for unusable in ({"data": {"approve": "yes"}}, {"text": "still yes"}, {"text": "YES"}):
        kit.answer(task_id, **unusable)
        task = await kit.run(task_id)
        assert task.state == TaskState.INPUT_REQUIRED
        assert revocation_calls(iam_calls, task_id) == []

    approve(kit, task_id, False)
    task = await kit.run(task_id)

    assert task.state == TaskState.COMPLETED
    assert revocation_calls(iam_calls, task_id) == []
    assert task.checkpoint.get("questions") == 4


async def test_nothing_to_revoke_needs_no_approval(kit: SkillKit) -> None:
    task_id = start(kit, systems=2, revocations=0)

    task = await kit.run(task_id)

    assert task.state == TaskState.COMPLETED
    assert kit.events(task_id, Task.InputRequested) == []
    assert "Nothing to revoke" in artifact_text(task, "report")


@pytest.mark.parametrize(
    ("params", "complaint"),
    [
        ({"systems": 0}, "systems must be"),
        ({"systems": "forty"}, "systems must be"),
        ({"systems": 40.5}, "systems must be"),
        ({"revocations": -1}, "revocations must be"),
        ({"fetch_delay_ms": True}, "fetch_delay_ms must be"),
        ({"fail_after_revocations": 1.5}, "fail_after_revocations must be"),
        ({"approval_deadline_s": 0}, "approval_deadline_s must be"),
    ],
)
async def test_bad_parameters_are_rejected(params: dict[str, Any], complaint: str) -> None:
    with SkillKit(access_review_skill("http://iam.invalid")) as kit:
        task = await kit.run(start(kit, **params))

    assert task.state == TaskState.REJECTED
    reason = message_text(task.status_message)
    assert reason is not None
    assert complaint in reason


async def test_without_an_iam_the_task_fails_clearly() -> None:
    with SkillKit(access_review_skill(None)) as kit:
        task = await kit.run(start(kit))

    assert task.state == TaskState.FAILED
    assert message_text(task.status_message) == "access-review needs the IAM service: set LONGHAUL_IAM_URL"


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
        ("big-file", 1),
        ("checksum", 1),
        ("conformance", 1),
        ("conformance", 2),
        ("echo", 1),
        ("research", 1),
        ("research", 2),
    ]
    steps = [step_name(step) for step in registry.get("access-review", 1).steps]
    assert steps == ["plan", "fetch_grants", "analyse", "ask_approval", "apply_revocations", "write_report"]
