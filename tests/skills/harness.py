"""An in-memory stand-in for the worker runtime, to drive skills' steps in tests.

It keeps the runtime's semantics that skills rely on, without a database:

- every write (``commit``, a ``once`` result, an artifact chunk, a progress message) is a commit
  that lands in ``task.commits``; checkpoints and effect results must survive a JSON round trip;
- ``once`` returns the recorded result for a known key and never calls ``fn`` again;
- a step that raises is run again from the last committed checkpoint (a new context each time);
- ``AskInput``/``AskAuth`` finish the step: the answer makes the *next* step run;
- ``crash_after_commits = n`` kills the "process" (raises ``SimulatedCrashError``) right after n more
  commits, and ``crash_before_next_effect_record`` kills it after an effect's ``fn`` ran but
  before its result was recorded; ``run`` again is the next worker resuming.
"""

from __future__ import annotations

import copy
import json
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from domain.skill import (
    JSON,
    AskAuth,
    AskInput,
    Complete,
    Continue,
    Fail,
    Reject,
    Skill,
    StepContext,
    StepOutcome,
)

WORKING = "TASK_STATE_WORKING"
INPUT_REQUIRED = "TASK_STATE_INPUT_REQUIRED"
AUTH_REQUIRED = "TASK_STATE_AUTH_REQUIRED"
COMPLETED = "TASK_STATE_COMPLETED"
FAILED = "TASK_STATE_FAILED"
REJECTED = "TASK_STATE_REJECTED"


class SimulatedCrashError(Exception):
    """The worker process died (raised by the harness, never retried within one ``run``)."""


def user_message(text: str | None = None, data: JSON | None = None, message_id: str | None = None) -> JSON:
    """An A2A 1.0 user message with an optional text part and an optional data part."""
    parts: list[JSON] = []
    if text is not None:
        parts.append({"text": text})
    if data is not None:
        parts.append({"data": data})
    return {"messageId": message_id or uuid.uuid4().hex, "role": "ROLE_USER", "parts": parts}


def _json(value: Any) -> Any:
    return json.loads(json.dumps(value))


@dataclass
class Emitted:
    """One ``emit_artifact`` call."""

    artifact: JSON
    append: bool
    last_chunk: bool


@dataclass
class HarnessTask:
    """A task's durable state, as the log would hold it."""

    skill: Skill
    params: JSON
    latest_input: JSON
    task_id: str = field(default_factory=lambda: f"task-{uuid.uuid4().hex[:12]}")
    state: str = WORKING
    next_step: int = 0
    checkpoint: JSON = field(default_factory=dict)
    effects: dict[str, Any] = field(default_factory=dict)
    artifacts: dict[str, JSON] = field(default_factory=dict)
    emitted: list[Emitted] = field(default_factory=list)
    commits: list[tuple[str, Any]] = field(default_factory=list)
    status_message: str | None = None
    pause: AskInput | AskAuth | None = None
    errors: list[Exception] = field(default_factory=list)
    crash_after_commits: int | None = None
    crash_before_next_effect_record: bool = False

    def committed(self, kind: str, payload: Any) -> None:
        """Record one commit; crash afterwards if the test asked for it."""
        self.commits.append((kind, payload))
        if self.crash_after_commits is not None:
            self.crash_after_commits -= 1
            if self.crash_after_commits <= 0:
                self.crash_after_commits = None
                raise SimulatedCrashError(f"crashed after commit {len(self.commits)} ({kind})")

    def merge_artifact(self, artifact: JSON, *, append: bool) -> None:
        """Add an artifact or append a chunk's parts, as the Task aggregate does."""
        artifact_id = artifact["artifactId"]
        existing = self.artifacts.get(artifact_id)
        if append and existing is not None:
            self.artifacts[artifact_id] = {**existing, "parts": [*existing["parts"], *artifact["parts"]]}
        else:
            self.artifacts[artifact_id] = copy.deepcopy(artifact)

    def artifact_text(self, artifact_id: str) -> str:
        """The concatenated text parts of one artifact."""
        return "".join(p.get("text", "") for p in self.artifacts[artifact_id]["parts"])


class HarnessContext:
    """``StepContext`` over a ``HarnessTask``: a fresh one for every run of a step."""

    def __init__(self, task: HarnessTask) -> None:
        self._task = task
        self._checkpoint = copy.deepcopy(task.checkpoint)

    @property
    def task_id(self) -> str:
        """The task's id."""
        return self._task.task_id

    @property
    def checkpoint(self) -> JSON:
        """The last committed checkpoint (a private copy)."""
        return self._checkpoint

    @property
    def params(self) -> JSON:
        """The skill parameters."""
        return copy.deepcopy(self._task.params)

    @property
    def latest_input(self) -> JSON:
        """The latest client message."""
        return copy.deepcopy(self._task.latest_input)

    async def once(self, key: str, fn: Callable[[str], Awaitable[Any]]) -> Any:
        """Run ``fn`` at most once per key; the recorded result afterwards."""
        task = self._task
        if key in task.effects:
            return copy.deepcopy(task.effects[key])
        result = _json(await fn(f"{task.task_id}:{key}"))
        if task.crash_before_next_effect_record:
            task.crash_before_next_effect_record = False
            raise SimulatedCrashError(f"crashed before recording effect {key!r}")
        task.effects[key] = result
        task.committed("effect", {"key": key, "result": result})
        return copy.deepcopy(result)

    async def commit(self, checkpoint: JSON) -> None:
        """A sub-step commit."""
        self._task.checkpoint = _json(checkpoint)
        self._checkpoint = copy.deepcopy(self._task.checkpoint)
        self._task.committed("checkpoint", copy.deepcopy(self._task.checkpoint))

    async def emit_artifact(
        self, artifact: JSON, *, append: bool = False, last_chunk: bool = True, checkpoint: JSON | None = None
    ) -> None:
        """Commit an artifact or one chunk of it (with ``checkpoint``: in the same commit)."""
        chunk = _json(artifact)
        assert chunk.get("artifactId"), "an artifact needs an artifactId"
        assert chunk.get("parts"), "an artifact needs parts"
        self._task.merge_artifact(chunk, append=append)
        self._task.emitted.append(Emitted(chunk, append, last_chunk))
        if checkpoint is not None:
            self._task.checkpoint = _json(checkpoint)
            self._checkpoint = copy.deepcopy(self._task.checkpoint)
        self._task.committed("artifact", chunk)

    async def progress(self, text: str) -> None:
        """Commit a status message."""
        self._task.status_message = text
        self._task.committed("progress", text)


def _check_context(ctx: HarnessContext) -> StepContext:
    return ctx  # the type checker proves HarnessContext implements the protocol


def new_task(skill: Skill, first: JSON, params: JSON | None = None) -> HarnessTask:
    """A submitted task whose first message is ``first``."""
    return HarnessTask(skill=skill, params=params or {}, latest_input=first)


async def run_step(task: HarnessTask) -> StepOutcome:
    """Run the next step once from the committed checkpoint and commit its outcome; errors propagate."""
    assert task.state == WORKING, f"task is {task.state}"
    step = task.skill.steps[task.next_step]
    outcome = await step(_check_context(HarnessContext(task)))
    _apply(task, outcome)
    return outcome


async def run(task: HarnessTask, *, max_attempts: int = 5) -> StepOutcome | None:
    """Run steps until the task pauses or ends, retrying a raising step like the runtime does."""
    attempts = 0
    outcome: StepOutcome | None = None
    while task.state == WORKING and task.next_step < len(task.skill.steps):
        try:
            outcome = await run_step(task)
        except SimulatedCrashError:
            raise
        except Exception as error:
            task.errors.append(error)
            attempts += 1
            if attempts >= max_attempts:
                raise
            continue
        attempts = 0
    return outcome


def answer(task: HarnessTask, message: JSON) -> None:
    """A client answers a paused task: the next step becomes runnable."""
    assert task.state in (INPUT_REQUIRED, AUTH_REQUIRED), f"task is {task.state}, not paused"
    task.latest_input = message
    task.pause = None
    task.state = WORKING


def _apply(task: HarnessTask, outcome: StepOutcome) -> None:
    task.next_step += 1
    if isinstance(outcome, Continue):
        task.checkpoint = _json(outcome.checkpoint)
        if task.next_step >= len(task.skill.steps):
            task.state = COMPLETED
    elif isinstance(outcome, AskInput | AskAuth):
        if outcome.repeat:
            task.next_step -= 1  # the answer resumes the step that asked
        task.checkpoint = _json(outcome.checkpoint)
        task.pause = outcome
        task.status_message = outcome.question
        task.state = AUTH_REQUIRED if isinstance(outcome, AskAuth) else INPUT_REQUIRED
    elif isinstance(outcome, Complete):
        for artifact in outcome.artifacts:
            task.merge_artifact(_json(artifact), append=False)
        task.status_message = outcome.message
        task.state = COMPLETED
    elif isinstance(outcome, Fail):
        task.status_message = outcome.reason
        task.state = FAILED
    elif isinstance(outcome, Reject):
        task.status_message = outcome.reason
        task.state = REJECTED
    task.commits.append(("step", type(outcome).__name__))
