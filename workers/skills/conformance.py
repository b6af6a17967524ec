"""``conformance``: the A2A TCK's test agent, driven by ``messageId`` prefixes.

The TCK (a2aproject/a2a-tck, branch ``1.0-dev``) sends ids ``tck-<scenario>-<session>`` and expects
the behaviour of its ``scenarios/*.feature`` (``reference/a2a-1.0.md`` §15). Prefixes match longest
first, so ``tck-artifact-file-url`` is not taken for ``tck-artifact-file``; an unknown id completes
the task with "Hello from TCK".

Version 2 (new tasks) acts on every message as the TCK's reference agent does: its one step
``act`` reads the prefix of the *latest* message, so an answer to a paused task is a scenario of
its own (``tck-input-required`` asks again, ``tck-complete-task`` completes: the TCK's history
tests answer a paused task twice before completing it). Version 1 (kept for tasks pinned to it):
``respond`` acts on the first message, ``follow_up`` completes any answer with ``Received: <text>``.
Checkpoint: ``{"scenario": prefix or "", "messageId": id}``, plus ``emitted`` while the
chunked-stream scenario is between its two chunks.

``tck-message-response`` wants a bare Message as the answer: the task runs and completes with
"Direct message response" like any other, and the skill's ``answers_with_message`` makes its
sends answer with that message instead of the task (ADR 0020).
"""

from __future__ import annotations

import asyncio
import base64
import dataclasses
from typing import Any

from domain.skill import AskInput, Complete, Reject, Skill, StepContext, StepOutcome
from workers.skills.parts import texts_of

JSON = dict[str, Any]

ARTIFACT_ID = "tck-artifact"
FILE_BODY = b"file output"
RESUBSCRIBE_HOLD_S = 4.0  # at least 2x the TCK's streaming timeout (2 s), as the reference SUT holds
DELAYED_COMPLETE_S = 2.0  # 1x the TCK's streaming timeout

STREAM_TEXTS = {
    "tck-stream-001": "Stream hello from TCK",
    "tck-stream-003": "Stream task lifecycle",
    "tck-stream-ordering-001": "Ordered output",
    "tck-stream-artifact-text": "Streamed text content",
}
PREFIXES: tuple[str, ...] = tuple(
    sorted(
        {
            "tck-complete-task",
            "tck-delayed-complete",
            "tck-artifact-text",
            "tck-artifact-file",
            "tck-artifact-file-url",
            "tck-artifact-data",
            "tck-message-response",
            "tck-input-required",
            "tck-reject-task",
            "tck-stream-002",
            "tck-stream-artifact-file",
            "tck-stream-artifact-chunked",
            "test-resubscribe-message-id",
            *STREAM_TEXTS,
        },
        key=lambda p: (-len(p), p),
    )
)


def scenario_of(message_id: str) -> str:
    """The longest known prefix of ``message_id``.

    Other ``tck-stream-`` ids map to ``tck-stream`` (artifact, then complete); anything else is
    ``""`` (the default: complete).
    """
    for prefix in PREFIXES:
        if message_id.startswith(prefix):
            return prefix
    return "tck-stream" if message_id.startswith("tck-stream-") else ""


def answers_with_message(first_message: JSON) -> bool:
    """Whether the task answers with a bare Message: only ``tck-message-response``."""
    return scenario_of(str(first_message.get("messageId", ""))) == "tck-message-response"


def _artifact(*parts: JSON) -> JSON:
    return {"artifactId": ARTIFACT_ID, "name": "tck-output", "parts": list(parts)}


def _file_part() -> JSON:
    return {"raw": base64.b64encode(FILE_BODY).decode(), "filename": "output.txt", "mediaType": "text/plain"}


def _immediate(scenario: str) -> StepOutcome | None:
    """The outcome of a scenario that needs no waiting and no mid-step commit."""
    url_part = {"url": "https://example.com/output.txt", "filename": "output.txt", "mediaType": "text/plain"}
    outcomes: dict[str, StepOutcome] = {
        "": Complete(message="Hello from TCK"),
        "tck-complete-task": Complete(message="Hello from TCK"),
        "tck-message-response": Complete(message="Direct message response"),
        "tck-reject-task": Reject("rejected"),
        "tck-artifact-text": Complete(artifacts=[_artifact({"text": "Generated text content"})]),
        "tck-artifact-file": Complete(artifacts=[_artifact(_file_part())]),
        "tck-artifact-file-url": Complete(artifacts=[_artifact(url_part)]),
        "tck-artifact-data": Complete(artifacts=[_artifact({"data": {"key": "value", "count": 42}})]),
        "tck-stream-002": Complete(),
    }
    return outcomes.get(scenario)


class Conformance:
    """The TCK agent; the two holds are parameters so tests need not wait seconds."""

    def __init__(
        self, resubscribe_hold_s: float = RESUBSCRIBE_HOLD_S, delayed_s: float = DELAYED_COMPLETE_S
    ) -> None:
        self.resubscribe_hold_s = resubscribe_hold_s
        self.delayed_s = delayed_s

    def skills(self) -> list[Skill]:
        """``conformance`` v1 and v2 (the one new tasks start on)."""
        first = Skill(
            name="conformance",
            version=1,
            steps=[self.respond, self.follow_up],
            description="The A2A TCK's test agent: behaves as the TCK's messageId prefixes ask.",
            tags=("tck", "conformance"),
            answers_with_message=answers_with_message,
        )
        return [first, dataclasses.replace(first, version=2, steps=[self.act])]

    async def act(self, ctx: StepContext) -> StepOutcome:
        """v2: act on the latest message's ``messageId``; ``tck-input-required`` asks (again)."""
        message_id = str(ctx.latest_input.get("messageId") or "")
        scenario = scenario_of(message_id)
        if scenario == "tck-input-required":
            return AskInput(question="Input required", checkpoint={}, repeat=True)
        checkpoint = {**ctx.checkpoint, "scenario": scenario, "messageId": message_id}
        return await self._run(ctx, scenario, checkpoint)

    async def respond(self, ctx: StepContext) -> StepOutcome:
        """v1: act on the first message's ``messageId``."""
        message_id = str(ctx.checkpoint.get("messageId") or ctx.latest_input.get("messageId") or "")
        scenario = scenario_of(message_id)
        checkpoint = {**ctx.checkpoint, "scenario": scenario, "messageId": message_id}
        if scenario == "tck-input-required":
            return AskInput(question="Input required", checkpoint=checkpoint)
        return await self._run(ctx, scenario, checkpoint)

    async def follow_up(self, ctx: StepContext) -> StepOutcome:
        """v1: the answer to ``tck-input-required``: complete."""
        return Complete(message=f"Received: {' '.join(texts_of(ctx.latest_input))}")

    async def _run(self, ctx: StepContext, scenario: str, checkpoint: JSON) -> StepOutcome:
        """Every scenario but ``tck-input-required``, to its end."""
        outcome = _immediate(scenario)
        if outcome is not None:
            return outcome
        if scenario == "tck-delayed-complete":
            await asyncio.sleep(self.delayed_s)
            return Complete(message="Done after delay")
        if scenario == "test-resubscribe-message-id":
            await asyncio.sleep(self.resubscribe_hold_s)
            return Complete()
        if scenario == "tck-stream-artifact-chunked":
            await _stream_chunks(ctx, checkpoint)
            return Complete()
        text = STREAM_TEXTS.get(scenario, "Stream output")
        part = _file_part() if scenario == "tck-stream-artifact-file" else {"text": text}
        await ctx.emit_artifact(_artifact(part))
        return Complete()


async def _stream_chunks(ctx: StepContext, checkpoint: JSON) -> None:
    """``chunk-1 `` then ``chunk-2`` (append, last chunk), each committed with the count emitted."""
    chunks = [("chunk-1 ", False), ("chunk-2", True)]
    for index in range(checkpoint.get("emitted", 0), len(chunks)):
        text, last = chunks[index]
        checkpoint = {**checkpoint, "emitted": index + 1}
        # The chunk and its count in one commit: a crash between them cannot send a chunk twice.
        await ctx.emit_artifact(
            _artifact({"text": text}), append=index > 0, last_chunk=last, checkpoint=checkpoint
        )


def conformance_skills(
    resubscribe_hold_s: float = RESUBSCRIBE_HOLD_S, delayed_s: float = DELAYED_COMPLETE_S
) -> list[Skill]:
    """``conformance`` v1 and v2."""
    return Conformance(resubscribe_hold_s, delayed_s).skills()
