"""JetStream publishes in flight at once, each acknowledgement a future of its own.

A publish sent without a reply subject (``send``) is stored by JetStream all the same; only its
acknowledgement is not sent. The relay sends a batch that way but for its last message: each
message expects its predecessor's stream sequence, so the last one is stored only if every one
before it was, and its acknowledgement answers for the whole batch (ADR 0056).

nats-py's ``publish_async`` would do, but its reply handler raises a refused publish's error
inside the subscription callback (``APIError.from_error`` raises instead of returning), so the
future never learns it and the caller waits for a timeout. ``Pipelined`` keeps one inbox
subscription (``<inbox>.<n>`` replies), bounds what is in flight, and completes each future
with the ``PubAck`` or a ``PublishRefusedError`` carrying the server's description.
"""

from __future__ import annotations

import asyncio
import itertools
import json
from typing import Any

from nats.js.api import Header, PubAck

NO_RESPONDERS = "503"


class PublishRefusedError(RuntimeError):
    """JetStream answered a publish with an error (wrong last sequence, too big, no stream...)."""


class Pipelined:
    """Publishes of one NATS connection, up to ``limit`` unacknowledged at once."""

    def __init__(self, client: Any, limit: int) -> None:
        self._client = client
        self._room = asyncio.Semaphore(limit)
        self._waiting: dict[str, asyncio.Future[PubAck]] = {}
        self._numbers = itertools.count()
        self._prefix = ""
        self._subscription: Any = None

    async def start(self) -> None:
        """Subscribe to the replies' inbox (once, before the first ``publish``)."""
        self._prefix = self._client.new_inbox()
        self._subscription = await self._client.subscribe(f"{self._prefix}.*", cb=self._reply)

    async def close(self) -> None:
        """Unsubscribe; what still waits is cancelled."""
        for waiting in self._waiting.values():
            waiting.cancel()
        self._waiting.clear()
        if self._subscription is not None:
            await self._subscription.unsubscribe()

    async def publish(self, subject: str, payload: bytes, headers: dict[str, str]) -> asyncio.Future[PubAck]:
        """Send one publish (in call order on the connection); its acknowledgement, to await."""
        await self._room.acquire()
        token = str(next(self._numbers))
        acked: asyncio.Future[PubAck] = asyncio.get_running_loop().create_future()
        acked.add_done_callback(lambda _: self._room.release())
        self._waiting[token] = acked
        try:
            await self._client.publish(subject, payload, reply=f"{self._prefix}.{token}", headers=headers)
        except BaseException:
            self._waiting.pop(token, None)
            acked.cancel()
            raise
        return acked

    async def send(self, subject: str, payload: bytes, headers: dict[str, str]) -> None:
        """Send one publish with no acknowledgement asked for (in call order on the connection).

        Only for a message that a later acknowledged publish answers for: JetStream says nothing
        of this one, stored or refused.
        """
        await self._client.publish(subject, payload, headers=headers)

    async def _reply(self, msg: Any) -> None:
        acked = self._waiting.pop(msg.subject.rsplit(".", 1)[-1], None)
        if acked is None or acked.done():
            return
        if msg.headers and msg.headers.get(Header.STATUS) == NO_RESPONDERS:
            acked.set_exception(PublishRefusedError("no stream takes the subject (no responders)"))
            return
        try:
            answer = json.loads(msg.data)
        except ValueError:
            acked.set_exception(PublishRefusedError(f"not a JetStream acknowledgement: {msg.data!r}"))
            return
        if "error" in answer:
            error = answer["error"]
            acked.set_exception(
                PublishRefusedError(f"{error.get('description')} (code {error.get('err_code')})")
            )
            return
        acked.set_result(PubAck.from_response(answer))
