"""``research``: the delegated-research example. Asks for an API key, then streams a report.

Steps: ``ask_for_key, write_report``. Version 2 asks for the key with ``AskAuth``
(``TASK_STATE_AUTH_REQUIRED``): every part of the answer is a credential, so the gateway stores
it sealed under the task's key and the worker opens it for ``write_report`` alone (docs/api.md,
"Secrets"). Version 1 asked with ``AskInput`` (``TASK_STATE_INPUT_REQUIRED``), whose answer is
stored in clear unless the client marks the part secret; it stays registered only so that tasks
started on it before the upgrade can finish (drain it: ``longhaul skills``).

Parameters (a data part of the first message): ``chunks`` (default 5), ``chunk_delay_ms``
(default 0). The research question is the text of the first message.

Checkpoint layout::

    query           the first message's text
    chunks          how many chunks the report has
    chunk_delay_ms  pause before each chunk
    key_hint        the API key masked (``****`` and its last 4 characters); never the key itself
    emitted         chunks already emitted (write_report)

``write_report`` emits one chunk per ``ctx.emit_artifact(..., checkpoint=...)``: the chunk and
the new ``emitted`` count are one commit, so a rerun resumes after the last committed chunk and
no crash point sends a chunk twice.

The key is read from the answer message each time the step runs, so it is never copied into the
checkpoint or the artifact in clear.
"""

from __future__ import annotations

import asyncio
import dataclasses
from typing import Any

from domain.skill import AskAuth, AskInput, Complete, Fail, Reject, Skill, StepContext, StepOutcome
from workers.skills.parts import as_int, as_number, first_data, texts_of

JSON = dict[str, Any]

QUESTION = "An API key is needed to read the paywalled source"
MAX_CHUNKS = 1_000
ARTIFACT_ID = "report"
ARTIFACT_NAME = "report.md"


def mask(secret: str) -> str:
    """``****`` and the last 4 characters when the secret is long enough to spare them, else ``****``."""
    return f"****{secret[-4:]}" if len(secret) >= 12 else "****"


def chunk_text(index: int, checkpoint: JSON) -> str:
    """The markdown of chunk ``index``: a pure function of the checkpoint."""
    count, query = checkpoint["chunks"], checkpoint["query"]
    parts = []
    if index == 0:
        parts.append(
            f"# Research report: {query}\n\n"
            "Sources: the public web and one paywalled archive "
            f"(read with API key `{checkpoint['key_hint']}`).\n\n"
        )
    parts.append(
        f"## Finding {index + 1}\n\n"
        f"Section {index + 1} of {count} on {query!r}: what the sources agree on, where they differ, "
        f"and how much weight each deserves.\n\n"
    )
    if index == count - 1:
        parts.append(f"## Summary\n\n{count} sections on {query!r}. End of report.\n")
    return "".join(parts)


async def ask_for_key(ctx: StepContext) -> StepOutcome:
    """Fix the plan and ask for the paywalled source's API key (credentials: TASK_STATE_AUTH_REQUIRED)."""
    outcome = await ask_for_key_v1(ctx)
    if not isinstance(outcome, AskInput):
        return outcome
    return AskAuth(question=outcome.question, checkpoint=outcome.checkpoint, data=outcome.data)


async def ask_for_key_v1(ctx: StepContext) -> StepOutcome:
    """Version 1: fix the plan and ask for the key as ordinary input (TASK_STATE_INPUT_REQUIRED)."""
    given_chunks = ctx.params.get("chunks", 5)
    given_delay = ctx.params.get("chunk_delay_ms", 0)
    chunks, delay = as_int(given_chunks), as_number(given_delay)
    if chunks is None or not 1 <= chunks <= MAX_CHUNKS:
        return Reject(f"research: chunks must be an integer from 1 to {MAX_CHUNKS}, not {given_chunks!r}")
    if delay is None or delay < 0:
        return Reject(f"research: chunk_delay_ms must be a number of milliseconds >= 0, not {given_delay!r}")
    query = " ".join(texts_of(ctx.latest_input)).strip() or "the requested topic"
    checkpoint = {"query": query, "chunks": chunks, "chunk_delay_ms": delay}
    return AskInput(question=QUESTION, checkpoint=checkpoint, data={"answer": {"api_key": "string"}})


async def write_report(ctx: StepContext) -> StepOutcome:
    """Stream the report as a chunked artifact, one commit per chunk, resuming after the last one."""
    data = first_data(ctx.latest_input) or {}
    api_key = data.get("api_key")
    if not isinstance(api_key, str) or not api_key.strip():
        return Fail(
            'research: the answer carried no data part {"api_key": "..."}; the paywalled source stays unread'
        )
    checkpoint = {**ctx.checkpoint, "key_hint": mask(api_key.strip())}
    count = checkpoint["chunks"]
    for index in range(checkpoint.get("emitted", 0), count):
        if checkpoint["chunk_delay_ms"]:
            await asyncio.sleep(checkpoint["chunk_delay_ms"] / 1000)
        artifact = {
            "artifactId": ARTIFACT_ID,
            "name": ARTIFACT_NAME,
            "parts": [{"text": chunk_text(index, checkpoint), "mediaType": "text/markdown"}],
        }
        checkpoint = {**checkpoint, "emitted": index + 1}
        await ctx.emit_artifact(
            artifact,
            append=index > 0,
            last_chunk=index == count - 1,
            checkpoint=checkpoint,
            progress=f"Wrote chunk {index + 1} of {count} of the report.",
        )
    return Complete(message=f"Research report ready ({count} chunks).")


RESEARCH = Skill(
    name="research",
    version=2,
    steps=[ask_for_key, write_report],
    description="Delegated research: asks for an API key for a paywalled source, then streams a report.",
    tags=("research", "streaming", "auth-required"),
)

RESEARCH_V1 = dataclasses.replace(
    RESEARCH,
    version=1,
    steps=[ask_for_key_v1, write_report],
    tags=("research", "streaming", "input-required"),
)
"""The version that asked with ``AskInput``: kept for the tasks started on it."""
