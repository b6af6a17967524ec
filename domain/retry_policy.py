"""The one retry policy: how often something that failed is tried again, and how long to wait.

One value serves every retry in longhaul: a use case that lost an optimistic race
(``store.log.retry``), a webhook delivery (``workers.dispatcher``), a long-running part that
starts over (the relay, the sequencer) and a skill's step that failed (``workers.task_runner``).
It is pure: the random draw of the jitter comes in as an argument, as time does.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

Draw = Callable[[], float]
"""A uniform draw from [0, 1), for the jitter (``random.random`` outside tests)."""


@dataclass(frozen=True)
class RetryPolicy:
    """How often, and for how long, something that failed is tried again, and how long to wait.

    The pause after the n-th failed attempt lies in ``[c/2, c]`` (uniformly drawn), where the
    ceiling ``c = min(max_delay_s, first_delay_s * 2 ** (n - 1))`` doubles with each attempt.
    The policy gives up after ``max_attempts`` attempts, or when the next pause would end more
    than ``total_s`` after the first attempt began (``None``: no such limit). An error whose type
    is one of ``never_retry`` (or a subclass) is not tried again at all.
    """

    max_attempts: int | None
    first_delay_s: float
    max_delay_s: float
    total_s: float | None = None
    never_retry: tuple[type[BaseException], ...] = ()

    def __post_init__(self) -> None:
        if self.max_attempts is not None and self.max_attempts < 1:
            raise ValueError("a retry policy makes at least one attempt")
        if not 0 < self.first_delay_s <= self.max_delay_s:
            raise ValueError("delays must satisfy 0 < first_delay_s <= max_delay_s")
        if self.total_s is not None and self.total_s < 0:
            raise ValueError("total_s must not be negative")

    def delay(self, attempt: int, draw: Draw) -> float:
        """The pause after failed attempt ``attempt`` (1 for the first); ``draw`` gives [0, 1)."""
        ceiling = min(self.max_delay_s, self.first_delay_s * 2.0 ** min(attempt - 1, 1000))
        return ceiling * (1 + draw()) / 2

    def next_delay(self, attempt: int, elapsed_s: float, draw: Draw) -> float | None:
        """The pause after failed attempt ``attempt``, ``elapsed_s`` after the first began; None: give up."""
        if self.max_attempts is not None and attempt >= self.max_attempts:
            return None
        pause = self.delay(attempt, draw)
        if self.total_s is not None and elapsed_s + pause > self.total_s:
            return None
        return pause

    def retries(self, error: BaseException) -> bool:
        """Whether an attempt that failed with ``error`` may be tried again (``never_retry``)."""
        return not isinstance(error, self.never_retry)
