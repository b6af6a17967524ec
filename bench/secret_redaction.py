"""The cost of the secret-parts rule on the paths that show messages, A/B in one run.

Every event's public JSON (``store.public_form.event_json.event_message``: the relay, streams,
webhooks, ``longhaul history``) and every wire ``Task`` (``store.public_form.task_wire.task_to_wire``:
``GetTask`` and every answer) now pass each message through ``store.secrets.secret_parts`` (a scan of
its parts for the secret metadata key). This measures both, with the rule (B) and with the rule
replaced by the identity (A: the code before the change), in interleaved rounds on the same
values, and reports medians and the ratio B/A:

- ``event_message``: one task's events (submit, lease, checkpoints with progress and artifacts,
  a question, an answer, the end);
- ``task_to_wire``: a task with a history of 12 messages (questions and answers), no secrets;
- ``task_to_wire (secret)``: the same with a sealed part in every answer (the rule's real work).

    uv run python -m bench.secret_redaction            # 21 rounds of 2,000 calls
    uv run python -m bench.secret_redaction --quick    # 7 rounds of 500
"""

from __future__ import annotations

import statistics
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from typing import Any

import store.public_form.event_json
import store.public_form.task_wire
from bench.common import base_parser, table, write_results
from domain.task import Task
from store.public_form import dumps, event_message, task_to_wire
from store.secrets import SECRET_EXTENSION, TaskKey, seal_message


def _task(now: datetime, *, secret: bool) -> Task:
    """A task that asked and was answered six times, with progress, artifacts, and the end."""
    task_id = uuid.uuid4()
    key = TaskKey.new(task_id, "acme")
    message = {"messageId": uuid.uuid4().hex, "role": "ROLE_USER", "parts": [{"text": "research tides"}]}
    task = Task.submit(
        task_id=task_id,
        now=now,
        tenant="acme",
        context_id="ctx",
        skill="research",
        skill_version=2,
        message={**message, "taskId": str(task_id)},
        params={"chunks": 5},
    )
    for step in range(6):
        at = now + timedelta(seconds=step)
        epoch = task.grant_lease(worker="w", now=at, until=at + timedelta(seconds=30))
        artifact = {"artifactId": f"a{step}", "parts": [{"text": f"part {step} " * 20}]}
        task.append_artifact(epoch=epoch, now=at, artifact=artifact)
        progress = {"messageId": uuid.uuid4().hex, "role": "ROLE_AGENT", "parts": [{"text": f"{step}/6"}]}
        task.report_progress(epoch=epoch, now=at, message=progress)
        question = {"messageId": uuid.uuid4().hex, "role": "ROLE_AGENT", "parts": [{"text": "key?"}]}
        task.request_input(
            epoch=epoch,
            now=at,
            step=step,
            checkpoint={"step": step},
            question=question,
            deadline=at + timedelta(hours=1),
        )
        answer: dict[str, Any] = {
            "messageId": uuid.uuid4().hex,
            "role": "ROLE_USER",
            "parts": [{"text": "here"}, {"data": {"api_key": "sk-0123456789"}}],
        }
        if secret:
            answer["parts"][1]["metadata"] = {SECRET_EXTENSION: True}
            answer = seal_message(answer, key, version=task.version + 1)
        task.receive_input(now=at, message=answer)
    return task


@contextmanager
def _without_the_rule() -> Iterator[None]:
    """The code before the change: messages shown as stored."""
    saved = (
        store.public_form.event_json.__dict__["public_message"],
        store.public_form.task_wire.__dict__["redact_message"],
    )
    vars(store.public_form.event_json)["public_message"] = lambda message: message
    vars(store.public_form.task_wire)["redact_message"] = lambda message, **_: message
    try:
        yield
    finally:
        (
            vars(store.public_form.event_json)["public_message"],
            vars(store.public_form.task_wire)["redact_message"],
        ) = saved


def _timed(calls: int, fn: Callable[[], object]) -> float:
    start = time.perf_counter()
    for _ in range(calls):
        fn()
    return (time.perf_counter() - start) / calls


def main() -> None:
    args = base_parser(__doc__ or "").parse_args()
    rounds, calls = (7, 500) if args.quick else (21, 2_000)
    now = datetime.now(UTC)
    plain, sealed = _task(now, secret=False), _task(now, secret=True)
    events = list(plain.collect_events())

    def messages() -> None:
        for event in events:
            dumps(event_message(None, "acme", event))

    cases: dict[str, Callable[[], object]] = {
        f"event_message ({len(events)} events)": messages,
        "task_to_wire": lambda: task_to_wire(plain),
        "task_to_wire (secret)": lambda: task_to_wire(sealed),
    }
    samples: dict[str, dict[str, list[float]]] = {name: {"A": [], "B": []} for name in cases}
    for _ in range(rounds):
        for name, fn in cases.items():  # interleaved: A, B, A, B, ... on the same values
            with _without_the_rule():
                samples[name]["A"].append(_timed(calls, fn))
            samples[name]["B"].append(_timed(calls, fn))

    rows, payload = [], {}
    for name, runs in samples.items():
        a, b = statistics.median(runs["A"]) * 1e6, statistics.median(runs["B"]) * 1e6
        rows.append([name, a, b, b / a])
        payload[name] = {"A_before_us": a, "B_with_rule_us": b, "ratio": b / a}
    print(f"{rounds} interleaved rounds of {calls} calls; medians (µs per call)")
    print(table(["path", "A: before", "B: with the rule", "B/A"], rows))
    write_results("secret_redaction", {"rounds": rounds, "calls": calls, "cases": payload}, args)


if __name__ == "__main__":
    main()
