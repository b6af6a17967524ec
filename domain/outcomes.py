"""What a step's outcome means for its task: each ``domain.skill`` outcome as domain commands.

The step runner commits the commands of one outcome in one fenced commit; this module is the one
place that decides which commands those are.
"""

from __future__ import annotations

from datetime import datetime, timedelta

from domain.messages import agent_message
from domain.skill import AskAuth, AskInput, Complete, Continue, Fail, Reject, StepOutcome
from domain.task import Task


def apply_outcome(
    task: Task,
    *,
    epoch: int,
    now: datetime,
    step: int,
    outcome: StepOutcome,
    steps_total: int,
    max_pause: timedelta,
    lease_until: datetime,
    message_id: str,
) -> None:
    """Record ``outcome`` of step ``step`` on ``task`` (not yet saved), fenced by ``epoch``.

    Args:
        task: The leased task.
        epoch: The lease epoch the step ran under.
        now: The commit time.
        step: The step's index.
        outcome: What the step returned.
        steps_total: How many steps the task's skill version has (the last one completes it).
        max_pause: The longest a pause may last (also the deadline of pauses that name none).
        lease_until: The lease end a completed step extends the lease to.
        message_id: The id of the agent message the outcome writes, if it writes one (a question,
            a final message, the reason it failed or was rejected).

    Raises:
        LeaseLostError: The lease no longer holds (and nothing was recorded).
        TypeError: ``outcome`` is no ``StepOutcome``.
    """
    if isinstance(outcome, Continue):
        task.complete_step(
            epoch=epoch, now=now, step=step, checkpoint=outcome.checkpoint, lease_until=lease_until
        )
        if step + 1 >= steps_total:
            task.complete(epoch=epoch, now=now, message=None)
    elif isinstance(outcome, (AskInput, AskAuth)):
        wait = min(outcome.deadline if outcome.deadline is not None else max_pause, max_pause)
        task.request_input(
            epoch=epoch,
            now=now,
            step=step,
            checkpoint=outcome.checkpoint,
            question=agent_message(task, outcome.question, outcome.data, message_id=message_id),
            deadline=now + wait,
            on_deadline=outcome.on_deadline,
            auth=isinstance(outcome, AskAuth),
            repeat=outcome.repeat,
        )
    elif isinstance(outcome, Complete):
        for artifact in outcome.artifacts:
            task.append_artifact(epoch=epoch, now=now, artifact=dict(artifact))
        task.complete_step(
            epoch=epoch, now=now, step=step, checkpoint=task.checkpoint, lease_until=lease_until
        )
        message = agent_message(task, outcome.message, message_id=message_id) if outcome.message else None
        task.complete(epoch=epoch, now=now, message=message)
    elif isinstance(outcome, Fail):
        task.fail(
            epoch=epoch,
            now=now,
            reason=outcome.reason,
            message=agent_message(task, outcome.reason, message_id=message_id),
        )
    elif isinstance(outcome, Reject):
        task.reject(
            epoch=epoch,
            now=now,
            reason=outcome.reason,
            message=agent_message(task, outcome.reason, message_id=message_id),
        )
    else:  # pragma: no cover - the union is closed
        raise TypeError(f"step {step} returned {outcome!r}, not a StepOutcome")
