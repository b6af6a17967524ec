"""Given events, when a command, then these events: one section per Task command."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

import pytest

from domain.errors import (
    DeadlineNotReachedError,
    EffectAlreadyRecordedError,
    InvalidCommandError,
    LeaseHeldError,
    LeaseLostError,
    NotPausedError,
    NotRunnableError,
    PauseDeadlinePassedError,
    StepOrderError,
    TaskTerminalError,
)
from domain.states import TaskState
from domain.task import Pause, Task
from tests.domain.support import (
    FIRST_MESSAGE,
    LATER,
    LEASE,
    PAUSE,
    T0,
    TASK_ID,
    answer,
    artifact,
    ask,
    at,
    cancel,
    complete,
    effect,
    expire,
    expire_pause,
    extend,
    fail,
    given,
    grant,
    progress,
    refused,
    reject,
    release,
    remove_push,
    save,
    set_push,
    step,
    submit,
    text_message,
    types,
    when,
)

# --------------------------------------------------------------------------------- submit


def test_submit_records_submitted_with_the_first_message() -> None:
    task = submit()

    events = list(task.collect_events())

    assert types(events) == ["Submitted"]
    assert isinstance(events[0], Task.Submitted)
    assert (events[0].tenant, events[0].skill, events[0].skill_version) == ("acme", "access-review", 1)
    assert task.id == TASK_ID
    assert task.version == 1
    assert task.state == TaskState.SUBMITTED
    assert task.history == [FIRST_MESSAGE]
    assert task.latest_input == FIRST_MESSAGE
    assert task.params == {"systems": ["github"]}
    assert (task.next_step, task.checkpoint, task.effects, task.artifacts) == (0, {}, {}, {})
    assert (task.lease_owner, task.lease_epoch, task.lease_until) == (None, 0, None)
    assert task.pause is None
    assert task.push_configs == {}
    assert not task.expired
    assert task.status_timestamp == T0
    assert task.is_claimable_at(T0)


@pytest.mark.parametrize(("skill", "version"), [("", 1), ("echo", 0), ("echo", -3)])
def test_submit_refuses_a_missing_skill_or_bad_version(skill: str, version: int) -> None:
    with pytest.raises(InvalidCommandError):
        submit(skill=skill, skill_version=version)


# ------------------------------------------------------------------------------ grant_lease


def test_grant_on_a_submitted_task_starts_work_at_epoch_one() -> None:
    task = given()

    epoch = task.grant_lease(worker="w1", now=LATER, until=LATER + LEASE)
    events: list[Any] = list(task.collect_events())

    assert epoch == 1
    assert types(events) == ["LeaseGranted"]
    assert isinstance(events[0], Task.LeaseGranted)
    assert (events[0].worker, events[0].epoch, events[0].until) == ("w1", 1, LATER + LEASE)
    assert task.state == TaskState.WORKING
    assert (task.lease_owner, task.lease_epoch, task.lease_until) == ("w1", 1, LATER + LEASE)
    assert task.lease_valid_at(LATER)
    assert not task.is_claimable_at(LATER)


def test_grant_while_a_valid_lease_is_held_is_refused() -> None:
    task = given(grant("w1"))  # at T0+1s, until T0+1s+LEASE

    refused(task, grant("w2"), LeaseHeldError)
    refused(task, grant("w1"), LeaseHeldError)
    refused(task, grant("w2"), LeaseHeldError, now=at(seconds=1) + LEASE - timedelta(microseconds=1))


def test_grant_after_the_lease_expired_fences_with_the_next_epoch() -> None:
    task = given(grant("w1"), step(0))  # the step at T0+2s extends the lease to T0+2s+LEASE
    expired_at = at(seconds=2) + LEASE

    events = when(task, grant("w2"), now=expired_at)

    assert types(events) == ["StepAttemptFailed", "LeaseGranted"], "w1 lost the lease mid-task"
    lost, granted = events
    assert isinstance(lost, Task.StepAttemptFailed)
    assert (lost.worker, lost.epoch, lost.step, lost.attempt, lost.cause) == ("w1", 1, 1, 1, "lease_lost")
    assert isinstance(granted, Task.LeaseGranted)
    assert (granted.worker, granted.epoch) == ("w2", 2)
    assert (task.state, task.lease_owner, task.lease_epoch) == (TaskState.WORKING, "w2", 2)
    assert task.next_step == 1, "the new holder resumes at the stored step"
    assert task.checkpoint == {"done": 0}
    assert task.failed_attempts == ["lease_lost"]


def test_grant_after_a_release_or_an_answer_increments_the_epoch() -> None:
    released = given(grant("w1"), release())
    answered = given(grant("w1"), ask(0), answer())

    assert types(when(released, grant("w2"))) == ["LeaseGranted"]
    assert types(when(answered, grant("w2"))) == ["LeaseGranted"]
    assert released.lease_epoch == answered.lease_epoch == 2


@pytest.mark.parametrize("auth", [False, True])
def test_grant_on_a_paused_task_is_refused(auth: bool) -> None:
    refused(given(grant(), ask(0, auth=auth)), grant("w2"), NotRunnableError)


def test_grant_that_ends_before_it_starts_is_refused() -> None:
    refused(given(), grant(lease=timedelta(0)), InvalidCommandError)
    refused(given(), grant(lease=timedelta(seconds=-1)), InvalidCommandError)


# ----------------------------------------------------------------------- extend / release


def test_extend_moves_the_lease_end() -> None:
    task = given(grant())

    events = when(task, extend(1, lease=timedelta(minutes=10)))

    assert types(events) == ["LeaseExtended"]
    assert (events[0].epoch, events[0].until) == (1, LATER + timedelta(minutes=10))
    assert task.lease_until == LATER + timedelta(minutes=10)
    assert (task.lease_owner, task.lease_epoch) == ("w1", 1)


def test_extend_refuses_a_stale_epoch_an_expired_lease_and_a_past_end() -> None:
    task = given(grant())

    refused(task, extend(2), LeaseLostError)
    refused(task, extend(0), LeaseLostError)
    refused(task, extend(1, lease=timedelta(0)), InvalidCommandError)
    refused(task, extend(1), LeaseLostError, now=at(seconds=1) + LEASE)


def test_release_clears_the_lease_and_keeps_the_task_runnable() -> None:
    task = given(grant(), step(0))

    events = when(task, release(1, "worker shutting down"))

    assert types(events) == ["LeaseReleased"]
    assert (events[0].epoch, events[0].reason) == (1, "worker shutting down")
    assert (task.lease_owner, task.lease_until, task.lease_epoch) == (None, None, 1)
    assert task.state == TaskState.WORKING
    assert task.next_step == 1
    assert task.is_claimable_at(LATER)


def test_release_twice_or_with_a_stale_epoch_is_refused() -> None:
    refused(given(grant(), release()), release(), LeaseLostError)
    refused(given(grant()), release(7), LeaseLostError)


# ---------------------------------------------------------------------------- complete_step


def test_complete_step_moves_the_checkpoint_and_step_and_extends_the_lease() -> None:
    task = given(grant())

    events = when(task, step(0, checkpoint={"plan": ["github", "okta"]}))

    assert types(events) == ["StepCompleted"]
    assert isinstance(events[0], Task.StepCompleted)
    assert (events[0].epoch, events[0].step, events[0].lease_until) == (1, 0, LATER + LEASE)
    assert events[0].checkpoint == {"plan": ["github", "okta"]}
    assert task.next_step == 1
    assert task.checkpoint == {"plan": ["github", "okta"]}
    assert task.lease_until == LATER + LEASE
    assert task.state == TaskState.WORKING


def test_steps_commit_in_order() -> None:
    task = given(grant(), step(0), step(1))

    assert types(when(task, step(2))) == ["StepCompleted"]
    assert task.next_step == 3


@pytest.mark.parametrize("index", [0, 1, 3, -1, 100])
def test_complete_step_out_of_order_or_twice_is_refused(index: int) -> None:
    task = given(grant(), step(0), step(1))  # next step is 2

    refused(task, step(index), StepOrderError)


@pytest.mark.parametrize(
    "lease_until",
    [LATER, LATER - timedelta(hours=1), datetime(2026, 1, 5, 10, 0)],  # the last one is naive
    ids=["now", "past", "naive"],
)
@pytest.mark.parametrize("sub_step", [False, True], ids=["complete_step", "save_checkpoint"])
def test_a_step_commit_refuses_a_lease_end_that_is_not_in_the_future(
    lease_until: datetime, sub_step: bool
) -> None:
    task = given(grant())

    def command(task: Task, now: datetime) -> None:
        commit = task.save_checkpoint if sub_step else task.complete_step
        commit(epoch=1, now=now, step=0, checkpoint={}, lease_until=lease_until)

    refused(task, command, InvalidCommandError)


# -------------------------------------------------------------------------- save_checkpoint


def test_save_checkpoint_moves_the_checkpoint_but_not_the_step() -> None:
    task = given(grant(), step(0))

    events = when(task, save(1, checkpoint={"fetched": ["github"]}))

    assert types(events) == ["CheckpointSaved"]
    assert (events[0].step, events[0].checkpoint) == (1, {"fetched": ["github"]})
    assert task.next_step == 1
    assert task.checkpoint == {"fetched": ["github"]}
    assert task.lease_until == LATER + LEASE


def test_save_checkpoint_for_another_step_is_refused() -> None:
    task = given(grant(), step(0))

    refused(task, save(0), StepOrderError)
    refused(task, save(2), StepOrderError)


# -------------------------------------------------------------------------- report_progress


def test_report_progress_sets_the_status_message() -> None:
    task = given(grant())

    events = when(task, progress("fetched 3 of 5 systems"))

    assert types(events) == ["ProgressReported"]
    assert task.status_message == text_message("fetched 3 of 5 systems")
    assert task.status_timestamp == LATER
    assert task.state == TaskState.WORKING


def test_report_progress_without_the_lease_is_refused() -> None:
    refused(given(), progress(epoch=0), LeaseLostError)
    refused(given(grant(), release()), progress(), LeaseLostError)


# ---------------------------------------------------------------------------- request_input


@pytest.mark.parametrize(
    ("auth", "event", "state"),
    [
        (False, "InputRequested", TaskState.INPUT_REQUIRED),
        (True, "AuthRequested", TaskState.AUTH_REQUIRED),
    ],
)
def test_request_input_pauses_and_releases_the_lease(auth: bool, event: str, state: TaskState) -> None:
    task = given(grant(), step(0))

    events = when(task, ask(1, on_deadline="cancel", auth=auth))

    assert types(events) == [event]
    paused = events[0]
    assert isinstance(paused, Task.InputRequested | Task.AuthRequested)
    assert (paused.epoch, paused.step, paused.deadline, paused.on_deadline) == (1, 1, LATER + PAUSE, "cancel")
    assert task.state == state
    assert (task.lease_owner, task.lease_until, task.lease_epoch) == (None, None, 1)
    assert task.next_step == 2, "the answer resumes at the step after the one that asked"
    assert task.checkpoint == {"asked": 1}
    assert task.pause == Pause(deadline=LATER + PAUSE, on_deadline="cancel")
    assert task.status_message == text_message("approve?", "q-1")
    assert task.history[-1] == text_message("approve?", "q-1")
    assert not task.is_claimable_at(LATER)


@pytest.mark.parametrize("deadline", [LATER, LATER - timedelta(seconds=1), T0 - timedelta(days=30)])
def test_request_input_with_a_deadline_not_in_the_future_is_refused(deadline: datetime) -> None:
    refused(given(grant()), ask(0, deadline=deadline), InvalidCommandError)


@pytest.mark.parametrize("on_deadline", ["", "FAIL", "ignore", "wait"])
def test_request_input_with_an_unknown_deadline_action_is_refused(on_deadline: str) -> None:
    refused(given(grant()), ask(0, on_deadline=on_deadline), InvalidCommandError)


def test_request_input_for_a_step_out_of_order_is_refused() -> None:
    refused(given(grant(), step(0)), ask(0), StepOrderError)
    refused(given(grant(), step(0)), ask(2), StepOrderError)


# ---------------------------------------------------------------------------- receive_input


@pytest.mark.parametrize("auth", [False, True])
def test_receive_input_before_the_deadline_makes_the_task_runnable_at_the_next_step(auth: bool) -> None:
    task = given(grant(), step(0), ask(1, auth=auth))  # asked at T0+3s
    just_before = at(seconds=3) + PAUSE - timedelta(microseconds=1)

    events = when(task, answer("approved"), now=just_before)

    assert types(events) == ["InputReceived"]
    assert events[0].message == text_message("approved", "m-2", "ROLE_USER")
    assert task.state == TaskState.WORKING
    assert task.next_step == 2
    assert (task.lease_owner, task.lease_until) == (None, None)
    assert task.pause is None
    assert task.latest_input == text_message("approved", "m-2", "ROLE_USER")
    assert task.history == [FIRST_MESSAGE, text_message("approve?", "q-1"), task.latest_input]
    assert task.status_message is None
    assert task.is_claimable_at(just_before)


def test_an_answer_to_a_repeated_question_resumes_the_step_that_asked() -> None:
    task = given(grant(), step(0), ask(1, repeat=True))

    events = when(task, answer("still unclear"), now=at(seconds=4))

    assert types(events) == ["InputReceived"]
    assert task.next_step == 1  # the same step runs again, with the answer as latest_input
    assert task.state == TaskState.WORKING


@pytest.mark.parametrize("late", [timedelta(0), timedelta(seconds=1), timedelta(days=9)])
def test_receive_input_at_or_after_the_deadline_is_refused(late: timedelta) -> None:
    task = given(grant(), ask(0))  # asked at T0+2s

    refused(task, answer(), PauseDeadlinePassedError, now=at(seconds=2) + PAUSE + late)


def test_receive_input_when_not_paused_is_refused() -> None:
    refused(given(), answer(), NotPausedError)
    refused(given(grant()), answer(), NotPausedError)
    refused(given(grant(), ask(0), answer()), answer(), NotPausedError)


# ----------------------------------------------------------------------------- expire_pause


@pytest.mark.parametrize(
    ("on_deadline", "event", "state"),
    [("fail", "Failed", TaskState.FAILED), ("cancel", "Canceled", TaskState.CANCELED)],
)
@pytest.mark.parametrize("late", [timedelta(0), timedelta(days=3)])
def test_expire_pause_after_the_deadline_ends_the_task_as_the_pause_said(
    on_deadline: str, event: str, state: TaskState, late: timedelta
) -> None:
    task = given(grant(), ask(0, on_deadline=on_deadline, auth=on_deadline == "cancel"))
    deadline = at(seconds=2) + PAUSE

    events = when(task, expire_pause("nobody approved in time"), now=deadline + late)

    assert types(events) == [event]
    assert deadline.isoformat() in events[0].reason
    assert getattr(events[0], "epoch", None) is None, "the sweeper holds no lease"
    assert task.state == state
    assert task.status_message == text_message("nobody approved in time")
    assert task.status_timestamp == deadline + late
    assert task.pause is None
    assert task.is_terminal


def test_expire_pause_before_the_deadline_is_refused() -> None:
    task = given(grant(), ask(0))

    just_before = at(seconds=2) + PAUSE - timedelta(microseconds=1)

    refused(task, expire_pause(), DeadlineNotReachedError, now=just_before)


def test_expire_pause_when_not_paused_is_refused() -> None:
    refused(given(grant()), expire_pause(), NotPausedError, now=at(days=30))
    refused(given(grant(), ask(0), answer()), expire_pause(), NotPausedError, now=at(days=30))


# ---------------------------------------------------------------------------- append_artifact


def test_append_artifact_adds_a_new_artifact() -> None:
    task = given(grant())

    events = when(task, artifact("report", "# Report"))

    assert types(events) == ["ArtifactChunkAppended"]
    assert (events[0].append, events[0].last_chunk) == (False, True)
    assert task.artifacts == {"report": {"artifactId": "report", "parts": [{"text": "# Report"}]}}


def test_appended_chunks_merge_their_parts_in_order() -> None:
    task = given(
        grant(),
        artifact("report", "one", last_chunk=False),
        artifact("other", "x"),
        artifact("report", "two", append=True, last_chunk=False),
    )

    events = when(task, artifact("report", "three", "four", append=True, last_chunk=True))

    assert types(events) == ["ArtifactChunkAppended"]
    assert [p["text"] for p in task.artifacts["report"]["parts"]] == ["one", "two", "three", "four"]
    assert task.artifacts["other"]["parts"] == [{"text": "x"}]
    assert list(task.artifacts) == ["report", "other"]


def test_a_chunk_without_append_replaces_the_artifact() -> None:
    task = given(grant(), artifact("report", "old"))

    when(task, artifact("report", "new"))

    assert task.artifacts["report"]["parts"] == [{"text": "new"}]


@pytest.mark.parametrize(
    "body",
    [
        {},
        {"parts": [{"text": "x"}]},
        {"artifactId": "", "parts": [{"text": "x"}]},
        {"artifactId": "a"},
        {"artifactId": "a", "parts": []},
    ],
)
def test_an_artifact_without_id_or_parts_is_refused(body: dict[str, object]) -> None:
    def command(task: Task, now: datetime) -> None:
        task.append_artifact(epoch=1, now=now, artifact=body)

    refused(given(grant()), command, InvalidCommandError)


# ------------------------------------------------------------------------------ record_effect


def test_record_effect_keeps_the_result_under_its_key() -> None:
    task = given(grant())

    events = when(task, effect("revoke:github:alice", {"status": 204, "id": "r-1"}))

    assert types(events) == ["EffectRecorded"]
    assert (events[0].epoch, events[0].key) == (1, "revoke:github:alice")
    assert task.effects == {"revoke:github:alice": {"status": 204, "id": "r-1"}}


def test_recording_an_effect_twice_is_refused_even_by_a_later_holder() -> None:
    task = given(grant(lease=timedelta(seconds=2)), effect("revoke:1"), grant("w2"))  # epoch 2 at T0+3s

    refused(task, effect("revoke:1", epoch=2), EffectAlreadyRecordedError)
    refused(task, effect("revoke:1", {"other": True}, epoch=2), EffectAlreadyRecordedError)
    assert types(when(task, effect("revoke:2", epoch=2))) == ["EffectRecorded"]


# --------------------------------------------------------------------- complete / fail / reject


def test_complete_ends_the_task_and_clears_the_lease() -> None:
    task = given(grant(), step(0), artifact("report", "ok"))

    events = when(task, complete())

    assert types(events) == ["Completed"]
    assert events[0].epoch == 1
    assert task.state == TaskState.COMPLETED
    assert task.status_message == text_message("done")
    assert task.status_timestamp == LATER
    assert (task.lease_owner, task.lease_until) == (None, None)
    assert task.artifacts["report"]["parts"] == [{"text": "ok"}]


def test_fail_ends_the_task_with_the_reason() -> None:
    task = given(grant())

    events = when(task, fail(reason="step 0 failed 3 times"))

    assert types(events) == ["Failed"]
    assert (events[0].epoch, events[0].reason) == (1, "step 0 failed 3 times")
    assert task.state == TaskState.FAILED
    assert task.status_message == text_message("step 0 failed 3 times")
    assert task.lease_owner is None


def test_reject_ends_the_task_as_rejected() -> None:
    task = given(grant())

    events = when(task, reject(reason="unknown system"))

    assert types(events) == ["Rejected"]
    assert (events[0].epoch, events[0].reason) == (1, "unknown system")
    assert task.state == TaskState.REJECTED
    assert task.lease_owner is None


@pytest.mark.parametrize("finish", [complete, fail, reject], ids=["complete", "fail", "reject"])
def test_finishing_with_a_stale_epoch_is_refused(finish: object) -> None:
    assert callable(finish)
    task = given(grant(lease=timedelta(seconds=1)), grant("w2"))  # epoch 2 holds

    refused(task, finish(epoch=1), LeaseLostError)
    assert task.state == TaskState.WORKING


# ------------------------------------------------------------------------------------ cancel


@pytest.mark.parametrize(
    "history",
    [
        (),
        (grant(),),
        (grant(), step(0)),
        (grant(), ask(0)),
        (grant(), ask(0, auth=True)),
        (grant(), release()),
    ],
    ids=["submitted", "working", "mid-run", "input-required", "auth-required", "released"],
)
def test_cancel_ends_any_live_task(history: tuple[object, ...]) -> None:
    task = given(*history)  # type: ignore[arg-type]

    events = when(task, cancel("client canceled"))

    assert types(events) == ["Canceled"]
    assert events[0].reason == "client canceled"
    assert task.state == TaskState.CANCELED
    assert task.status_message == text_message("client canceled")
    assert (task.lease_owner, task.lease_until, task.pause) == (None, None, None)


def test_cancel_twice_is_refused() -> None:
    refused(given(grant(), cancel()), cancel(), TaskTerminalError)


# ------------------------------------------------------------------------------ push configs


def test_set_push_config_registers_and_replaces_by_id() -> None:
    task = given(set_push("p-1", "https://a.example/hook"))

    events = when(task, set_push("p-1", "https://b.example/hook"))

    assert types(events) == ["PushConfigSet"]
    assert task.push_configs == {"p-1": {"id": "p-1", "url": "https://b.example/hook"}}
    assert task.state == TaskState.SUBMITTED


def test_push_configs_can_be_set_and_removed_while_working_or_paused() -> None:
    task = given(grant(), set_push("p-1"), ask(0), set_push("p-2"))

    events = when(task, remove_push("p-1"))

    assert types(events) == ["PushConfigRemoved"]
    assert list(task.push_configs) == ["p-2"]
    assert task.state == TaskState.INPUT_REQUIRED


def test_removing_an_absent_push_config_records_nothing() -> None:
    task = given(set_push("p-1"))
    version = task.version

    assert when(task, remove_push("nope")) == []
    assert task.version == version
    assert list(task.push_configs) == ["p-1"]


@pytest.mark.parametrize(
    "config", [{}, {"id": "p"}, {"url": "https://x"}, {"id": "", "url": "https://x"}, {"id": "p", "url": ""}]
)
def test_a_push_config_without_id_or_url_is_refused(config: dict[str, object]) -> None:
    def command(task: Task, now: datetime) -> None:
        task.set_push_config(now=now, config=config)

    refused(given(), command, InvalidCommandError)


# ------------------------------------------------------------------------------------ expire


@pytest.mark.parametrize(
    "history",
    [(grant(), complete()), (grant(), fail()), (grant(), reject()), (cancel(),)],
    ids=["completed", "failed", "rejected", "canceled"],
)
def test_expire_marks_a_terminal_task_once(history: tuple[object, ...]) -> None:
    task = given(*history)  # type: ignore[arg-type]
    state = task.state

    events = when(task, expire("retention of 30 days passed"), now=at(days=31))

    assert types(events) == ["Expired"]
    assert events[0].reason == "retention of 30 days passed"
    assert task.expired
    assert task.state == state
    refused(task, expire(), InvalidCommandError, now=at(days=32))


@pytest.mark.parametrize(
    "history", [(), (grant(),), (grant(), ask(0))], ids=["submitted", "working", "paused"]
)
def test_expire_of_a_live_task_is_refused(history: tuple[object, ...]) -> None:
    refused(given(*history), expire(), InvalidCommandError, now=at(days=400))  # type: ignore[arg-type]


# ------------------------------------------------------------------------- a whole life


def test_a_task_runs_pauses_resumes_and_completes() -> None:
    task = submit()
    task.grant_lease(worker="w1", now=at(seconds=1), until=at(seconds=1) + LEASE)
    task.complete_step(epoch=1, now=at(seconds=2), step=0, checkpoint={"plan": 1}, lease_until=at(minutes=5))
    task.record_effect(epoch=1, now=at(seconds=3), key="fetch:github", result=["alice"])
    task.request_input(
        epoch=1,
        now=at(seconds=4),
        step=1,
        checkpoint={"plan": 1},
        question=text_message("ok?"),
        deadline=at(days=3),
    )
    task.receive_input(now=at(days=2), message=text_message("yes", role="ROLE_USER"))
    assert task.grant_lease(worker="w2", now=at(days=2, seconds=1), until=at(days=2, minutes=5)) == 2
    report = {"artifactId": "r", "parts": [{"text": "x"}]}
    task.append_artifact(epoch=2, now=at(days=2, seconds=2), artifact=report)
    task.complete_step(epoch=2, now=at(days=2, seconds=3), step=2, checkpoint={}, lease_until=at(days=3))
    task.complete(epoch=2, now=at(days=2, seconds=4), message=None)

    assert types(list(task.collect_events())) == [
        "Submitted",
        "LeaseGranted",
        "StepCompleted",
        "EffectRecorded",
        "InputRequested",
        "InputReceived",
        "LeaseGranted",
        "ArtifactChunkAppended",
        "StepCompleted",
        "Completed",
    ]
    assert task.version == 10
    assert task.state == TaskState.COMPLETED
    assert task.effects == {"fetch:github": ["alice"]}
