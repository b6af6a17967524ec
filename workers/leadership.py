"""How a long-running part starts over after a failure.

The relay, the sequencer and the webhook dispatcher all do it, written once: :func:`restarting`
runs a part until it returns or ``stop`` is set; after a failure (the database or NATS gone) it
logs it and pauses by the one restart policy (``store.log.retry.RESTART_POLICY``: 0.25-0.5 s,
doubling up to 5-10 s, never giving up). How they wait to lead is the store's
(``store.log.leading``: a session advisory lock).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
from collections.abc import Awaitable, Callable

from store.log import RESTART_POLICY


async def restarting(
    what: str, part: Callable[[], Awaitable[None]], stop: asyncio.Event, logger: logging.Logger
) -> None:
    """Run ``part`` until it returns or ``stop`` is set, starting over after each failure.

    ``what`` names the part in the line ``logger`` logs for each failure (``relay failed (...);
    starting over in 0.4s``).
    """
    failures = 0
    while not stop.is_set():
        try:
            await part()
            return
        except Exception as error:  # noqa: BLE001 - database or NATS trouble: start over
            failures += 1
            pause = RESTART_POLICY.delay(failures, random.random)
            logger.warning("%s failed (%r); starting over in %.1fs", what, error, pause)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), pause)
