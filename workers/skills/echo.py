"""``echo``: the smallest skill. It answers with what it was sent, as one artifact."""

from __future__ import annotations

import json

from domain.skill import Complete, Skill, StepContext, StepOutcome
from workers.skills.parts import data_of, text_artifact, texts_of


async def echo(ctx: StepContext) -> StepOutcome:
    """Complete with the text parts of the input joined by newlines (or its data parts as JSON)."""
    texts = texts_of(ctx.latest_input)
    if texts:
        artifact = text_artifact("echo", "echo", "\n".join(texts))
    else:
        data = data_of(ctx.latest_input)
        payload = data[0] if len(data) == 1 else data
        artifact = text_artifact("echo", "echo", json.dumps(payload, sort_keys=True), "application/json")
    return Complete(artifacts=[artifact], message="echoed")


ECHO = Skill(
    name="echo",
    version=1,
    steps=[echo],
    description="Answers with the text it was sent (or its data parts as JSON), as one artifact.",
    tags=("example",),
)
