"""A durable JetStream pull consumer that hands over each message as soon as it arrives.

nats-py's ``fetch(batch, timeout)`` keeps a pull request open until the batch is full or the
timeout passes, so at any rate below ``batch`` per ``timeout`` a message waits up to the whole
timeout (with ``fetch(256, 1.0)``, up to a second between a commit and its webhook).
``Pull`` keeps one pull request of ``batch`` messages (``expires`` seconds) open on the durable
consumer and yields whatever has arrived the moment anything has; a new request goes out when
the last one is used up or expired, or when nothing answered it for longer than it could live
(NATS restarted and forgot it).

A reader that can wait a little (``linger_s`` above 0) takes the stream in bursts instead: after
a request that brought messages, the next one waits ``linger_s`` and asks for what has arrived
meanwhile without waiting at the server (``no_wait``), so the server sends it in one burst and
the reader wakes once for it, rather than once for each message as it is stored. A request
that brought nothing is followed by an open request for one message: an idle reader keeps one
request open (not one every ``linger_s``), and the first message after a quiet spell is handed
over as it arrives. ``linger_s`` is a function, asked before each request: the owner's state
decides, and a change applies from the next request.

The messages arrive through a callback subscription that only appends them to a list and wakes
the reader: nats-py's ``next_msg`` costs a ``uuid4``, a task and a ``wait_for`` per message
per message, where the callback costs one call.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from collections.abc import AsyncIterator, Callable
from typing import Any

from nats.js.api import Header, StatusCode

EXPIRED = frozenset({StatusCode.REQUEST_TIMEOUT, StatusCode.NO_MESSAGES, StatusCode.CONFLICT})
"""Statuses that end a pull request (expired, nothing left, or the server cut it short)."""


class Pull:
    """Messages of the durable consumer ``durable`` on ``stream``, in batches as they arrive."""

    def __init__(
        self,
        client: Any,
        stream: str,
        durable: str,
        *,
        batch: int = 256,
        expires: float = 5.0,
        linger_s: Callable[[], float] = lambda: 0.0,
    ) -> None:
        self.client = client
        self.next_subject = f"$JS.API.CONSUMER.MSG.NEXT.{stream}.{durable}"
        self.batch = batch
        self.expires = expires
        self.linger_s = linger_s
        """Above 0: after a request that brought messages, wait this long, then take a burst."""

    async def batches(self, stop: asyncio.Event) -> AsyncIterator[list[Any]]:
        """Yield lists of messages (never empty) until ``stop`` is set; each message is to be acked."""
        arrived: list[Any] = []
        woken = asyncio.Event()

        async def arrive(message: Any) -> None:
            arrived.append(message)
            woken.set()

        inbox = self.client.new_inbox()
        subscription = await self.client.subscribe(inbox, cb=arrive)
        left, asked, brought = 0, 0.0, 0
        try:
            while not stop.is_set():
                if left == 0 or time.monotonic() - asked > self.expires + 1.0:
                    request = await self._next_request(brought)
                    await self.client.publish(self.next_subject, json.dumps(request).encode(), reply=inbox)
                    left, asked, brought = int(request["batch"]), time.monotonic(), 0
                if not arrived:
                    woken.clear()
                    with contextlib.suppress(TimeoutError):
                        await asyncio.wait_for(woken.wait(), 0.5)
                    if not arrived:
                        continue
                taken, arrived[:] = list(arrived), []
                messages = []
                for message in taken:
                    status = message.headers.get(Header.STATUS) if message.headers else None
                    if status is None:
                        messages.append(message)
                    elif status in EXPIRED:
                        left = 0
                    # else a heartbeat or another control message: nothing to hand over
                left = max(0, left - len(messages))
                brought += len(messages)
                if messages:
                    yield messages
        finally:
            await subscription.unsubscribe()

    async def _next_request(self, brought: int) -> dict[str, Any]:
        """The next pull request: open for a whole batch, or when lingering a burst or one message."""
        linger_s = self.linger_s()
        if not linger_s:
            return {"batch": self.batch, "expires": int(self.expires * 1e9)}
        if brought:
            await asyncio.sleep(linger_s)
            return {"batch": self.batch, "no_wait": True}
        return {"batch": 1, "expires": int(self.expires * 1e9)}
