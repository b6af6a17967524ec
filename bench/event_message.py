"""The cost of one NATS message body: the relay's dict + JSON encoding against the pydantic models.

The relay builds each message with ``store.public_form.event_json.event_message`` and encodes it with
``dumps``. ``store.public_form.message_schema`` describes the same message as pydantic models (one per
event type, bodies generated from the domain's event classes). This measures, on the same
events (a realistic mix: submit, lease, checkpoints with progress, artifacts, a step, the end):

- ``dict + dumps``: what the relay does today;
- ``validate + dump_json``: the message built by validating that dict through the models and
  encoding with pydantic (what building it "through the model" would cost on the hot path);
- ``validate only``: the validation step alone.

    uv run python -m bench.event_message            # 10,000 events, best of 5
    uv run python -m bench.event_message --quick    # 2,000 events, best of 3
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

from bench.common import base_parser, table, write_results
from domain.task import Task
from store.public_form import EVENT_MESSAGE, dumps, event_message


def _task_events(now: datetime) -> list[Any]:
    """One task's events: submit, lease, three checkpoints with progress and artifacts, complete."""
    task_id = uuid.uuid4()
    message = {"messageId": uuid.uuid4().hex, "role": "ROLE_USER", "parts": [{"text": "review grants"}]}
    task = Task.submit(
        task_id=task_id,
        now=now,
        tenant="acme",
        context_id=str(uuid.uuid4()),
        skill="access-review",
        skill_version=1,
        message={**message, "taskId": str(task_id)},
        params={"systems": [f"sys-{i}" for i in range(10)]},
    )
    epoch = task.grant_lease(worker="vm:1234:abcdef", now=now, until=now + timedelta(seconds=30))
    for i in range(3):
        checkpoint = {"done": [f"sys-{j}" for j in range(i + 1)], "grants": i * 7}
        artifact = {"artifactId": f"a{i}", "parts": [{"text": f"part {i} " * 20}]}
        task.append_artifact(epoch=epoch, now=now, artifact=artifact, append=False, last_chunk=True)
        task.save_checkpoint(
            epoch=epoch, now=now, step=0, checkpoint=checkpoint, lease_until=now + timedelta(30)
        )
        progress = {"messageId": uuid.uuid4().hex, "role": "ROLE_AGENT", "parts": [{"text": f"{i + 1}/3"}]}
        task.report_progress(epoch=epoch, now=now, message=progress)
    task.complete_step(epoch=epoch, now=now, step=0, checkpoint={"done": 3}, lease_until=now + timedelta(30))
    return list(task.collect_events())


def _best(runs: int, fn: Callable[[], object]) -> float:
    best = float("inf")
    for _ in range(runs):
        start = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - start)
    return best


def main() -> None:
    args = base_parser(__doc__ or "").parse_args()
    count, runs = (2_000, 3) if args.quick else (10_000, 5)
    now = datetime.now(UTC)
    events: list[Any] = []
    while len(events) < count:
        events += _task_events(now)
    events = events[:count]
    messages = [event_message(i + 1, "acme", e) for i, e in enumerate(events)]

    def as_dict() -> None:
        for i, event in enumerate(events):
            dumps(event_message(i + 1, "acme", event)).encode()

    def through_model() -> None:
        for i, event in enumerate(events):
            EVENT_MESSAGE.dump_json(EVENT_MESSAGE.validate_python(event_message(i + 1, "acme", event)))

    def validate_only() -> None:
        for message in messages:
            EVENT_MESSAGE.validate_python(message)

    results = {
        "dict + dumps": _best(runs, as_dict),
        "validate + dump_json": _best(runs, through_model),
        "validate only": _best(runs, validate_only),
    }
    base = results["dict + dumps"]
    rows = [[name, f"{s * 1e6 / count:.1f}", f"{s / base:.2f}"] for name, s in results.items()]
    print(f"{count} events, best of {runs}")
    print(table(["way", "µs per event", "x dict + dumps"], rows))
    write_results(
        "event_message",
        {"events": count, "runs": runs, "us_per_event": {k: v * 1e6 / count for k, v in results.items()}},
        args,
    )


if __name__ == "__main__":
    main()
