"""research: the API-key question, then a chunked report, one commit per chunk, resumable."""

from __future__ import annotations

import json
from typing import Any

import pytest

from domain.skill import AskInput
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
    user_message,
)
from workers.skills.research import QUESTION, RESEARCH, mask

API_KEY = "sk-live-0123456789abcdef"


def start(**params: Any) -> HarnessTask:
    return new_task(RESEARCH, user_message("Analyze ACME pricing", data=params or None), params)


async def test_asks_for_the_key_then_streams_the_report_in_chunks() -> None:
    task = start()

    await run(task)

    assert task.state == INPUT_REQUIRED
    assert isinstance(task.pause, AskInput)
    assert task.pause.question == QUESTION

    answer(task, user_message(data={"api_key": API_KEY}))
    await run(task)

    assert task.state == COMPLETED
    assert [(e.append, e.last_chunk) for e in task.emitted] == [
        (False, False),
        (True, False),
        (True, False),
        (True, False),
        (True, True),
    ]
    assert all(e.artifact["artifactId"] == "report" for e in task.emitted)
    kinds = [kind for kind, _ in task.commits]
    assert kinds == ["step"] + ["artifact"] * 5 + [
        "step"
    ]  # the question, 5 chunks (each with its count), the end
    report = task.artifact_text("report")
    assert report.startswith("# Research report: Analyze ACME pricing")
    assert "## Finding 5" in report
    assert report.endswith("End of report.\n")
    assert task.artifacts["report"]["parts"][0]["mediaType"] == "text/markdown"


async def test_the_key_never_appears_in_clear() -> None:
    task = start(chunks=3)
    await run(task)
    answer(task, user_message(data={"api_key": API_KEY}))

    await run(task)

    assert task.state == COMPLETED
    assert "****cdef" in task.artifact_text("report")
    durable = json.dumps([task.artifacts, task.checkpoint, task.commits, task.effects], default=str)
    assert API_KEY not in durable
    assert API_KEY[:-4] not in durable


async def test_a_crash_resumes_after_the_last_committed_chunk() -> None:
    task = start(chunks=5)
    await run(task)
    answer(task, user_message(data={"api_key": API_KEY}))
    task.crash_after_commits = 3  # chunk 3 and its count committed together

    with pytest.raises(SimulatedCrashError):
        await run(task)
    assert task.checkpoint["emitted"] == 3

    await run(task)

    assert task.state == COMPLETED
    assert len(task.emitted) == 5  # nothing emitted twice
    assert [e.last_chunk for e in task.emitted] == [False, False, False, False, True]
    assert [f"## Finding {n}" in task.artifact_text("report") for n in range(1, 6)] == [True] * 5


@pytest.mark.parametrize("crash_after", [1, 2, 3, 4])
async def test_no_crash_point_sends_a_chunk_twice(crash_after: int) -> None:
    task = start(chunks=5)
    await run(task)
    answer(task, user_message(data={"api_key": API_KEY}))
    task.crash_after_commits = crash_after

    with pytest.raises(SimulatedCrashError):
        await run(task)
    await run(task)

    assert task.state == COMPLETED
    assert [e.last_chunk for e in task.emitted] == [False, False, False, False, True]


async def test_one_chunk_is_first_and_last() -> None:
    task = start(chunks=1)
    await run(task)
    answer(task, user_message(data={"api_key": API_KEY}))

    await run(task)

    assert [(e.append, e.last_chunk) for e in task.emitted] == [(False, True)]
    assert task.artifact_text("report").endswith("End of report.\n")


async def test_an_answer_without_a_key_fails_clearly() -> None:
    task = start()
    await run(task)
    answer(task, user_message("here you go"))

    await run(task)

    assert task.state == FAILED
    assert task.status_message is not None
    assert "api_key" in task.status_message
    assert task.emitted == []


@pytest.mark.parametrize("params", [{"chunks": 0}, {"chunks": "5"}, {"chunk_delay_ms": -1}])
async def test_bad_parameters_are_rejected(params: dict[str, Any]) -> None:
    task = start(**params)

    await run(task)

    assert task.state == REJECTED


def test_mask_keeps_only_the_tail_of_long_keys() -> None:
    assert mask(API_KEY) == "****cdef"
    assert mask("short") == "****"
