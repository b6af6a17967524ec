"""The one retry policy (lost races, webhook deliveries), and the executor every use case writes through.

A use case is *load -> command -> save*. The save loses an optimistic race (``ConflictError``)
when someone appended to the task first; the executor then reloads the task and runs the command
again on the fresh copy, so every check the command makes (the lease fence, the state, a pause's
deadline) is made again against what the log now holds: a retry never acts on a stale decision.
An error of the command itself (a domain refusal, ``LeaseLostError`` above all) is never retried
and propagates at once. After ``max_attempts`` lost races the executor gives up with
``RetriesExhaustedError``.

Between attempts it waits a jittered, exponentially growing pause, so that writers that keep
colliding drift apart instead of colliding again in step. The executor comes in two forms with
the same loop: ``run_with_retries`` for callers already in a thread (the gateway's and the
sweeper's use cases save directly), ``run_with_retries_async`` for the worker, whose saves go
through its group committer.

The pools lend connections without a check query (``store.log.config``): a connection whose
backend is gone (killed, or the server restarted) fails at its first statement. The library's
recorder methods retry that themselves; longhaul's own statements that run outside them (the
worker's run-queue reads, the loads of ``TaskApplication.get``, the views' reads and writes) go
through ``retry_lost_connection``, which tries the whole call again on another connection (the
pool drops a broken one).
"""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import Awaitable, Callable
from datetime import datetime
from typing import TypeVar

from eventsourcing.persistence import InterfaceError, OperationalError

from domain.clock import Clock
from domain.retry_policy import RetryPolicy
from domain.task import Task
from store.log.errors import ConflictError, RetriesExhaustedError

T = TypeVar("T")

Command = Callable[[Task, datetime], None]
"""A domain command applied to a task copy at a given time (``now`` is read for each attempt)."""

Save = Callable[[Task], object]
"""Appends a task's pending events; raises ``ConflictError`` on a lost race."""

AsyncSave = Callable[[Task], Awaitable[None]]
"""``Save`` for async callers (the worker's group committer)."""


CONFLICT_RETRY = RetryPolicy(max_attempts=10, first_delay_s=0.005, max_delay_s=0.25)
"""The policy of every use case: at most 10 attempts, pauses from 2.5-5 ms up to 125-250 ms
(about 1 s in all before giving up)."""

RESTART_POLICY = RetryPolicy(max_attempts=1, first_delay_s=0.5, max_delay_s=10.0)
"""The pause of a long-running part (the relay) before it starts over after a failure, with
``delay(n)`` for its n-th failure: 0.25-0.5 s, doubling up to 5-10 s. It never gives up, so
``max_attempts`` is not consulted."""


CONNECTION_RETRY = RetryPolicy(max_attempts=12, first_delay_s=0.002, max_delay_s=0.2)
"""The policy of a statement whose connection failed: at most 12 attempts (more than a pool's
connections, which a restarted server leaves all broken), pauses from 1-2 ms up to 100-200 ms."""

LOST_CONNECTION = (InterfaceError, OperationalError)
"""What a statement on a dead connection raises (the library's own classes, as its datastore
translates psycopg's); its own recorder methods retry the same two."""


def retry_lost_connection(
    call: Callable[[], T],
    *,
    policy: RetryPolicy = CONNECTION_RETRY,
    sleep: Callable[[float], None] = time.sleep,
) -> T:
    """``call()``, tried again after a lost connection (``LOST_CONNECTION``) as ``policy`` allows.

    For a read, or a write that is one transaction: an attempt that failed rolled back, so trying
    again is safe (a commit whose answer was lost is found again by its own key: a projection's
    position, an event's version). The last error propagates when the policy gives up.
    """
    attempt = 0
    started = time.monotonic()
    while True:
        attempt += 1
        try:
            return call()
        except LOST_CONNECTION:
            pause = policy.next_delay(attempt, time.monotonic() - started, random.random)
            if pause is None:
                raise
        sleep(pause)


def webhook_retry(total_s: float, first_delay_s: float = 1.0, max_delay_s: float = 3600.0) -> RetryPolicy:
    """The webhook dispatcher's policy: no attempt limit, giving up after ``total_s``.

    Pauses grow from ``first_delay_s`` to ``max_delay_s``; the policy gives up once the next
    attempt would start more than ``total_s`` after the first one.
    """
    return RetryPolicy(
        max_attempts=None,
        first_delay_s=first_delay_s,
        max_delay_s=max(first_delay_s, max_delay_s),
        total_s=total_s,
    )


def run_with_retries(
    command: Command,
    *,
    load: Callable[[], Task],
    save: Save,
    clock: Clock,
    task: Task | None = None,
    policy: RetryPolicy = CONFLICT_RETRY,
    sleep: Callable[[float], None] = time.sleep,
) -> Task:
    """Apply ``command`` to the task and save it, reloading and re-applying after a lost race.

    Args:
        command: The domain command; its errors propagate unretried.
        load: Loads the task as the log holds it now.
        save: Appends the task's pending events.
        clock: Read once per attempt.
        task: A copy to start from instead of loading (it must hold no pending events).
        policy: Attempts and pauses.
        sleep: Waits between attempts.

    Returns:
        The saved task.

    Raises:
        RetriesExhaustedError: Every attempt lost its race.
    """
    attempt = 0
    while True:
        attempt += 1
        current = task if task is not None else load()
        command(current, clock())
        try:
            save(current)
        except ConflictError as error:
            task = None
            sleep(_pause_after(policy, attempt, current, error))
            continue
        return current


async def run_with_retries_async(
    command: Command,
    *,
    load: Callable[[], Awaitable[Task]],
    save: AsyncSave,
    clock: Clock,
    task: Task | None = None,
    policy: RetryPolicy = CONFLICT_RETRY,
    sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
) -> Task:
    """``run_with_retries`` for an async ``load`` and ``save``."""
    attempt = 0
    while True:
        attempt += 1
        current = task if task is not None else await load()
        command(current, clock())
        try:
            await save(current)
        except ConflictError as error:
            task = None
            await sleep(_pause_after(policy, attempt, current, error))
            continue
        return current


def _pause_after(policy: RetryPolicy, attempt: int, task: Task, error: ConflictError) -> float:
    """The pause before the next attempt, or ``RetriesExhaustedError`` if none is left."""
    pause = policy.next_delay(attempt, 0.0, random.random)
    if pause is None:
        raise RetriesExhaustedError(task.id, attempt) from error
    return pause
