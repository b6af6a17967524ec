"""How many times a step is tried, for how long, and what the task says when it gives up.

A step's rules come from the step (``domain.skill.step``), else its skill, else the service's
defaults. Every failed attempt is a ``StepAttemptFailed`` event in the task's log, so the count
survives any crash and any number of workers; these functions decide from that count alone.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from domain.messages import agent_message
from domain.retry_policy import RetryPolicy
from domain.skill import BoundedStep, Skill, step_name
from domain.task import AttemptCause, Task

DETAIL_LIMIT = 500
"""The longest ``detail`` an attempt records (an error's message is cut to fit)."""

REDACTED = "[redacted]"


@dataclass(frozen=True)
class StepRules:
    """The retry policy and timeout step ``index`` of a skill runs under, and its name."""

    index: int
    name: str
    retry: RetryPolicy
    timeout: timedelta

    @property
    def label(self) -> str:
        """How messages name the step: ``step 2 (fetch_grants)``."""
        return f"step {self.index} ({self.name})"


def rules_for(skill: Skill, index: int, *, retry: RetryPolicy, timeout: timedelta) -> StepRules:
    """The rules of step ``index`` of ``skill``: its own, else the skill's, else ``retry``/``timeout``."""
    step = skill.steps[index]
    own_retry = step.retry if isinstance(step, BoundedStep) else None
    own_timeout = step.timeout if isinstance(step, BoundedStep) else None
    return StepRules(
        index=index,
        name=step_name(step),
        retry=own_retry or skill.retry or retry,
        timeout=own_timeout or skill.timeout or timeout,
    )


def attempts_spent(task: Task, retry: RetryPolicy) -> bool:
    """Whether the failed attempts at the task's next step leave none to make."""
    return retry.max_attempts is not None and len(task.failed_attempts) >= retry.max_attempts


_EVERY = {"error": "failed", "timeout": "timed out", "lease_lost": "lost its worker"}
_LAST = {"error": "raised", "timeout": "timed out", "lease_lost": "lost its worker"}


def spent_reason(rules: StepRules, causes: list[AttemptCause], last_detail: str | None) -> str:
    """The status message of a task whose step used up its attempts.

    ``step 2 (fetch_grants) lost its worker 5 times`` when every attempt ended the same way, else
    ``step 2 (fetch_grants) failed 5 times; the last attempt timed out``; an error's detail follows.
    """
    count = len(causes)
    times = "once" if count == 1 else f"{count} times"
    last = causes[-1] if causes else "error"
    if len(set(causes)) == 1:
        reason = f"{rules.label} {_EVERY[last]} {times}"
    else:
        reason = f"{rules.label} failed {times}; the last attempt {_LAST[last]}"
    if last == "error" and last_detail:
        reason += f": {last_detail}"
    return reason


def never_retried_reason(rules: StepRules, detail: str) -> str:
    """The status message of a task whose step raised an error its policy never retries."""
    return f"{rules.label} raised an error that is not retried: {detail}"


def describe_error(error: BaseException, secrets: list[str]) -> str:
    """``Type: message`` of a step's error, every secret value in it replaced, cut to ``DETAIL_LIMIT``."""
    text = f"{type(error).__name__}: {error}" if str(error) else type(error).__name__
    for secret in sorted(secrets, key=len, reverse=True):
        if secret:
            text = text.replace(secret, REDACTED)
    if len(text) > DETAIL_LIMIT:
        text = text[: DETAIL_LIMIT - 1] + "…"
    return text


def record_failed_attempt(
    task: Task,
    *,
    epoch: int,
    now: datetime,
    rules: StepRules,
    cause: AttemptCause,
    detail: str,
    retried: bool,
    message_id: str,
) -> int:
    """Record a failed attempt at step ``rules.index`` (fenced by ``epoch``); returns its number.

    When the policy allows no more attempts (or ``retried`` is false: an error it never retries),
    the task fails in the same commit, its status message saying why.

    Raises:
        LeaseLostError: The lease no longer holds (and nothing was recorded).
    """
    attempt = task.fail_attempt(epoch=epoch, now=now, step=rules.index, cause=cause, detail=detail)
    if retried and not attempts_spent(task, rules.retry):
        return attempt
    reason = (
        spent_reason(rules, task.failed_attempts, detail) if retried else never_retried_reason(rules, detail)
    )
    task.fail(epoch=epoch, now=now, reason=reason, message=agent_message(task, reason, message_id=message_id))
    return attempt
